#!/usr/bin/env python3
"""What torchvision and PIL make of an image folder, for test_image_folder.

  image_folder_oracle.py ROOT OUT SIZE RESIZE

Writes under OUT: classes.txt (one per line), samples.txt ("label path" in
torchvision.datasets.ImageFolder's order), and for sample i: i.rgb (PIL's
convert("RGB"), HWC bytes, its size in sizes.txt), i.val (Resize(RESIZE) +
CenterCrop(SIZE) on the PIL image, HWC), i.train (RandomResizedCrop(SIZE) +
RandomHorizontalFlip() after torch.manual_seed(i), HWC) with the crop box and
flip in boxes.txt ("top left height width flip", drawn again from the same seed).
"""
import os
import sys

import numpy as np
import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder


def main():
    root, out, size, resize = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ds = ImageFolder(root)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "classes.txt"), "w") as f:
        f.writelines(c + "\n" for c in ds.classes)
    val = T.Compose([T.Resize(resize), T.CenterCrop(size)])
    rrc, flip = T.RandomResizedCrop(size), T.RandomHorizontalFlip()
    with open(os.path.join(out, "samples.txt"), "w") as s, open(os.path.join(out, "sizes.txt"), "w") as z, \
            open(os.path.join(out, "boxes.txt"), "w") as b:
        for i, (path, label) in enumerate(ds.samples):
            s.write("%d %s\n" % (label, path))
            img = ds.loader(path)  # PIL: Image.open(path).convert("RGB")
            z.write("%d %d\n" % (img.height, img.width))
            np.asarray(img).tofile(os.path.join(out, "%d.rgb" % i))
            np.asarray(val(img)).tofile(os.path.join(out, "%d.val" % i))
            torch.manual_seed(i)
            np.asarray(flip(rrc(img))).tofile(os.path.join(out, "%d.train" % i))
            torch.manual_seed(i)
            top, left, h, w = T.RandomResizedCrop.get_params(img, rrc.scale, rrc.ratio)
            flipped = int(torch.rand(1).item() < 0.5)
            b.write("%d %d %d %d %d\n" % (top, left, h, w, flipped))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes an ImageNet-style folder of generated images: ROOT/{train,val}/class_XX/*.

An easy 10-class task: class c is a colour (hue c/10) with a bright square whose
position depends on c, plus noise; sizes vary and are not square. Files mix
.jpg, .JPEG and .png (RGB, grey, palette and RGBA PNGs, a grey JPEG) and a
nested subdirectory, as ImageFolder must read them all; a .txt is ignored.

  make_image_folder.py ROOT [--classes 10] [--train 40] [--val 10] [--seed 0] [--sizes 36,72]

--sizes LO,HI: each side is drawn in [LO, HI) (ImageNet-like: 300,500).
"""
import argparse
import colorsys
import os

import numpy as np
from PIL import Image


def image(rng, c, classes, lo, hi):
    h, w = int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
    r, g, b = colorsys.hsv_to_rgb(c / classes, 0.8, 0.5 + 0.3 * rng.random())
    px = np.empty((h, w, 3), np.float64)
    px[:] = (r * 255, g * 255, b * 255)
    y0, x0 = (c % 3) * h // 3, (c // 3 % 3) * w // 3  # where the square is: a second cue
    px[y0:y0 + h // 3, x0:x0 + w // 3] = 240
    px += rng.normal(0, 12, px.shape)
    return Image.fromarray(np.clip(px, 0, 255).astype(np.uint8), "RGB")


def save(img, directory, i):
    kind = i % 7
    if kind == 0:
        img.save(os.path.join(directory, "img_%03d.png" % i))
    elif kind == 1:
        img.convert("L").save(os.path.join(directory, "img_%03d.jpg" % i), quality=90)
    elif kind == 2:
        img.convert("P").save(os.path.join(directory, "img_%03d.PNG" % i))
    elif kind == 3:
        img.convert("RGBA").save(os.path.join(directory, "img_%03d.png" % i))
    elif kind == 4:
        sub = os.path.join(directory, "nested")
        os.makedirs(sub, exist_ok=True)
        img.save(os.path.join(sub, "img_%03d.jpeg" % i), quality=85)
    elif kind == 5:
        img.save(os.path.join(directory, "IMG_%03d.JPEG" % i), quality=95, subsampling=0)
    else:
        img.save(os.path.join(directory, "img_%03d.jpg" % i), quality=75)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--train", type=int, default=40)
    ap.add_argument("--val", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="36,72")
    a = ap.parse_args()
    lo, hi = (int(v) for v in a.sizes.split(","))
    rng = np.random.default_rng(a.seed)
    for split, n in (("train", a.train), ("val", a.val)):
        for c in range(a.classes):
            d = os.path.join(a.root, split, "class_%02d" % c)
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                save(image(rng, c, a.classes, lo, hi), d, i)
            with open(os.path.join(d, "notes.txt"), "w") as f:
                f.write("not an image\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes CIFAR-10 images as an ImageNet-style folder (ROOT/{train,val}/<class>/*.png) for the
imagefolder-* recipes: real photographs instead of make_image_folder.py's generated task.

  cifar_image_folder.py CIFAR_DIR ROOT [--train 5000] [--val 1000] [--jpeg]

CIFAR_DIR holds the binary batches (data_batch_1.bin.gz ... test_batch.bin.gz, batches.meta.txt;
see its README). The first --train records of the training batches and the first --val of the test
batch are written, PNG (lossless) or JPEG (quality 95) with --jpeg, 32x32 as they are.
"""
import argparse
import gzip
import os

import numpy as np
from PIL import Image

RECORD = 3073


def records(paths, count):
    out = []
    for p in paths:
        if len(out) >= count:
            break
        with gzip.open(p, "rb") as f:
            data = np.frombuffer(f.read(), np.uint8)
        if data.size % RECORD:
            raise SystemExit(f"{p}: {data.size} bytes is not a whole number of {RECORD}-byte records")
        out.extend(data.reshape(-1, RECORD)[: count - len(out)])
    if len(out) < count:
        raise SystemExit(f"asked for {count} images, {', '.join(paths)} hold {len(out)}")
    return out


def write(rows, root, split, classes, jpeg):
    for c in classes:
        os.makedirs(os.path.join(root, split, c), exist_ok=True)
    for i, r in enumerate(rows):
        label = int(r[0])
        if label >= len(classes):
            raise SystemExit(f"{split} record {i}: label {label}, outside the {len(classes)} classes")
        px = r[1:].reshape(3, 32, 32).transpose(1, 2, 0)
        name = os.path.join(root, split, classes[label], f"{i:05d}." + ("jpg" if jpeg else "png"))
        Image.fromarray(px, "RGB").save(name, quality=95) if jpeg else Image.fromarray(px, "RGB").save(name)


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("cifar_dir")
    a.add_argument("root")
    a.add_argument("--train", type=int, default=5000)
    a.add_argument("--val", type=int, default=1000)
    a.add_argument("--jpeg", action="store_true")
    o = a.parse_args()
    with open(os.path.join(o.cifar_dir, "batches.meta.txt")) as f:
        classes = [l.strip() for l in f if l.strip()]
    train = [os.path.join(o.cifar_dir, f"data_batch_{k}.bin.gz") for k in range(1, 6)]
    write(records(train, o.train), o.root, "train", classes, o.jpeg)
    write(records([os.path.join(o.cifar_dir, "test_batch.bin.gz")], o.val), o.root, "val", classes, o.jpeg)
    print(f"{o.root}: {o.train} training and {o.val} validation images in {len(classes)} classes")


if __name__ == "__main__":
    main()

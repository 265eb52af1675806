#!/usr/bin/env python3
"""The peer of `ddp-bench decode`: PIL over the same ImageFolder's files, one thread.

  decode_peer.py DIR [--repeats 3] [--mode decode|train|eval] [--size 224]

decode: torchvision's loader (Image.open(path).convert("RGB"), pixels loaded);
train/eval: plus torchvision's RandomResizedCrop + flip, or Resize + CenterCrop, on the PIL image.
"""
import argparse
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mode", default="decode")
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    torch.set_num_threads(1)
    paths = [p for p, _ in ImageFolder(a.dir).samples]
    tf = {"decode": None,
          "train": T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip()]),
          "eval": T.Compose([T.Resize((a.size * 256 + 112) // 224), T.CenterCrop(a.size)])}[a.mode]
    loader = ImageFolder(a.dir).loader
    best = 0.0
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for p in paths:
            img = loader(p)
            img.load()
            if tf is not None:
                img = tf(img)
        best = max(best, len(paths) / (time.perf_counter() - t0))
    print("PIL  %s: %d images, best of %d: %.1f images/s on 1 thread" % (a.mode, len(paths), a.repeats, best))


if __name__ == "__main__":
    main()

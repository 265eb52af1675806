#!/usr/bin/env python3
"""Writes tiny data sets in the real formats for the recipe tests.

usage: make_tiny_data.py OUT_DIR
  OUT_DIR/fashion/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz  (192 train, 40 test, 28x28)
  OUT_DIR/cifar10/data_batch_{1..5}.bin.gz, test_batch.bin.gz      (48 per batch, 40 test)
  OUT_DIR/tinyshakespeare/input.txt                                (20,000 characters of generated words)
Labels follow the images (class = brightest band), so a few steps can learn something.
"""
import gzip
import os
import random
import struct
import sys


def image(rng, label, c, h, w):
    # A noisy picture whose bright band's row encodes the label.
    px = bytearray(rng.randrange(0, 96) for _ in range(c * h * w))
    band = (label * h) // 10
    for ch in range(c):
        for x in range(w):
            px[ch * h * w + band * w + x] = 255
    return bytes(px)


def fashion(out, n_train, n_test, rng):
    os.makedirs(out, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = [rng.randrange(10) for _ in range(n)]
        with gzip.open(os.path.join(out, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28))
            for y in labels:
                f.write(image(rng, y, 1, 28, 28))
        with gzip.open(os.path.join(out, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n))
            f.write(bytes(labels))


def cifar(out, per_batch, n_test, rng):
    os.makedirs(out, exist_ok=True)
    names = [("data_batch_%d.bin.gz" % i, per_batch) for i in range(1, 6)] + [("test_batch.bin.gz", n_test)]
    for name, n in names:
        with gzip.open(os.path.join(out, name), "wb") as f:
            for _ in range(n):
                y = rng.randrange(10)
                f.write(bytes([y]) + image(rng, y, 3, 32, 32))


def text(out, n_chars, rng):
    # Lines of words over a small alphabet with a little structure (a word's letters follow one another), so
    # that a character model has something to learn; 58 distinct characters.
    os.makedirs(out, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines, size = [], 0
    while size < n_chars:
        words = []
        for _ in range(rng.randrange(3, 9)):
            start = rng.randrange(26)
            words.append("".join(letters[(start + k) % 26] for k in range(rng.randrange(2, 7))))
        line = " ".join(words).capitalize() + rng.choice(".,:;")
        lines.append(line)
        size += len(line) + 1
    with open(os.path.join(out, "input.txt"), "w") as f:
        f.write("\n".join(lines)[:n_chars])


if __name__ == "__main__":
    rng = random.Random(0)
    fashion(os.path.join(sys.argv[1], "fashion"), 192, 40, rng)
    cifar(os.path.join(sys.argv[1], "cifar10"), 48, 40, rng)
    text(os.path.join(sys.argv[1], "tinyshakespeare"), 20000, rng)

"""Exits 1 unless two ddp-train checkpoints hold the same step, epoch EPOCHS and bit-identical model (and weight
average) tensors: an interrupted and resumed run against an uninterrupted one.
usage: same_weights.py CHECKPOINT_A CHECKPOINT_B EPOCHS WHAT   (WHAT: "after the requeue", for the messages)"""
import sys

import torch

a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
epochs, what = int(sys.argv[3]), sys.argv[4]
if not (a["step"] == b["step"] and a["epoch"] == b["epoch"] == epochs):
    sys.exit("FAIL: steps %s and %s, epochs %s and %s (want %d) %s" % (a["step"], b["step"], a["epoch"], b["epoch"],
                                                                       epochs, what))
for part in ("model", "ema"):
    for k in a.get(part, {}):
        if not torch.equal(a[part][k], b[part][k]):
            sys.exit("FAIL: %s %s differs %s" % (part, k, what))
print("equal to the uninterrupted run %s: %d tensors, step %d" % (what, len(a["model"]), a["step"]))

#!/usr/bin/env python3
"""Checks that each layer includes only its own headers and those of lower layers.

Layers, lowest first: dist, data, parallel, train (include/ddp/<layer>/, src/<layer>/).
A file of layer L may include ddp/errors.h, ddp/<K>/... and src-private <K>/... headers
for K at or below L; the umbrella headers (ddp/dist.h, ddp/train.h, ddp/ddp.h) count as
their layer. Prints each violation as FILE:LINE and exits 1; exits 0 when clean.
usage: check-layers.py [ROOT]        check-layers.py --self-test
"""
import os
import re
import sys
import tempfile

RANK = {"dist": 1, "data": 2, "parallel": 3, "train": 4}
UMBRELLA = {"ddp/errors.h": 0, "ddp/dist.h": 1, "ddp/train.h": 4, "ddp/ddp.h": 5}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def rank_of_header(header):
    if header in UMBRELLA:
        return UMBRELLA[header]
    parts = header.split("/")
    if len(parts) > 2 and parts[0] == "ddp" and parts[1] in RANK:
        return RANK[parts[1]]
    if len(parts) > 1 and parts[0] in RANK:  # a private header of src/<layer>/
        return RANK[parts[0]]
    return 0


def violations(root):
    found = []
    for top in ("include/ddp", "src"):
        base = os.path.join(root, top)
        for d, _, files in os.walk(base):
            layer = os.path.relpath(d, base).split(os.sep)[0]
            if layer not in RANK:
                continue
            for f in sorted(files):
                path = os.path.join(d, f)
                with open(path, errors="replace") as text:
                    for n, line in enumerate(text, 1):
                        m = INCLUDE.match(line)
                        if m and rank_of_header(m.group(1)) > RANK[layer]:
                            found.append("%s:%d: layer '%s' includes '%s', which belongs to a higher layer"
                                         % (os.path.relpath(path, root), n, layer, m.group(1)))
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {"include/ddp/dist/a.h": '#include "ddp/errors.h"\n',
                          "src/data/b.cpp": '#include "ddp/dist/a.h"\n#include "dist/private.h"\n',
                          "src/dist/c.cpp": '#include <ATen/ATen.h>\n  #include "ddp/parallel/x.h"\n'}.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        got = violations(root)
        want = ["src/dist/c.cpp:2: layer 'dist' includes 'ddp/parallel/x.h', which belongs to a higher layer"]
        if got != want:
            print("self-test failed: got %r" % got)
            return 1
    print("self-test ok: a dist file including a parallel header is reported")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print("check-layers: %d include(s) go up a layer; move the code down or the include up" % len(found))
        return 1
    print("check-layers: every layer includes only itself and the layers below")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

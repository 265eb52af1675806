"""PyTorch side of the checkpoint interop tests (run with /usr/bin/python3, python3-torch 1.13).

  keys             print Net().state_dict()'s keys, one per line
  write DIR        train Net a little; save its state dict four ways (OrderedDict, "module."-prefixed as DDP
                   saves it, plain dict, as if saved on a GPU) and a checkpoint; write the expected values to
                   DIR/py_ref.{txt,bin}
  adam-write DIR [CPP_TORCH]  for each optimizer of ADAMS: train Net 3 steps on fixed batches, save {"model", "optimizer"}
                   to DIR/py_<kind>.pt, train 3 more; write the batches and the final state to DIR/py_adam_ref
  adam-check DIR   load DIR/cpp_<kind>.pt (C++ after those 6 steps) into Net and the optimizer; its tensors must
                   equal Python's own after 6 steps, and a 7th step from it must equal Python's 7th
  check DIR        load the C++ files DIR/cpp_sd.pt and DIR/cpp_ckpt.pt into a plain Net and SGD, compare
                   with DIR/cpp_ref.{txt,bin} exactly; exit 1 with a message on any difference

Net is defined identically in checkpoint_test_util.cpp. Reference files: one line per tensor
"name dtype ndim dims... offset nbytes" in .txt, raw little-endian bytes in .bin.
"""
import collections
import os
import pickletools
import sys
import zipfile

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import torch_adam  # noqa: E402
from torch_adam import python_adam_matches_cpp  # noqa: E402

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "uint8": torch.uint8}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.head = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 3)))
        self.scale = nn.Parameter(torch.ones(3))
        self.register_buffer("shift", torch.zeros(3))

    def forward(self, x):
        return self.head(self.bn(self.conv(x)).flatten(1)) * self.scale + self.shift


def write_ref(stem, tensors):
    offset = 0
    with open(stem + ".txt", "w") as txt, open(stem + ".bin", "wb") as bin_:
        for name, t in tensors:
            t = t.detach().contiguous()
            data = t.numpy().tobytes()
            dtype = [k for k, v in DTYPES.items() if v == t.dtype][0]
            dims = " ".join(str(d) for d in t.shape)
            txt.write(f"{name} {dtype} {t.dim()}{' ' + dims if dims else ''} {offset} {len(data)}\n")
            bin_.write(data)
            offset += len(data)


def read_ref(stem):
    data = open(stem + ".bin", "rb").read()
    out = {}
    for line in open(stem + ".txt"):
        f = line.split()
        name, dtype, ndim = f[0], DTYPES[f[1]], int(f[2])
        shape = [int(d) for d in f[3:3 + ndim]]
        offset, nbytes = int(f[3 + ndim]), int(f[4 + ndim])
        flat = torch.frombuffer(bytearray(data[offset:offset + nbytes]), dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(shape)
    return out


def same(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        sys.exit(f"MISMATCH {what}: got {got.dtype} {tuple(got.shape)} {got.flatten()[:4].tolist()}, "
                 f"want {want.dtype} {tuple(want.shape)} {want.flatten()[:4].tolist()}")


# Adam and AdamW with non-default settings (C++ builds the same in test_checkpoint_interop.cpp).
ADAMS = {
    "adam": lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-3),
    "adam-amsgrad": lambda p: torch.optim.Adam(p, lr=0.02, amsgrad=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
}


def batches():
    return torch.randn(7, 4, 1, 4, 4, generator=torch.Generator().manual_seed(5))


def adam_run(kind, steps, start=None):
    """Net and optimizer after `steps` steps from seed 1, or from `start` (a checkpoint dict) at step 6."""
    torch.manual_seed(1)
    m = Net()
    opt = ADAMS[kind](m.parameters())
    first = 0
    if start is not None:
        m.load_state_dict(start["model"])
        opt.load_state_dict(start["optimizer"])
        first = 6
    for x in batches()[first:steps]:
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
    return m, opt


def adam_write(d):
    torch.set_num_threads(1)
    ref = [("x", batches())]
    for kind in ADAMS:
        m, opt = adam_run(kind, 3)
        torch.save({"model": m.state_dict(), "optimizer": opt.state_dict()}, f"{d}/py_{kind}.pt")
        m, opt = adam_run(kind, 6)
        ref += [(f"{kind}/{k}", v) for k, v in m.state_dict().items()]
        # 1: C++'s steps 4-6 must land on Python's bit for bit (this torch's Adam computes as LibTorch's).
        ref.append((f"exact/{kind}", torch.tensor(float(python_adam_matches_cpp()), dtype=torch.float64)))
    write_ref(f"{d}/py_adam_ref", ref)


def adam_check(d):
    torch.set_num_threads(1)
    exact = python_adam_matches_cpp()
    for kind in ADAMS:
        ckpt = torch.load(f"{d}/cpp_{kind}.pt")
        m, opt = adam_run(kind, 6)
        ours, theirs = opt.state_dict(), ckpt["optimizer"]
        check_groups(kind, theirs, ours)
        if exact:  # Python's Adam computes as LibTorch's: C++'s 6th step is ours, to the bit
            for k, v in m.state_dict().items():
                same(f"{kind} model {k}", ckpt["model"][k], v)
            for i, s in ours["state"].items():
                for k, v in s.items():
                    same(f"{kind} state[{i}][{k}]", theirs["state"][i][k], v)
            m7, _ = adam_run(kind, 7)
            n7, _ = adam_run(kind, 7, start=ckpt)
            for k, v in m7.state_dict().items():
                same(f"{kind} step 7 from the C++ state: {k}", n7.state_dict()[k], v)
        else:  # what C++ loaded from our step-3 file, saved back untouched, is that file's contents
            mine, back = torch.load(f"{d}/py_{kind}.pt"), torch.load(f"{d}/cpp_{kind}_loaded.pt")
            for k, v in mine["model"].items():
                same(f"{kind} model {k} after the round trip", back["model"][k], v)
            check_groups(kind, back["optimizer"], mine["optimizer"])
            for i, s in mine["optimizer"]["state"].items():
                for k, v in s.items():
                    same(f"{kind} state[{i}][{k}] after the round trip", torch.as_tensor(back["optimizer"]["state"][i][k]),
                         torch.as_tensor(v))
            for i, s in theirs["state"].items():  # C++'s 6 steps counted; a 7th step from its state runs
                if int(torch.as_tensor(s["step"]).item()) != 6:
                    sys.exit(f"MISMATCH {kind} state[{i}]['step'] after 6 steps: {s['step']}")
            adam_run(kind, 7, start=ckpt)
    print("OK")


def check_groups(kind, theirs, ours):
    """The same state keys and param_groups; of the groups' settings, those LibTorch's Adam knows (torch 2.x's
    Python adds fused=None and decoupled_weight_decay, which its load_state_dict fills in)."""
    keys = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "params")
    pick = lambda groups: [{k: (list(g[k]) if k in ("betas", "params") else g[k]) for k in keys if k in g} for g in groups]
    if pick(theirs["param_groups"]) != pick(ours["param_groups"]):
        sys.exit(f"MISMATCH {kind} param_groups: {pick(theirs['param_groups'])} != {pick(ours['param_groups'])}")
    if sorted(theirs["state"]) != sorted(ours["state"]):
        sys.exit(f"MISMATCH {kind} state keys: {sorted(theirs['state'])} != {sorted(ours['state'])}")
    for i, s in ours["state"].items():
        if sorted(theirs["state"][i]) != sorted(s):
            sys.exit(f"MISMATCH {kind} state[{i}] keys: {sorted(theirs['state'][i])} != {sorted(s)}")


def write(d):
    torch.manual_seed(0)
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        loss = m(torch.randn(4, 1, 4, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    sd = m.state_dict()
    torch.save(sd, f"{d}/py_ordered.pt")
    # What DDP's state_dict() looks like: every key and metadata entry under "module".
    prefixed = collections.OrderedDict(("module." + k, v) for k, v in sd.items())
    prefixed._metadata = collections.OrderedDict([("", {"version": 1})])
    for k, v in sd._metadata.items():
        prefixed._metadata["module" + ("." + k if k else "")] = v
    torch.save(prefixed, f"{d}/py_module.pt")
    torch.save(dict(sd), f"{d}/py_plain.pt")
    # As if saved on a GPU: the storages' location reads "cuda:0" (we load them on the CPU).
    with zipfile.ZipFile(f"{d}/py_ordered.pt") as src, zipfile.ZipFile(f"{d}/py_cuda.pt", "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("/data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
                assert b"cuda:0" in data
            dst.writestr(name, data)
    rng = torch.get_rng_state()
    ckpt = {"model": sd, "optimizer": opt.state_dict(), "epoch": 7, "step": 2**33 + 5, "rng": {"cpu": rng},
            "config": {"lr": 0.1, "name": "py", "neg": -3, "big": -2**40, "flag": True}, "sampler": {"epoch": 7}}
    torch.save(ckpt, f"{d}/py_ckpt.pt")
    draw = torch.rand(5)
    ref = [("model/" + k, v) for k, v in sd.items()]
    ref += [(f"momentum/{i}", opt.state[p]["momentum_buffer"]) for i, p in enumerate(m.parameters())]
    ref.append(("rng_draw", draw))
    write_ref(f"{d}/py_ref", ref)


def check(d):
    ref = read_ref(f"{d}/cpp_ref")
    keys = list(Net().state_dict().keys())
    sd = torch.load(f"{d}/cpp_sd.pt", weights_only=True)  # as PyTorch >= 2.6 loads by default
    if type(sd) is not collections.OrderedDict or list(sd.keys()) != keys:
        sys.exit(f"MISMATCH cpp_sd.pt: {type(sd).__name__} with keys {list(sd.keys()) if isinstance(sd, dict) else None}")
    # The checkpoint names only globals weights_only=True allows (1.13's weights-only loader itself
    # lacks BINFLOAT, which newer ones read, so the whole file cannot be loaded that way here).
    with zipfile.ZipFile(f"{d}/cpp_ckpt.pt") as z:
        pkl = z.read([n for n in z.namelist() if n.endswith("/data.pkl")][0])
    allowed = torch._weights_only_unpickler._get_allowed_globals()
    for op, arg, _ in pickletools.genops(pkl):
        if op.name == "GLOBAL" and arg.replace(" ", ".") not in allowed:
            sys.exit(f"MISMATCH cpp_ckpt.pt uses the global {arg}, which weights_only=True refuses")
    m = Net()
    m.load_state_dict(sd)  # strict
    for k, v in m.state_dict().items():
        same(f"cpp_sd.pt {k}", v, ref["model/" + k])

    ckpt = torch.load(f"{d}/cpp_ckpt.pt")
    if type(ckpt["model"]) is not collections.OrderedDict or type(ckpt["optimizer"]["state"][0]) is not dict:
        sys.exit("MISMATCH cpp_ckpt.pt: model should be an OrderedDict, optimizer state plain dicts")
    m2 = Net()
    m2.load_state_dict(ckpt["model"])
    for k, v in m2.state_dict().items():
        same(f"cpp_ckpt.pt model {k}", v, ref["model/" + k])
    want = {"epoch": 3, "step": 12, "config": {"lr": 0.05, "name": "interop", "flag": True},
            "sampler": {"epoch": 3, "seed": 17}, "schedule": {"warmup": 0.5}, "extra": {"note": "from C++"}}
    for k, v in want.items():
        if ckpt[k] != v:
            sys.exit(f"MISMATCH cpp_ckpt.pt[{k!r}]: {ckpt[k]!r} != {v!r}")
    opt = torch.optim.SGD(m2.parameters(), lr=1.0)
    opt.load_state_dict(ckpt["optimizer"])
    g = opt.param_groups[0]
    got = (g["lr"], g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"])
    if got != (0.05, 0.9, 0.0, 1e-4, True):
        sys.exit(f"MISMATCH param group {got}")
    for i, p in enumerate(m2.parameters()):
        same(f"momentum_buffer {i}", opt.state[p]["momentum_buffer"], ref[f"momentum/{i}"])
    torch.set_rng_state(ckpt["rng"]["cpu"])
    same("rng draw", torch.rand(5), ref["rng_draw"])
    # The loaded optimizer works: one step runs.
    m2(torch.randn(2, 1, 4, 4)).sum().backward()
    opt.step()
    print("OK")


if __name__ == "__main__":
    mode = sys.argv[1]
    if len(sys.argv) > 3:  # adam-write/adam-check DIR CPP_TORCH_VERSION
        torch_adam.CPP_TORCH = sys.argv[3]
    if mode == "keys":
        print("\n".join(Net().state_dict().keys()))
    elif mode == "write":
        write(sys.argv[2])
    elif mode == "check":
        check(sys.argv[2])
    elif mode == "adam-write":
        adam_write(sys.argv[2])
    elif mode == "adam-check":
        adam_check(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")

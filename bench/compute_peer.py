"""PyTorch eager's training step on synthetic data, the peer of `ddp-bench compute`: the same airbench94-shaped
network (ddp::models::Airbench: frozen 2x2 whitening conv, GELU, three conv groups 64/256/256 with BatchNorm, max
pools, a bias-free head, logits x 1/9) or the course MLP, the same step (SGD lr 0.01 momentum 0.9, cross-entropy on
float32 logits, bfloat16 under autocast), the same timing (best of --steps after 2 untimed, each step timed once the
device has run it), the same table rows and JSON keys.
  python3 bench/compute_peer.py --device cuda --models airbench --batch 1024 --layouts nhwc --precisions fp32,bf16
--cuda-graph adds rows for the same step captured whole in a CUDA graph (torch.cuda.graph): what graphs give; they
run after every eager row, and one whose capture fails is kept with its error.
Threads follow OMP_NUM_THREADS (1 when unset)."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def whitening(images, kernel=2, eps=5e-4):
    """ddp::models::airbench_whitening: eigenvectors of the k x k patches' covariance / sqrt(eigenvalue + eps),
    largest first, then negated."""
    c = images.size(1)
    patches = images.double().unfold(2, kernel, 1).unfold(3, kernel, 1).permute(0, 2, 3, 1, 4, 5)
    patches = patches.reshape(-1, c * kernel * kernel)
    values, vectors = torch.linalg.eigh(patches.t().mm(patches) / patches.size(0))
    filters = vectors.t().flip(0).reshape(c * kernel * kernel, c, kernel, kernel)
    filters = filters / (values.flip(0) + eps).sqrt().view(-1, 1, 1, 1)
    return torch.cat([filters, -filters]).float()


def conv3x3(cin, cout):
    conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[:min(cin, cout)])
    return conv


def batch_norm(features, momentum):
    bn = nn.BatchNorm2d(features, eps=1e-12, momentum=momentum)
    bn.weight.requires_grad_(False)
    return bn


class Group(nn.Module):
    def __init__(self, cin, cout, momentum):
        super().__init__()
        self.conv1, self.norm1 = conv3x3(cin, cout), batch_norm(cout, momentum)
        self.conv2, self.norm2 = conv3x3(cout, cout), batch_norm(cout, momentum)

    def forward(self, x):
        h = F.gelu(self.norm1(F.max_pool2d(self.conv1(x), 2)))
        return F.gelu(self.norm2(self.conv2(h)))


class Airbench(nn.Module):
    def __init__(self, filters, widths=(64, 256, 256), momentum=0.4, scale=1 / 9, classes=10):
        super().__init__()
        k = filters.size(0)
        self.whiten = nn.Conv2d(3, k, filters.size(2), bias=True)
        with torch.no_grad():
            self.whiten.weight.copy_(filters)
            self.whiten.bias.zero_()
        self.whiten.weight.requires_grad_(False)
        self.group1 = Group(k, widths[0], momentum)
        self.group2 = Group(widths[0], widths[1], momentum)
        self.group3 = Group(widths[1], widths[2], momentum)
        self.head = nn.Linear(widths[2], classes, bias=False)
        self.scale = scale

    def forward(self, x):
        h = self.group3(self.group2(self.group1(F.gelu(self.whiten(x)))))
        return self.head(F.max_pool2d(h, 3).flatten(1)) * self.scale


class MLP(nn.Module):
    """ddp::models::MLP's defaults: bias-free 1024-256-256-256-32 with tanh."""

    def __init__(self):
        super().__init__()
        sizes = [1024, 256, 256, 256, 32]
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.tanh(x)
        return x


def make(name):
    if name == "airbench":
        return Airbench(whitening(torch.randn(64, 3, 32, 32))), [3, 32, 32], 10
    if name == "mlp":
        return MLP(), [1024], 32
    sys.exit(f"compute_peer.py: unknown model '{name}'; valid: airbench, mlp")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(net, x, y, steps, bf16, device, graph):
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=not graph)  # a graph keeps its gradients' memory
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=not graph):
            logits = net(x).float()
        F.cross_entropy(logits, y).backward()
        opt.step()

    run = step
    if graph:  # as torch.cuda.graph's docs: warm up on a side stream, then capture one whole step
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        run = g.replay
    best = float("inf")
    for i in range(steps + 2):
        sync(device)
        t = time.perf_counter()
        run()
        sync(device)
        if i >= 2:
            best = min(best, time.perf_counter() - t)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="airbench")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--layouts", default="nchw,nhwc")
    p.add_argument("--device", default="cpu")
    p.add_argument("--cuda-graph", action="store_true", help="also the step captured in a CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="")
    a = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"compute_peer.py: --device {a.device}: no GPU is visible to torch {torch.__version__}")
    if device.type == "cuda" and device.index is None:  # named as ours names it: cuda:0, not cuda
        device = torch.device("cuda", torch.cuda.current_device())
    if a.cuda_graph and device.type != "cuda":
        sys.exit("compute_peer.py: --cuda-graph needs --device cuda")
    torch.manual_seed(a.seed)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"the CPU, {torch.get_num_threads()} thread(s)"
    print(f"pytorch compute: torch {torch.__version__} on {where}")
    print(f"{'model':<9} {'layout':<6} {'dtype':<5} {'graph':<5} {'samples/s':>10}")
    doc = dict(torch=torch.__version__, device=str(device), batch=a.batch, runs=[])
    rows = []  # (model, net, params, trainable, input, labels, layout, precision), every eager row before any graph
    for name in a.models.split(","):
        net, shape, classes = make(name)
        net = net.to(device).train()
        params = sum(t.numel() for t in net.parameters())
        trainable = sum(t.numel() for t in net.parameters() if t.requires_grad)
        x = torch.randn([a.batch] + shape).to(device)
        y = torch.randint(0, classes, (a.batch,)).to(device)
        layouts = [lay for lay in ("nchw", "nhwc") if lay in a.layouts.split(",")] if len(shape) == 3 else ["-"]
        for layout in layouts:
            xl = x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x
            rows += [(name, net, params, trainable, xl, y, layout, p) for p in a.precisions.split(",")]
    measure = lambda r, graph: a.batch / step_seconds(r[1], r[4], r[5], a.steps, r[7] == "bf16", device, graph)
    measure_rows(rows, [False, True] if a.cuda_graph else [False], measure, doc, a.json)


def measure_rows(rows, graphs, measure, doc, json_path):
    """Each row eager, then each captured in a CUDA graph: a capture that fails is a row with its error (the eager
    figures stand), and the JSON is written after every row (a later failure keeps what was measured)."""
    for graph in graphs:
        for r in rows:
            name, _, params, trainable, _, _, layout, precision = r
            run = dict(model=name, params=params, trainable=trainable, layout=layout, precision=precision,
                       cuda_graph=graph, samples_per_s=None)
            try:
                run["samples_per_s"] = measure(r, graph)
                shown = f"{run['samples_per_s']:10.1f}"
            except Exception as e:  # noqa: BLE001 - a capture's error is reported, not fatal
                if not graph:
                    raise
                run["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                shown = f"failed: {run['error']}"
            print(f"{name:<9} {layout:<6} {precision:<5} {'yes' if graph else 'no':<5} {shown}", flush=True)
            doc["runs"].append(run)
            if json_path:
                with open(json_path, "w") as f:
                    json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()

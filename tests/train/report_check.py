#!/usr/bin/env python3
"""Checks a report page as Chromium rendered it (the DOM from --dump-dom) against the runs' metrics.jsonl:
every chart plotted one point per logged epoch (and evaluation within one) / step (and one line per rank), no script or console error,
Chart.js 3.9 ran, and each run's status. usage: report_check.py DOM_FILE STATUS RUN_DIR [RUN_DIR...]
Exit 1 with the differences when the page is wrong."""
import html, json, re, sys

def logged(run_dir):
    epochs, evals, train, world = {}, {}, {}, 0
    with open(run_dir + "/metrics.jsonl") as f:
        for text in f:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if line.get("kind") == "epoch":
                epochs[line["step"]] = line
            elif line.get("kind") == "eval":
                evals[line["step"]] = line
            elif line.get("kind") == "train":
                train[line["step"]] = line
            elif line.get("kind") == "start":
                world = line["world"]
    return len(epochs), len(evals), len(train), world

def main():
    dom_file, status, run_dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    dom = open(dom_file, encoding="utf-8", errors="replace").read()
    m = re.search(r'<pre id="render-check">(.*?)</pre>', dom, re.S)
    if not m:
        sys.exit("FAIL: no render-check in the rendered page (the page's script did not run)")
    check = json.loads(html.unescape(m.group(1)))
    problems = []
    if check["errors"]:
        problems.append("errors in the page: %s" % check["errors"])
    if not str(check.get("chartjs")).startswith("3.9"):
        problems.append("Chart.js did not run (version %r)" % check.get("chartjs"))
    charts = check["charts"]
    several = len(run_dirs) > 1
    for name in ("loss-epoch", "acc-epoch", "loss-step", "acc-step", "lr-step", "rank-throughput", "ddp-time"):
        if name not in charts:
            problems.append("chart %s missing" % name)
    for i, run_dir in enumerate(run_dirs):
        epochs, evals, steps, world = logged(run_dir)
        if epochs < 1 or steps < 1 or world < 1:
            problems.append("%s: nothing logged (%d epochs, %d steps, world %d)" % (run_dir, epochs, steps, world))
        run = check["runs"][i] if i < len(check["runs"]) else {}
        if run.get("status") != status:
            problems.append("%s: status %r, expected %r" % (run_dir, run.get("status"), status))
        prefix = run.get("name", "?") + ": " if several else ""
        want = {("loss-epoch", "val"): epochs + evals, ("loss-epoch", "train (epoch mean)"): epochs,
                ("acc-epoch", "acc1"): epochs + evals, ("acc-epoch", "acc5"): epochs + evals,
                ("loss-step", "train loss"): steps, ("acc-step", "train acc1"): steps, ("lr-step", "lr"): steps}
        for r in range(world):
            want[("rank-throughput", "rank %d" % r)] = steps
            want[("ddp-time", "rank %d communication" % r)] = steps
            want[("ddp-time", "rank %d exposed" % r)] = steps
        for (chart, label), n in want.items():
            got = [d["points"] for d in charts.get(chart, []) if d["label"] == prefix + label]
            if got != [n]:
                problems.append("%s: chart %s, line %r: %s points, logged %d" % (run_dir, chart, prefix + label, got, n))
    if problems:
        sys.exit("FAIL:\n  " + "\n  ".join(problems))
    print("report ok: %s" % ", ".join("%s %d epochs" % (r["name"], r["epochs"]) for r in check["runs"]))

main()

"""A merged ddp-train timeline (--timeline FILE) of a run on DEVICE: every forward, backward and optimizer step of
the host's "compute" track has its twin on the device's own track "compute (DEVICE)" (timeline::DeviceSpan: CUDA
events), each starting no earlier than the host began to queue it. Run by scripts/device-check.sh on a GPU.
  python3 timeline_device_check.py FILE cuda:0"""
import json
import sys


def main():
    path, device = sys.argv[1], sys.argv[2]
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    own = "compute (" + device + ")"
    for name in ("forward", "backward", "optimizer step"):
        host = sorted((e for e in events if e["cat"] == "compute" and e["name"] == name), key=lambda e: (e["pid"], e["ts"]))
        dev = sorted((e for e in events if e["cat"] == own and e["name"] == name), key=lambda e: (e["pid"], e["ts"]))
        if not host or len(host) != len(dev):
            sys.exit(f"timeline: {len(host)} host '{name}' events, {len(dev)} on '{own}'")
        late = [(h["ts"], d["ts"]) for h, d in zip(host, dev) if d["ts"] + 1000 < h["ts"]]  # 1 ms: clocks' anchor
        if late:
            sys.exit(f"timeline: '{name}' on {own} starts before the host queued it: {late[:3]}")
        print(f"{name}: {len(dev)} on {own}, device time {sum(e['dur'] for e in dev) / 1000:.1f} ms, "
              f"host time {sum(e['dur'] for e in host) / 1000:.1f} ms")


if __name__ == "__main__":
    main()

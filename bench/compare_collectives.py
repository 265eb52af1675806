"""Merges JSON results of ddp-bench collectives and the PyTorch peer into one
table: our time, the peer's time, and the ratio (peer / ours: above 1 means we
are faster). Each argument may list several runs separated by commas; the
fastest run of each (op, size) counts."""
import json
import sys


def load(paths):
    """Results of one or more runs; the fastest run of each (op, size) counts."""
    best, meta = {}, None
    for path in paths.split(","):
        with open(path) as f:
            d = json.load(f)
        meta = meta or d
        for r in d["results"]:
            key = (r["op"], r["bytes"])
            if key not in best or r["time_us"] < best[key]["time_us"]:
                best[key] = r
    return meta, best


def main():
    ours_d, ours = load(sys.argv[1])
    peer_d, peer = load(sys.argv[2]) if len(sys.argv) > 2 else ({}, {})
    in_run = "raw c10d ProcessGroupGloo in the same run" if ours_d["backend"] == "gloo" else "raw MPI in the same run"
    print(f"# ours: {ours_d['backend']} x{ours_d['world']}; peer: {peer_d.get('tool', in_run)}")
    print(f"{'op':<15}{'size(B)':>10}{'ours(us)':>11}{'busbw':>8}{'peer(us)':>11}{'busbw':>8}{'peer/ours':>11}")
    for key, r in ours.items():
        p = peer.get(key)
        p_us = p["time_us"] if p else r.get("raw_mpi_time_us", r.get("raw_c10d_time_us"))
        p_bw = p["busbw_gbps"] if p else None
        line = f"{key[0]:<15}{key[1]:>10}{r['time_us']:>11.1f}{r['busbw_gbps']:>8.3f}"
        if p_us:
            line += f"{p_us:>11.1f}{(p_bw if p_bw is not None else r['busbw_gbps'] * r['time_us'] / p_us):>8.3f}{p_us / r['time_us']:>11.2f}"
        print(line)


if __name__ == "__main__":
    main()

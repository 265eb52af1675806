"""One row of bench/gpt_race.sh: for each target the seconds and step of the first evaluation at or below it,
then the final validation loss and the training tokens per second."""


def race_line(evals, targets, tokens_per_s):
    """evals: (step, validation loss, seconds since the start) in order; targets: losses as strings."""
    cols = []
    for t in targets:
        hit = next((e for e in evals if e[1] <= float(t)), None)
        cols.append(f"to {t}: " + (f"{hit[2]:6.1f} s (step {hit[0]:4d})" if hit else "  not reached   "))
    return "  ".join(cols) + f"  final val {evals[-1][1]:.4f}  {tokens_per_s:8.0f} training tokens/s"

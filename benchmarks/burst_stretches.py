"""How many steps could "several rounds per pass" merge? Issue 14's last lever, sized first.

A burst can run k decode rounds in one set of numpy calls only while nothing changes the batch:
no prefill chunk, no request joining or leaving, and (for draws to stay per round) no KV block
reservation changing what is held. This reads the step log of a whole-trace run and cuts it
into stretches of consecutive steps with no prefill tokens and the same running count and KV
blocks; a burst engine could make each stretch one pass. With perfect amortisation a stretch
costs one step, so (stretches / steps) bounds the per-step cost it could reach from below, as a
fraction of today's; "no KV condition" drops the block test (a burst that reserves ahead). A
step where one request leaves as another joins keeps the count and is missed, so the
stretches are if anything too long and the bound too low.
Run: .venv/bin/python benchmarks/burst_stretches.py [POLICY ...]
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_sim import TRACE  # the same whole-trace run as the speed benchmark


def stretch_lengths(same: np.ndarray) -> np.ndarray:
    """Lengths of the runs of steps joined by `same` (same[i]: step i+1 continues step i)."""
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    return np.diff(np.append(starts, len(same) + 1))


def summarise(lengths: np.ndarray) -> dict[str, float]:
    steps = lengths.sum()
    return {
        "steps": int(steps),
        "stretches": len(lengths),
        "bound": len(lengths) / steps,  # per-step cost floor as a fraction of today's
        "steps_in_4plus": float(lengths[lengths >= 4].sum() / steps),
        "steps_in_8plus": float(lengths[lengths >= 8].sum() / steps),
    }


def main() -> None:
    from dsim.run import RunSpec, simulate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policies", nargs="*", default=["fixed:3", "dspark"])
    args = ap.parse_args()
    print("| policy | condition | steps | stretches | bound | steps in >= 4 | in >= 8 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for policy in args.policies:
        log = simulate(RunSpec(trace=TRACE, policy=policy)).steps
        decode = (log.prefill_tokens[1:] == 0) & (log.num_running[1:] == log.num_running[:-1])
        blocks = log.kv_blocks_used[1:] == log.kv_blocks_used[:-1]
        for name, same in (("all", decode & blocks), ("no KV condition", decode)):
            s = summarise(stretch_lengths(same))
            print(
                f"| {policy} | {name} | {s['steps']:,} | {s['stretches']:,} | {s['bound']:.3f} "
                f"| {s['steps_in_4plus']:.1%} | {s['steps_in_8plus']:.1%} |"
            )


if __name__ == "__main__":
    main()

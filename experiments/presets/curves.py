"""Print every preset's served conditional curve and tau for each target (docs/presets.md).

PYTHONPATH=$PWD python experiments/presets/curves.py > experiments/presets/curves.md
"""

from __future__ import annotations

import numpy as np

from dsim.acceptance.measure import served_curve
from dsim.acceptance.presets import FITTED, TABLE1, TARGETS
from dsim.acceptance.sources import parse_acceptance

N_REQUESTS, TOKENS = 2000, 300


def main() -> None:
    print(
        f"Served at full verification (gamma 7): {N_REQUESTS} requests x {TOKENS} tokens, seed 0."
    )
    print("\n| target | preset | conditional acceptance k=1..7 | tau | Table 1 | tau error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for target in TARGETS:
        for drafter, domain in FITTED:
            source = parse_acceptance(f"preset:{drafter}:{domain}:{target}", 7)
            curve, tau, _ = served_curve(source, N_REQUESTS, TOKENS, np.random.default_rng(0))
            ref = TABLE1[target, drafter, domain]
            cells = " ".join(f"{c:.3f}" for c in curve)
            print(f"| {target} | {drafter}:{domain} | {cells} | {tau:.3f} | {ref} | "
                  f"{tau / ref - 1:+.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()

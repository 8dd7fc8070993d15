"""Reference acceptance of Qwen3-8B drafters (DSpark paper, Table 1; block 7, temperature 1).

Each preset pairs the published accepted length tau (incl. the bonus token) with the shape of the
position-wise conditional acceptance that the paper reports for that drafter family: parallel
drafters (DFlash) decay along the block, AR drafters (Eagle3) start lower and rise or stay flat,
the semi-AR DSpark starts high and stays high. The parametric model shifts the shape in logit
space until its tau at full verification of 7 drafts matches the reference.
Domains: math = GSM8K, code = HumanEval, chat = MT-Bench.
"""

from __future__ import annotations

PRESET_GAMMA = 7

# (drafter, domain) -> (reference tau at block 7, conditional acceptance shape over 7 positions)
PRESETS: dict[tuple[str, str], tuple[float, tuple[float, ...]]] = {
    ("eagle3", "math"): (5.30, (0.81, 0.82, 0.83, 0.84, 0.84, 0.85, 0.85)),
    ("eagle3", "code"): (4.33, (0.70, 0.72, 0.74, 0.75, 0.76, 0.77, 0.78)),
    ("eagle3", "chat"): (2.66, (0.53, 0.58, 0.62, 0.66, 0.69, 0.72, 0.74)),
    ("dflash", "math"): (5.33, (0.88, 0.87, 0.86, 0.85, 0.84, 0.83, 0.82)),
    ("dflash", "code"): (4.64, (0.87, 0.85, 0.84, 0.82, 0.81, 0.79, 0.78)),
    ("dflash", "chat"): (3.11, (0.72, 0.70, 0.69, 0.67, 0.66, 0.64, 0.63)),
    ("dspark", "math"): (6.17, (0.93, 0.93, 0.93, 0.93, 0.93, 0.93, 0.93)),
    ("dspark", "code"): (5.52, (0.89, 0.89, 0.88, 0.88, 0.88, 0.87, 0.87)),
    ("dspark", "chat"): (3.72, (0.76, 0.75, 0.75, 0.74, 0.74, 0.73, 0.73)),
}

DRAFTERS = sorted({d for d, _ in PRESETS})
DOMAINS = sorted({m for _, m in PRESETS})

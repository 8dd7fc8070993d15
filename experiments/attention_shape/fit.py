"""Which shape explains measured verify-step latency: per-token work, attention flops (B x C),
or per-sequence KV reads (R x C)? Weighted least squares on relative error, one line per model.

Usage: python experiments/attention_shape/fit.py [PROFILE.csv]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent


def fit(y: np.ndarray, columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    design = np.column_stack([np.ones_like(y), *columns])
    coef, *_ = np.linalg.lstsq(design / y[:, None], np.ones_like(y), rcond=None)
    return coef, design @ coef / y - 1.0


def main(path: Path) -> None:
    df = pd.read_csv(path)
    if "phase" in df:
        df = df[df["phase"] == "verify"]
    y = df["latency_ms"].to_numpy(float)
    b, r, c = (df[k].to_numpy(float) for k in ("batch_tokens", "num_seqs", "context_len"))
    shapes = {
        "a + b*B": [b],
        "a + b*B + r*R": [b, r],
        "a + b*B + d*B*C (attention flops)": [b, b * c],
        "a + b*B + c*R*C (KV reads)": [b, r * c],
        "a + b*B + c*R*C + d*B*C (GPU estimate's shape)": [b, r * c, b * c],
    }
    print(f"{path.name}: {len(y)} verify points")
    for name, cols in shapes.items():
        coef, err = fit(y, cols)
        a = np.abs(err)
        print(f"{name:48s} median |err| {np.median(a):6.1%}  worst {a.max():6.1%}  coef {coef}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "cpu_rc.csv")

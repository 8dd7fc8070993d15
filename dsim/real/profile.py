"""A load profile of real mode's own verify step (the validation's step-time check).

`dsim profile` times the transformers model with a DynamicCache. Real mode runs a different
step: flattened tokens over a KV pool read in place (`dsim.real.ragged`), the LM head and
softmax at every verified position, then rejection sampling over the full vocabulary. This
module times exactly that, `RealBackend.verify`, on the same grid (R requests with
context_len cached tokens, each verifying q = B / R tokens: an anchor and q - 1 drafts), so the
validation can tell how much of a simulation error comes from the profile's method.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dsim.hardware.latency import write_profile
from dsim.hardware.measure import Grid, cpu_timer, time_point
from dsim.models.drafters import Draft
from dsim.real.backend import RealBackend


def measure_real_profile(
    target, drafter, grid: Grid, out: str | Path, repeats: int = 5, warmup: int = 2
) -> pd.DataFrame:
    """Median, p10, p90 of `RealBackend.verify` per grid point, with random drafts over the
    drafter's vocabulary (acceptance does not change the work: every verified position is
    computed and sampled either way)."""
    gen = torch.Generator().manual_seed(0)
    vocab = drafter.vocab
    rows = []
    load_before = os.getloadavg()
    for ctx, b, r in grid.points():
        q = b // r
        prompts = [[0] * ctx for _ in range(r)]
        backend = RealBackend(target, drafter, prompts, np.full(r, 1 << 30), gamma=max(q - 1, 1))
        backend.bind(r, np.random.default_rng(0))
        store = backend.passes.store
        for rid in range(r):
            store.open(rid, ctx + q)
            backend.hidden[rid], backend.anchor[rid] = torch.zeros(target.hidden_size), 1
        store.kv.normal_(generator=gen)
        idx, lengths = np.arange(r), np.full(r, q - 1)
        draft = Draft(
            vocab[torch.randint(0, len(vocab), (r, max(q - 1, 1)), generator=gen)],
            torch.softmax(torch.randn(r, max(q - 1, 1), len(vocab), generator=gen), -1),
            torch.full((r, max(q - 1, 1)), 0.5),
        )

        def step(backend=backend, idx=idx, lengths=lengths, draft=draft) -> None:
            backend.drafting, backend._draft = idx, draft
            backend.verify(idx, lengths, None)

        def reset(backend=backend, r=r, ctx=ctx) -> None:
            for rid in range(r):
                backend.passes.store.lengths[rid] = ctx
                backend.outputs[rid].clear()

        reset()
        times = time_point(step, reset, cpu_timer, repeats, warmup)
        p10, p50, p90 = np.percentile(times * 1e3, [10, 50, 90])
        rows.append((b, ctx, p50, r, p10, p90))
    cols = ["batch_tokens", "context_len", "latency_ms", "num_seqs"]
    df = pd.DataFrame(rows, columns=[*cols, "latency_ms_p10", "latency_ms_p90"])
    df = df.assign(device="cpu", model=f"{target.name} real-mode verify step", dtype="float32")
    meta = {
        "estimate": False,
        "method": "measured: dsim.real.backend.RealBackend.verify (flattened target pass over a "
        "KV pool, LM head and softmax at every position, rejection sampling), R requests x q "
        "tokens, cache lengths restored after every step",
        "model": target.name,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "warmup": warmup,
        "grid": {"batch_tokens": grid.batch_tokens, "seqs": grid.seqs, "contexts": grid.contexts},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    write_profile(df, out, meta)
    return df

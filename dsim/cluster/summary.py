"""Per-replica figures and load imbalance for summary.json."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsim.cluster.disagg import seconds_per_token
from dsim.cluster.topology import PREFILL, Topology, joined
from dsim.engine.steplog import StepLog
from dsim.metrics import mean_batch_size


def replica_figures(
    requests: pd.DataFrame, logs: list[StepLog], roles: tuple[str, ...], duration: float
) -> dict:
    """`per_replica`: one entry per replica; `load_imbalance`: the most output tokens a
    replica emitted over the mean, across the replicas that decode (1 = perfectly even).
    Disaggregated, also `prefill_busy_max` (the busiest prefill replica's busy fraction: near 1,
    prefill limits the run), `prefill_busy_mean`, `prefill_replicas` and `mean_batch_size`
    over the decode replicas' steps only."""
    finished_on = requests["replica"].to_numpy()
    tokens = requests["output_tokens"].to_numpy()
    per = []
    for k, (log, role) in enumerate(zip(logs, roles, strict=True)):
        mine = finished_on == k
        busy = float(log.latency_s.sum())
        per.append(
            {
                "replica": k,
                "role": role,
                "requests_finished": int(mine.sum()),
                "output_tokens": int(tokens[mine].sum()),
                "steps": len(log.latency_s),
                "busy_fraction": busy / duration if duration > 0 else float("nan"),
                "mean_batch_size": mean_batch_size(log),
                "kv_peak_blocks": int(log.kv_blocks_used.max()) if len(log.latency_s) else 0,
            }
        )
    served = np.array([p["output_tokens"] for p in per if p["role"] != PREFILL], np.float64)
    imbalance = float(served.max() / served.mean()) if served.sum() > 0 else float("nan")
    out = {"per_replica": per, "load_imbalance": imbalance}
    if PREFILL in roles:
        busy = [p["busy_fraction"] for p in per if p["role"] == PREFILL]
        out["prefill_busy_max"] = max(busy)
        out["prefill_busy_mean"] = float(np.mean(busy))
        out["prefill_replicas"] = len(busy)
        decode = [g for g, role in zip(logs, roles, strict=True) if role != PREFILL]
        out["mean_batch_size"] = mean_batch_size(joined(decode))
    return out


def kv_transfer_figures(prompt_tokens: np.ndarray, shape: Topology) -> dict:
    """A disaggregated run's KV transfer time per request (prompt tokens over the link),
    median and p99; {} for a colocated run."""
    if not shape.layout.disaggregated:
        return {}
    per_token = seconds_per_token(shape.kv_bytes_per_token, shape.kv_link_gbps)
    seconds = np.asarray(prompt_tokens, np.float64) * per_token
    return {
        "kv_transfer_p50_s": float(np.percentile(seconds, 50)),
        "kv_transfer_p99_s": float(np.percentile(seconds, 99)),
    }

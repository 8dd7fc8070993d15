"""Per-request records -> the summary every tool compares (docs/design.md, Metrics)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsim.engine.steplog import StepLog


def per_user(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT, TPOT and per-user speed; TPOT and speed are NaN for one-token outputs."""
    decode_s = requests["finish_s"] - requests["first_token_s"]
    later = requests["output_tokens"] - 1
    has_decode = (later > 0) & (decode_s > 0)
    return pd.DataFrame(
        {
            "ttft_s": requests["first_token_s"] - requests["arrival_s"],
            "tpot_s": (decode_s / later).where(has_decode),
            "tps": (later / decode_s).where(has_decode),
        }
    )


def _pct(values: pd.Series, q: float) -> float:
    v = values.dropna().to_numpy()
    return float(np.percentile(v, q)) if len(v) else float("nan")


def mean_batch_size(steps: StepLog) -> float:
    """Running requests per step, weighted by step time."""
    busy = float(steps.latency_s.sum())
    return float((steps.num_running * steps.latency_s).sum() / busy) if busy else 0.0


def pooled_itl(steps: StepLog, q: float) -> float:
    """Percentile q of the gaps between consecutive output chunks pooled over all requests, as
    `vllm bench serve` reports ITL: every request decoding in a step gets its next chunk at the
    step's end, one step after its previous one, so each step's latency counts once per
    decoding request."""
    keep = steps.num_running > 0
    if not keep.any():
        return float("nan")
    lat, weight = steps.latency_s[keep], steps.num_running[keep].astype(np.float64)
    order = np.argsort(lat, kind="stable")
    cum = np.cumsum(weight[order])
    return float(lat[order][np.searchsorted(cum, q / 100 * cum[-1])])


def arrival_rate(arrival_s: np.ndarray) -> float:
    """Requests per second offered: 1 / the mean gap between arrivals (NaN for fewer than two
    distinct arrival times, a closed-loop client's burst at 0 say)."""
    span = float(arrival_s.max() - arrival_s.min()) if len(arrival_s) else 0.0
    return (len(arrival_s) - 1) / span if span > 0 else float("nan")


def summarize(
    requests: pd.DataFrame, steps: StepLog, policy: str, replicas: int = 1
) -> dict[str, float | int | str]:
    """The summary.json fields; tau counts the bonus token, verify budget counts 1 + drafts.
    With several replicas `steps` holds all their steps: the batch size is per replica and the
    busy fraction is of all replicas' time."""
    u = per_user(requests)
    duration = float(requests["finish_s"].max() - requests["arrival_s"].min())
    rounds = int(requests["rounds"].sum())
    verified = int(requests["verified_drafts"].sum())
    accepted = int(requests["accepted_drafts"].sum())
    busy = float(steps.latency_s.sum())
    return {
        "policy": policy,
        "requests": len(requests),
        "duration_s": duration,
        "arrival_rate_req_s": arrival_rate(requests["arrival_s"].to_numpy()),
        "throughput_tok_s": float(requests["output_tokens"].sum()) / duration,
        "tps_p10": _pct(u["tps"], 10),
        "tps_p50": _pct(u["tps"], 50),
        "tps_p90": _pct(u["tps"], 90),
        "ttft_p50_s": _pct(u["ttft_s"], 50),
        "ttft_p99_s": _pct(u["ttft_s"], 99),
        "tpot_p50_s": _pct(u["tpot_s"], 50),
        "tpot_p99_s": _pct(u["tpot_s"], 99),
        "itl_p50_s": pooled_itl(steps, 50),
        "itl_p99_s": pooled_itl(steps, 99),
        "accepted_length_mean": 1.0 + accepted / rounds if rounds else float("nan"),
        "verification_waste": (verified - accepted) / verified if verified else 0.0,
        "mean_verify_budget": 1.0 + verified / rounds if rounds else float("nan"),
        "mean_batch_size": mean_batch_size(steps),
        "rounds": rounds,
        "steps": len(steps.latency_s),
        "preemptions": int(requests["preemptions"].sum()),
        "busy_fraction": busy / (duration * replicas) if duration > 0 else float("nan"),
    }

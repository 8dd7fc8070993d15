"""Per-request records -> the summary every tool compares (docs/design.md, Metrics)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsim.engine.steplog import StepLog


def per_user(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT, TPOT, end-to-end latency and per-user speed; TPOT and speed are NaN for one-token
    outputs. TPOT is `vllm bench serve`'s: (latency - TTFT) / (output tokens - 1), the first
    token excluded."""
    decode_s = requests["finish_s"] - requests["first_token_s"]
    later = requests["output_tokens"] - 1
    has_decode = (later > 0) & (decode_s > 0)
    return pd.DataFrame(
        {
            "ttft_s": requests["first_token_s"] - requests["arrival_s"],
            "e2el_s": requests["finish_s"] - requests["arrival_s"],
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


def pooled_itl_mean(steps: StepLog) -> float:
    """The mean gap between consecutive output chunks, pooled as `pooled_itl`."""
    keep = steps.num_running > 0
    weight = steps.num_running[keep].astype(np.float64)
    return float((steps.latency_s[keep] * weight).sum() / weight.sum()) if keep.any() else np.nan


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


# The overload rule and the steady window (docs/pareto.md): fixed before the results they judge.
STEADY_LO, STEADY_HI = 0.1, 0.9  # the steady window, as fractions of the arrivals' span
QUEUE_FLOOR, QUEUE_SHARE = 10, 0.05  # queue growth limit: max(10, 5% of the requests)
TTFT_RATIO, TTFT_FLOOR_S = 3.0, 1.0  # last fifth's median TTFT > 3x the first's and +1 s


def steady_window(arrival_s: np.ndarray) -> tuple[float, float]:
    """[first + 10% of the arrivals' span, first + 90%]: warm-up and drain left out."""
    first, last = float(arrival_s.min()), float(arrival_s.max())
    span = last - first
    return first + STEADY_LO * span, first + STEADY_HI * span


def queue_length(arrival_s: np.ndarray, finish_s: np.ndarray, t: float) -> int:
    """Requests in the system at `t`: arrived at or before it, not finished by it."""
    arrived = np.searchsorted(np.sort(arrival_s), t, side="right")
    return int(arrived - np.searchsorted(np.sort(finish_s), t, side="right"))


def _ttft_growth(requests: pd.DataFrame, ttft: pd.Series) -> tuple[float, float, float]:
    """(last fifth's median TTFT / first fifth's, first's median, last's), arrival order."""
    fifth = len(requests) // 5
    if fifth == 0:
        return float("nan"), float("nan"), float("nan")
    order = np.argsort(requests["arrival_s"].to_numpy(), kind="stable")
    values = ttft.to_numpy()[order]
    head, tail = float(np.median(values[:fifth])), float(np.median(values[-fifth:]))
    return (tail / head if head > 0 else float("inf") if tail > 0 else 1.0), head, tail


def _steady_throughput(requests: pd.DataFrame, lo: float, hi: float) -> float:
    """Output tokens emitted in [lo, hi] over its length; a request's first token at its time,
    the later ones spread evenly between its first token and its finish."""
    if hi <= lo:
        return float("nan")
    first, end = requests["first_token_s"].to_numpy(), requests["finish_s"].to_numpy()
    later = requests["output_tokens"].to_numpy() - 1.0
    decode = end - first
    overlap = np.clip(np.minimum(end, hi) - np.maximum(first, lo), 0.0, None)
    share = np.where(
        decode > 0, overlap / np.where(decode > 0, decode, 1.0), (lo <= end) & (end <= hi)
    )
    tokens = int(((lo <= first) & (first <= hi)).sum()) + float((later * share).sum())
    return tokens / (hi - lo)


def stability(requests: pd.DataFrame, ttft: pd.Series, tps: pd.Series) -> dict[str, float | bool]:
    """The overload rule's measured quantities and verdict, and the steady-state figures."""
    arrival, finish = requests["arrival_s"].to_numpy(), requests["finish_s"].to_numpy()
    lo, hi = steady_window(arrival)
    growth = queue_length(arrival, finish, hi) - queue_length(arrival, finish, lo)
    limit = max(QUEUE_FLOOR, QUEUE_SHARE * len(requests))
    ratio, head, tail = _ttft_growth(requests, ttft)
    ttft_grows = bool(tail > TTFT_RATIO * head and tail > head + TTFT_FLOOR_S)
    steady = ((arrival >= lo) & (arrival <= hi)) if hi > lo else np.zeros(len(arrival), bool)
    return {
        "queue_growth": int(growth),
        "queue_growth_limit": float(limit),
        "ttft_growth": ratio,
        "unstable": bool(growth > limit or ttft_grows),
        "steady_start_s": lo,
        "steady_end_s": hi,
        "steady_throughput_tok_s": _steady_throughput(requests, lo, hi),
        "steady_tps_p50": _pct(tps[steady], 50),
        "steady_ttft_p50_s": _pct(ttft[steady], 50),
        "steady_ttft_p99_s": _pct(ttft[steady], 99),
    }


def arrival_rate(arrival_s: np.ndarray) -> float:
    """Requests per second offered: 1 / the mean gap between arrivals (NaN for fewer than two
    distinct arrival times, a closed-loop client's burst at 0 say)."""
    span = float(arrival_s.max() - arrival_s.min()) if len(arrival_s) else 0.0
    return (len(arrival_s) - 1) / span if span > 0 else float("nan")


PCTS = (50, 90, 99)  # the percentiles of each latency the summary keeps (dsim.sla bounds them)


def summarize(
    requests: pd.DataFrame, steps: StepLog, policy: str, replicas: int = 1
) -> dict[str, float | int | str]:
    """The summary.json fields; tau counts the bonus token, verify budget counts 1 + drafts.
    With several replicas `steps` holds all their steps: the batch size is per replica and the
    busy fraction is of all replicas' time. The overload verdict and the steady-state figures
    follow docs/pareto.md."""
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
        "request_throughput_req_s": len(requests) / duration,
        "tps_p1": _pct(u["tps"], 1),
        "tps_p10": _pct(u["tps"], 10),
        "tps_p50": _pct(u["tps"], 50),
        "tps_p90": _pct(u["tps"], 90),
        **{f"{m}_mean_s": float(u[f"{m}_s"].mean()) for m in ("ttft", "tpot", "e2el")},
        **{f"{m}_p{q}_s": _pct(u[f"{m}_s"], q) for m in ("ttft", "tpot", "e2el") for q in PCTS},
        "itl_mean_s": pooled_itl_mean(steps),
        **{f"itl_p{q}_s": pooled_itl(steps, q) for q in PCTS},
        "accepted_length_mean": 1.0 + accepted / rounds if rounds else float("nan"),
        "verification_waste": (verified - accepted) / verified if verified else 0.0,
        "mean_verify_budget": 1.0 + verified / rounds if rounds else float("nan"),
        "mean_batch_size": mean_batch_size(steps),
        "rounds": rounds,
        "steps": len(steps.latency_s),
        "preemptions": int(requests["preemptions"].sum()),
        "busy_fraction": busy / (duration * replicas) if duration > 0 else float("nan"),
    } | stability(requests, u["ttft_s"], u["tps"])

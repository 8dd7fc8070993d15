"""Analytic roofline estimate of the target step latency (docs/design.md, The step-time model).

latency = max(FLOPs / F, bytes / W) + overhead, where one step of B tokens over R sequences
with C tokens of context each does FLOPs = 2*P*B + 4*L*H*d*B*C (weight matmuls plus attention
scores and values) and reads bytes = s*P + R*C*kv (weights once plus every sequence's KV cache),
with P the matmul parameters, s the bytes per weight, L layers, H query heads of width d and kv
the KV bytes per token. It is an estimate: real curves are jagged, so a measured profile wins.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.errors import InputError
from dsim.hardware import zoo
from dsim.hardware.latency import write_profile

FORMULA = (
    "latency = max((2*P*B + 4*L*H*d*B*C) / F, (s*P + R*C*kv) / W) + overhead; "
    "R = ceil(B / tokens_per_seq)"
)
TOKENS_PER_SEQ = 4  # each sequence verifies this many tokens, so R = ceil(B / 4)
DTYPE_BYTES = 2  # bf16 weights and KV cache
CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True)
class Gpu:
    """Datasheet figures: dense bf16 peak, HBM bandwidth, memory, fixed per-step overhead."""

    flops: float
    bandwidth: float
    memory_bytes: float
    overhead_s: float


GPUS: dict[str, Gpu] = {
    "h100": Gpu(flops=989e12, bandwidth=3.35e12, memory_bytes=80e9, overhead_s=1.5e-3),
    "h200": Gpu(flops=989e12, bandwidth=4.8e12, memory_bytes=141e9, overhead_s=1.5e-3),
    "a100": Gpu(flops=312e12, bandwidth=2.039e12, memory_bytes=80e9, overhead_s=2.0e-3),
}


def default_batch_tokens() -> np.ndarray:
    """1..16 one by one (where speculation lives), then log-spaced points and powers of 2."""
    dense = np.arange(1, 17)
    spaced = np.rint(np.geomspace(16, 4096, 25)).astype(np.int64)
    powers = 2 ** np.arange(13)
    return np.unique(np.concatenate([dense, spaced, powers]))


def get_gpu(name: str) -> Gpu:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise InputError(None, None, f"unknown GPU {name!r}; known: {', '.join(GPUS)}") from None


def roofline_profile(
    gpu: str,
    model: str,
    batch_tokens: np.ndarray | None = None,
    contexts: tuple[int, ...] | list[int] = CONTEXTS,
) -> tuple[pd.DataFrame, dict]:
    """The estimated profile (standard CSV columns) and its sidecar metadata."""
    spec = get_gpu(gpu)
    config = zoo.load_config(model)
    b = default_batch_tokens() if batch_tokens is None else np.asarray(batch_tokens, np.int64)
    bb, cc = (g.ravel() for g in np.meshgrid(b, np.asarray(contexts, np.int64), indexing="xy"))
    seqs = -(-bb // TOKENS_PER_SEQ)
    params = zoo.matmul_params(config)
    attn_width = config.num_hidden_layers * config.num_attention_heads * zoo.head_dim(config)
    kv = zoo.kv_bytes_per_token(config, DTYPE_BYTES)
    flops = 2.0 * params * bb + 4.0 * attn_width * bb * cc
    kv_bytes = seqs * cc * float(kv)
    read = DTYPE_BYTES * params + kv_bytes
    latency = np.maximum(flops / spec.flops, read / spec.bandwidth) + spec.overhead_s
    df = pd.DataFrame(
        {
            "batch_tokens": bb,
            "context_len": cc,
            "latency_ms": latency * 1e3,
            "num_seqs": seqs,
            "device": f"{gpu.lower()} (roofline)",
            "model": model,
            "dtype": "bfloat16",
        }
    ).sort_values(["context_len", "batch_tokens"], ignore_index=True)
    over = int(np.sum(DTYPE_BYTES * zoo.param_count(config) + kv_bytes > spec.memory_bytes))
    meta = {
        "estimate": True,
        "method": "analytic roofline (docs/design.md, The step-time model)",
        "formula": FORMULA,
        "gpu": gpu.lower(),
        "gpu_figures": {
            "peak_bf16_flops": spec.flops,
            "hbm_bytes_per_s": spec.bandwidth,
            "memory_bytes": spec.memory_bytes,
            "overhead_s": spec.overhead_s,
        },
        "model": model,
        "model_config": zoo.describe(config),
        "matmul_params": params,
        "kv_bytes_per_token": kv,
        "dtype": "bfloat16",
        "tokens_per_seq": TOKENS_PER_SEQ,
        "points_over_memory": over,
        "note": "points whose weights + KV exceed GPU memory are kept (formula still defined) "
        "and counted in points_over_memory",
    }
    return df, meta


def write_roofline(
    gpu: str,
    model: str,
    out: str | Path,
    batch_tokens: np.ndarray | None = None,
    contexts: tuple[int, ...] | list[int] = CONTEXTS,
    command: str = "",
) -> pd.DataFrame:
    """Compute the roofline profile and write it (CSV + sidecar labelled as an estimate)."""
    df, meta = roofline_profile(gpu, model, batch_tokens, contexts)
    meta["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["command"] = command
    write_profile(df, out, meta)
    return df

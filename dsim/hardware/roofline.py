"""Calibrated GPU estimate of the target step latency, written as a profile (docs/design.md,
The step-time model).

`dsim profile --roofline GPU --model M [--tp N] [--ep N] [--dtype bf16|fp8] [--engine E]` prices
a grid of verify steps (B = R * t tokens over R sequences, t = 1..8, each with KV context C) and
prefill steps (P tokens over S prompts, chunks ending at context C) with `gpu_model.step_costs`,
using operator efficiencies fitted on measured GPU data (`gpu_fit`) and the step terms of an
engine preset fitted on published end-to-end runs of that engine (`engines`, `engine_fit`). It
is an estimate: a measured profile wins.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.checks import check_number
from dsim.errors import InputError
from dsim.hardware import engine_fit, gpu_fit, memory, proposer_host_fit, round_fit, zoo
from dsim.hardware.arch import Arch, Parallel, check_parallel, kv_bytes_per_token
from dsim.hardware.attention import record as attention_record
from dsim.hardware.dtypes import ESTIMATE_WEIGHTS
from dsim.hardware.engines import DEFAULT_ENGINE, Engine, check_runs_on, get_engine, with_graphs
from dsim.hardware.gpu_model import (
    BRACKET_MEASURED,
    StepOverhead,
    check_dtype,
    get_gpu,
    step_seconds,
    transfer,
)
from dsim.hardware.latency import write_profile
from dsim.hardware.pricing import Pricing, pricing

FORMULA = (
    "step = max(GPU work, overlapped host time) + serialised host time. GPU work = sum over "
    "layers [linear ops: kernel + (t_c^p + t_m^p)^(1/p); elementwise ops: elem_kernel + "
    "bytes/(elem_bw_frac*W); attention (modelled): same soft roofline over KV bytes and "
    "score/value flops; 2 all-reduces of B*hidden*2 bytes (the engine's custom one-shot/"
    "two-shot kernel below 8 MiB, the measured NCCL table above)] + LM head on the tokens "
    "needing logits + per MoE layer: its small kernels (top-k, alignment, weighted sum, fp8 input "
    "quantisation: elementwise), two grouped GEMMs (latency + max(flops on rows padded to the "
    "block, expert weight bytes/(eta*moe_gemm_scale*W))) and, with EP, dispatch and combine "
    "over NVLink in place of the MLP all-reduce; at the tokens the engine's CUDA graphs run "
    "(a decode step padded to the next captured size); t_c = flops/(flop_frac*F), t_m = "
    "bytes/(bw_frac*W). Overlapped host = overhead_scale * (overlap_step_s + overlap_seq_s*R) "
    "+ launches the graphs do not cover (per layer: eager past the largest size, attention in "
    "piecewise mode). Serialised host = overhead_scale * (per_step_s + per_layer_s*layers + "
    "per_seq_s*R + per_token_s*sampled tokens). Not in the rows, applied by the run from "
    "engine.spec_round and engine.ragged: a drafting round adds per_round_s and prices each "
    "drafter pass at max(its work, host_pass_s); a decode-only step whose requests verify "
    "different lengths pays (1 + ragged penalty) x its target pass"
)
CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384)
SEQS = tuple(2**i for i in range(10))  # 1..512
TOKENS_PER_SEQ_RANGE = tuple(range(1, 9))
PREFILL_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192)
PREFILL_SEQS = (1, 2, 4, 8)
# (label, tokens, sequences, context, prefill): points whose cost components the sidecar shows
BREAKDOWN = (
    ("decode B=1 R=1 C=2048", 1, 1, 2048, False),
    ("decode B=32 R=32 C=2048", 32, 32, 2048, False),
    ("verify B=128 R=32 C=2048", 128, 32, 2048, False),
    ("verify B=2048 R=512 C=2048", 2048, 512, 2048, False),
    ("prefill P=2048 S=1 C=2048", 2048, 1, 2048, True),
)
# An engine this many times slower than its fitted preset is no serving engine (a typo).
MAX_OVERHEAD_SCALE = 100.0
GIB = 2**30


def grid(contexts: tuple[int, ...] | list[int] = CONTEXTS) -> pd.DataFrame:
    """Verify rows (R x t x C) and prefill rows (P x S x C, C >= P/S: fresh or continued)."""
    r, t, c = (g.ravel() for g in np.meshgrid(SEQS, TOKENS_PER_SEQ_RANGE, contexts, indexing="ij"))
    verify = pd.DataFrame({"batch_tokens": r * t, "num_seqs": r, "context_len": c})
    rows = []
    for p in PREFILL_TOKENS:
        for s in PREFILL_SEQS:
            chunk = p // s
            for ctx in sorted({chunk, *(x for x in contexts if x > chunk)}):
                rows.append((p, s, ctx))
    prefill = pd.DataFrame(rows, columns=["batch_tokens", "num_seqs", "context_len"])
    return pd.concat(
        [verify.assign(phase="verify"), prefill.assign(phase="prefill")], ignore_index=True
    )


COLUMNS = (
    "batch_tokens",
    "num_seqs",
    "context_len",
    "latency_ms",
    "phase",
    "device",
    "model",
    "dtype",
)


def _check_weights_fit(model: str, gpu: str, spec, weights: float, preset: Engine, tp: int):
    """Refuse a model whose weights leave no KV cache in what the engine keeps of a GPU."""
    rule = memory.rule(preset.name)
    if rule.kv_bytes(spec.memory_bytes, weights, tp) <= 0:
        share = rule.fraction(spec.memory_bytes, tp)
        of = "total" if rule.of == "total" else "free memory after weights"
        raise InputError(
            None,
            None,
            f"{model}'s weights need {weights / GIB:.1f} GiB per GPU, leaving no KV cache in "
            f"{gpu.lower()}'s {spec.memory_bytes / GIB:.1f} GiB under engine {preset.name}'s "
            f"rule ({share:g} of {of}): raise --tp or use --dtype fp8",
        )


def _breakdown(price: Pricing, overhead: StepOverhead) -> dict[str, dict[str, float]]:
    """Milliseconds of each part of the step at the named BREAKDOWN points (the sidecar's):
    the operators' GPU work (an MoE layer's parts among them: `moe.PARTS`), the graphs'
    padding, the host time overlapped (launches included) and serialised, and the step."""
    label, n, r, c, pre = (np.array(v) for v in zip(*BREAKDOWN, strict=True))
    parts = price.parts(n, r, c, pre, overhead.moe_gemm_scale)
    costs = price.costs(overhead, n, r, c, pre)
    parts["padding"] = costs["padding"]
    parts["host_overlapped"] = costs["host_overlapped"]
    parts["launches"] = costs["launches"]
    parts["host_serialised"] = costs["host_serialised"]
    parts["step"] = price.step(overhead, n, r, c, pre)
    for key, sign in (("step_low", -1.0), ("step_high", 1.0)):
        scaled = {**costs, "gpu": costs["gpu"] * (1.0 + sign * price.gpu.bracket)}
        parts[key] = step_seconds(scaled)
    return {
        str(name): {k: round(float(v[i]) * 1e3, 4) for k, v in parts.items()}
        for i, name in enumerate(label)
    }


def _gpu_record(gpu: str, spec) -> dict:
    """The sidecar's GPU figures with their sources and, for a GPU calibrated on another, what
    it borrows and the wider bracket stated on its GPU work."""
    return {
        "gpu_figures": {
            "vendor": spec.vendor,
            "peak_bf16_flops": spec.flops,
            "peak_fp8_flops": spec.flops_fp8,
            "peak_fp4_flops": spec.flops_fp4 or None,
            "hbm_bytes_per_s": spec.bandwidth,
            "memory_bytes": spec.memory_bytes,
            "link_bytes_per_s_per_direction": spec.link_bytes_per_s,
            "link_topology": f"mesh of {spec.mesh_links} links" if spec.mesh_links else "switch",
            "calibrated_on": spec.calibration,
            "sources": list(spec.sources),
        },
        "transfer": transfer(gpu.lower()),
        "bracket": {
            "gpu_work_relative": spec.bracket,
            "measured_gpu": BRACKET_MEASURED,
            "meaning": "a stated range, not a measured error: the GPU work may be off by this "
            "fraction either way (breakdown_ms step_low/step_high)",
        },
    }


def kv_capacity_tokens(preset: Engine, price: Pricing) -> int:
    """KV tokens the replica holds: the engine's KV bytes per GPU over a token's KV bytes per
    GPU (each GPU holds its share of every token's KV, so a GPU's count is the replica's)."""
    arch, par, spec = price.arch, price.par, price.gpu
    budget = memory.rule(preset.name).kv_bytes(
        spec.memory_bytes, weight_bytes_per_gpu(arch, par), par.tp
    )
    return int(budget // kv_bytes_per_token(arch, par.tp, par.kv_bytes))


def _memory_record(preset: Engine, price: Pricing, kv_requested: str) -> dict:
    """Weights, KV bytes and the KV capacity the engine sizes, with its rule (the sidecar's)."""
    arch, par, spec = price.arch, price.par, price.gpu
    weights = weight_bytes_per_gpu(arch, par)
    kv = kv_bytes_per_token(arch, par.tp, par.kv_bytes)
    rule = memory.rule(preset.name)
    budget = rule.kv_bytes(spec.memory_bytes, weights, par.tp)
    return {
        "gpu_memory_bytes": spec.memory_bytes,
        "gpu_memory_gib": round(spec.memory_bytes / GIB, 2),
        **rule.record(spec.memory_bytes, par.tp, par.dtype),
        "weight_bytes_per_gpu": weights,
        "weight_gib_per_gpu": round(weights / GIB, 2),
        "kv_dtype": par.kv_dtype,
        "kv_dtype_requested": kv_requested.lower(),
        "kv_bytes_per_token_per_gpu": kv,
        "kv_cache_bytes_per_gpu": budget,
        "kv_cache_gib_per_gpu": round(budget / GIB, 2),
        "kv_capacity_tokens": kv_capacity_tokens(preset, price),
        "admission": preset.scheduling.admission,
        "note": "KV capacity = the KV cache bytes the engine's rule leaves per GPU / KV bytes "
        "per token per GPU; activations and CUDA graphs' memory are not subtracted beyond "
        "what the rule sets aside, so it is an upper bound",
    }


def grid_contexts(
    contexts: tuple[int, ...] | list[int] | None, model: str, price: Pricing, preset: Engine
) -> tuple[int, ...]:
    """The grid's KV contexts: the given ones, each within the model's maximum position and
    the KV one sequence can hold in the engine's KV cache (a longer one is refused: no engine
    serves it); by default CONTEXTS up to those limits (docs/design.md, Input limits)."""
    capacity = kv_capacity_tokens(preset, price)
    position = zoo.max_position(model)
    limits = [(capacity, "the KV tokens the replica's memory holds")]
    limits += [(position, f"{model}'s max_position_embeddings")] if position else []
    limit, why = min(limits)
    if contexts is None:
        return tuple(c for c in CONTEXTS if c <= limit) or (limit,)
    if max(contexts) > limit:
        raise InputError(
            None,
            None,
            f"--contexts {max(contexts)} is beyond {why} ({limit}): give contexts up to {limit}",
        )
    return tuple(contexts)


def estimate_inputs(
    gpu: str,
    model: str,
    tp: int,
    ep: int,
    dtype: str,
    overhead_scale: float,
    engine: str,
    kv_dtype: str,
    capture_sizes: tuple[int, ...] | None = None,
    graph_mode: str | None = None,
) -> tuple[Engine, Pricing]:
    """An estimate's engine preset and pricing (GPU, model, parallelism, the engine's
    collectives and graphs), each read and checked once (the target's and the drafter's
    estimates alike)."""
    preset = with_graphs(get_engine(engine, gpu.lower()), capture_sizes, graph_mode)
    spec, arch = get_gpu(gpu), zoo.load_arch(model)
    check_runs_on(preset.name, gpu, spec.vendor)
    weight_dtype = ESTIMATE_WEIGHTS.parse(dtype)
    check_dtype(gpu, weight_dtype)
    kv = memory.rule(preset.name).kv_dtype(kv_dtype, weight_dtype)
    par = Parallel(tp=tp, ep=ep, dtype=weight_dtype, kv_dtype=kv)
    check_parallel(arch, par)
    measured = gpu_fit.allreduce_table(spec.calibration).fits
    if tp > 1 and tp not in measured:
        borrowed = (
            f" (it borrows {spec.calibration}'s table)" if spec.calibration != gpu.lower() else ""
        )
        raise InputError(
            None,
            None,
            f"--tp {tp}: no measured all-reduce for {tp} GPUs on {gpu.lower()}{borrowed}: use "
            f"--tp {', '.join(map(str, [1, *sorted(measured)]))}",
        )
    check_number(overhead_scale, "--overhead-scale", ge=0, le=MAX_OVERHEAD_SCALE)
    _check_weights_fit(model, gpu, spec, weight_bytes_per_gpu(arch, par), preset, tp)
    price = pricing(arch, gpu.lower(), par, preset.custom_allreduce, preset.graphs, preset.name)
    return preset, price


def roofline_profile(
    gpu: str,
    model: str,
    contexts: tuple[int, ...] | list[int] | None = None,
    tp: int = 1,
    ep: int = 1,
    dtype: str = "bf16",
    overhead_scale: float = 1.0,
    engine: str = DEFAULT_ENGINE,
    kv_dtype: str = "auto",
    capture_sizes: tuple[int, ...] | None = None,
    graph_mode: str | None = None,
) -> tuple[pd.DataFrame, dict]:
    """The estimated profile (standard CSV columns) and its sidecar metadata."""
    preset, price = estimate_inputs(
        gpu, model, tp, ep, dtype, overhead_scale, engine, kv_dtype, capture_sizes, graph_mode
    )
    arch, par, spec = price.arch, price.par, price.gpu
    contexts = grid_contexts(contexts, model, price, preset)
    weights = weight_bytes_per_gpu(arch, par)
    kv = kv_bytes_per_token(arch, tp, par.kv_bytes)
    overhead = preset.terms.scaled(overhead_scale)
    df = grid(contexts)
    seconds = price.step(
        overhead,
        df["batch_tokens"].to_numpy(np.float64),
        df["num_seqs"].to_numpy(np.float64),
        df["context_len"].to_numpy(np.float64),
        (df["phase"] == "prefill").to_numpy(),
    )
    df["latency_ms"] = seconds * 1e3
    breakdown = _breakdown(price, overhead)
    device = f"{gpu.lower()}x{tp} (estimate)" if tp > 1 else f"{gpu.lower()} (estimate)"
    df = df.assign(device=device, model=model, dtype=par.dtype)[list(COLUMNS)]
    mem = _memory_record(preset, price, kv_dtype)
    over = int(np.sum(df["num_seqs"] * df["context_len"] > mem["kv_capacity_tokens"]))
    total, active = arch.param_counts()
    meta = {
        "estimate": True,
        "method": "calibrated GPU step-time model (docs/design.md, The step-time model)",
        "formula": FORMULA,
        "gpu": gpu.lower(),
        **_gpu_record(gpu, spec),
        "model": model,
        "architecture": arch.describe(),
        "params_total": total,
        "params_active": active,
        "parallel": {"tp": tp, "ep": ep, "dtype": par.dtype, "gpus": tp},
        "weight_bytes_per_gpu": weights,
        "kv_bytes_per_token_per_gpu": kv,
        "memory": mem,
        "overhead_scale": overhead_scale,
        "engine": preset.record(overhead_scale),
        "breakdown_ms": breakdown,
        "calibration": gpu_fit.record(),
        **({"collectives": price.reduce.record()} if tp > 1 and preset.custom_allreduce else {}),
        "engine_fit": engine_fit.record(),
        "round_fit": round_fit.record(),
        "proposer_host_fit": proposer_host_fit.record(),
        "grid": {
            "verify": "num_seqs R in 1..512 (powers of 2) x 1..8 tokens each x context_len",
            "prefill": "batch_tokens P over num_seqs prompts, chunks of P/num_seqs ending at "
            "context_len (P/num_seqs when fresh, or a longer context)",
            "contexts": list(contexts),
        },
        "attention": {
            "decode_kernel": attention_record(price.attention),
            "prefill": "KV bytes and score/value flops at the linear operators' fitted "
            "efficiencies (no published prefill-attention figure adopted)",
            **({"windows": _window_note(arch)} if arch.window_layers else {}),
        },
        "fusion": price.fusion.record(),
        **({"weights_fp4": FP4_NOTE} if par.dtype == "fp4" else {}),
        "points_over_memory": over,
        "note": "points whose KV (num_seqs x context_len tokens) exceeds the engine's KV cache "
        "(memory.kv_capacity_tokens) are kept (formula still defined: a run never reaches "
        "them) and counted in points_over_memory; a latency is per step on every GPU of the "
        "replica",
    }
    return df, meta


FP4_NOTE = (
    "fp4: every linear weight at MXFP4, 0.53125 bytes (4-bit elements + an 8-bit scale per "
    "32), GEMMs at the GPU's dense fp4 peak, activations bf16; a checkpoint that keeps some "
    "layers in bf16 (gpt-oss: attention, router, embeddings and LM head, 1.8% of 120b's and "
    "8.6% of 20b's weights) is understated by those layers' extra bytes"
)


def _window_note(arch: Arch) -> str:
    """What the sidecar says of a model's sliding-window layers."""
    return (
        f"{arch.window_layers} of {arch.layers} layers attend within a {arch.window}-token "
        "sliding window: a query at position p scores min(p, window) keys, and such a layer "
        "reads and caches at most window tokens a sequence (vLLM's hybrid KV-cache manager, "
        "SGLang's SWA pool and TensorRT-LLM's per-layer attention window free what slides "
        "out), so KV capacity counts the full-attention layers only (the window layers' at "
        "most window tokens a sequence not subtracted: an upper bound)"
    )


def weight_bytes_per_gpu(arch: Arch, par: Parallel) -> float:
    """Weights one GPU holds: experts split over EP (or TP-sharded), the rest TP-sharded."""
    total, _ = arch.param_counts()
    if not arch.moe:
        return total * par.weight_bytes / par.tp
    experts = arch.moe_layers * arch.experts * arch.mlp_params(arch.expert_intermediate)
    split = par.ep if par.ep > 1 else par.tp
    return (experts / split + (total - experts) / par.tp) * par.weight_bytes


def write_roofline(
    gpu: str,
    model: str,
    out: str | Path,
    contexts: tuple[int, ...] | list[int] | None = None,
    command: str = "",
    **options,
) -> tuple[pd.DataFrame, dict]:
    """Compute the estimate and write it (CSV + sidecar labelled as an estimate)."""
    df, meta = roofline_profile(gpu, model, contexts, **options)
    meta["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["command"] = command
    write_profile(df, out, meta)
    return df, meta


def memory_warning(meta: dict, rows: int) -> str | None:
    """One line when most of an estimate's `rows` hold more KV than the engine's cache (a run
    never reaches them, so most of the profile prices steps no replica runs); else None."""
    over = meta["points_over_memory"]
    if 2 * over <= rows:
        return None
    mem = meta["memory"]
    fixes = ["raise --tp"]
    fixes += ["use --dtype fp8"] if meta["parallel"]["dtype"] != "fp8" else []
    fixes += ["--kv-dtype fp8"] if mem["kv_dtype"] != "fp8" else []
    return (
        f"{over} of {rows} rows need more KV than the {mem['kv_capacity_tokens']} tokens "
        f"engine {meta['engine']['name']} keeps for {meta['model']} "
        f"({mem['kv_cache_gib_per_gpu']} GiB of KV cache per GPU, {mem['kv_dtype']}): a run "
        f"never reaches them; {', '.join(fixes)} or give shorter --contexts"
    )

"""A serving-grade verify-step profile of a decoder on a GPU (the GPU profile study,
Serving-grade profile).

The step is built the way a serving engine builds it, so that what is timed is the GPU's work,
not a research framework's: the KV cache is the project's one ragged cache
(`dsim.models.ragged.KVPool`) reserved up front for the whole grid (no copy, no concatenation
per step); attention folds each KV head's query heads into its query rows, so K and V are read
once per KV head (GQA without repeating them); projections are fused (QKV, gate-up) as in
vLLM; and each (R, q, C) step (R sequences x q tokens over C cached tokens each) is captured
once as a CUDA graph and replayed, so kernel launches cost what a graph replay costs. The
weights are random (built from a config, never downloaded: latency does not depend on values).
No torch.compile: norms, rotary embedding and SwiGLU stay unfused torch kernels.

What it measures is GPU work plus graph replay: no scheduler, sampler, input preparation or
block tables. It checks the `gpu-only` estimate's level and the shape T(R, q) / T(R, 1) that
the policies read, not an engine preset's overhead (the presets' terms are fitted on published
end-to-end runs). Unfused elementwise kernels and torch's attention kernels (no split-KV decode
kernel: few sequences over a long context use few SMs) make it an upper bound of a tuned
engine's GPU work.

On a CPU the same step function is called eagerly in place of the replay, so the logic (cache
writes, attention, the table) is tested anywhere. This module needs only torch and dsim's
stdlib-only helpers (`dsim.fileio`, `dsim.errors`, `dsim.hardware.dtypes`): the GPU machine has
no pandas or numpy.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dsim.errors import InputError
from dsim.fileio import write_with_sidecar
from dsim.hardware.dtypes import SERVING, TORCH
from dsim.models.ragged import KVPool

COLUMNS = (
    "batch_tokens", "num_seqs", "context_len", "latency_ms", "latency_ms_p10", "latency_ms_p90",
    "phase", "device", "model", "dtype",
)  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """A dense decoder's shape under Hugging Face config names (KVPool reads the same names)."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    qk_norm: bool = False  # Qwen3: an RMSNorm over each query and key head

    @classmethod
    def from_fields(cls, fields: dict[str, Any], source: str = "config") -> Shape:
        """The shape of a Hugging Face config.json's fields (dense llama / qwen3 layouts)."""
        if fields.get("model_type") not in ("llama", "qwen3"):
            raise InputError(source, None, "model_type must be llama or qwen3 (dense)")
        heads = fields["num_attention_heads"]
        kv = fields.get("num_key_value_heads") or heads
        if heads % kv:
            raise InputError(source, None, f"num_key_value_heads {kv} does not divide {heads}")
        return cls(
            num_hidden_layers=fields["num_hidden_layers"],
            hidden_size=fields["hidden_size"],
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=fields.get("head_dim") or fields["hidden_size"] // heads,
            intermediate_size=fields["intermediate_size"],
            vocab_size=fields["vocab_size"],
            rope_theta=float(fields.get("rope_theta", 10000.0)),
            rms_norm_eps=float(fields.get("rms_norm_eps", 1e-6)),
            qk_norm=fields["model_type"] == "qwen3",
        )


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """q (R, n, heads, d); k, v (R, kv_heads, S, d) -> (R, n, heads, d).

    The `heads // kv_heads` query heads sharing a KV head are folded into that head's query
    rows (row g * n + i is query head g of the group at token i), so one attention over
    (R, kv_heads) reads each KV head once, with nothing repeated. `mask`: an additive mask
    (group * n, S) from `causal_mask`, or None when every key is visible (n = 1).
    """
    r, n, heads, d = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    rows = q.view(r, n, kv_heads, group, d).permute(0, 2, 3, 1, 4).reshape(r, kv_heads, -1, d)
    out = F.scaled_dot_product_attention(rows, k, v, attn_mask=mask)
    return out.view(r, kv_heads, group, n, d).permute(0, 3, 1, 2, 4).reshape(r, n, heads, d)


def causal_mask(tokens: int, context: int, group: int, dtype, device) -> torch.Tensor:
    """Additive mask (group * tokens, context + tokens): token i sees keys 0..context + i. Its
    rows are padded to a multiple of 16 in memory (then sliced), the alignment the fused
    attention kernels want, so they need no padded copy per call."""
    keys = context + tokens
    padded = -(-keys // 16) * 16
    seen = (
        torch.arange(padded, device=device)
        <= context + torch.arange(tokens, device=device)[:, None]
    )
    mask = torch.zeros(tokens, padded, dtype=dtype, device=device).masked_fill(~seen, -math.inf)
    return mask.repeat(group, 1)[:, :keys]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in at least float32 (as the models do), returned in x's dtype."""
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


class RandomWeights:
    """Random tensors, deterministic in `seed`: weights scaled by fan-in, norms at one."""

    def __init__(self, device: torch.device, dtype: torch.dtype, seed: int = 0):
        self.device, self.dtype = device, dtype
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def matrix(self, rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, generator=self.gen, device=self.device, dtype=self.dtype)
        return w.mul_(cols**-0.5)

    def ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, device=self.device, dtype=self.dtype)

    def layer(self, s: Shape, qkv_inputs: int = 1) -> dict[str, torch.Tensor]:
        """One decoder layer's weights (fused QKV and gate-up); its QKV projection reads
        `qkv_inputs` hidden-sized inputs (EAGLE-3's first layer reads two)."""
        h, d = s.hidden_size, s.head_dim
        qkv = (s.num_attention_heads + 2 * s.num_key_value_heads) * d
        return {
            "in_norm": self.ones(h), "qkv": self.matrix(qkv, qkv_inputs * h),
            "q_norm": self.ones(d), "k_norm": self.ones(d),
            "o": self.matrix(h, s.num_attention_heads * d), "post_norm": self.ones(h),
            "gate_up": self.matrix(2 * s.intermediate_size, h),
            "down": self.matrix(h, s.intermediate_size),
        }  # fmt: skip


class Decoder:
    """Random-weight decoder of `shape` (fused QKV and gate-up weights), deterministic in `seed`."""

    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype, seed: int = 0):
        self.shape, self.device, self.dtype = shape, device, dtype
        rand = RandomWeights(device, dtype, seed)
        self.layers = [rand.layer(shape) for _ in range(shape.num_hidden_layers)]
        self.embed = rand.matrix(shape.vocab_size, shape.hidden_size)
        self.norm = rand.ones(shape.hidden_size)
        self.lm_head = rand.matrix(shape.vocab_size, shape.hidden_size)
        self.wide = torch.promote_types(dtype, torch.float32)  # rotary angles' dtype
        d = shape.head_dim
        exponent = torch.arange(0, d, 2, device=device, dtype=self.wide) / d
        self.inv_freq = 1.0 / (shape.rope_theta**exponent)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (T, 1, head_dim) of `positions` (T,)."""
        angles = positions.to(self.wide)[:, None] * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)[:, None]
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def forward(self, pool: KVPool, step: VerifyStep) -> torch.Tensor:
        """Logits (R * q, vocab) of `step`'s tokens; writes their K and V into slots 0..R-1
        of `pool` at positions C..C+q-1 (never committed: every replay sees the same cache)."""
        x = self.embed[step.ids]
        for i, w in enumerate(self.layers):
            qkv_in = _rms_norm(x, w["in_norm"], self.shape.rms_norm_eps)
            x = layer_forward(self.shape, w, qkv_in, x, pool.kv[i, :, : step.seqs], step)
        return self.head(x)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of every row of `x` (every verify token's)."""
        return F.linear(_rms_norm(x, self.norm, self.shape.rms_norm_eps), self.lm_head)


def layer_forward(
    s: Shape, w: dict[str, torch.Tensor], qkv_in: torch.Tensor, x: torch.Tensor,
    kv: torch.Tensor, step: VerifyStep,
) -> torch.Tensor:  # fmt: skip
    """One decoder layer: attention from the (already normed) QKV input `qkv_in` over the
    cache `kv` (2, R, kv_heads, capacity, head_dim), writing the step's keys and values at
    C..C+q-1, then the gated MLP; returns `x` after both residual adds. A drafter whose QKV
    reads a wider input (EAGLE-3's [embedding; hidden]) passes that input and a wider weight."""
    heads, kv_heads, d, eps = (
        s.num_attention_heads,
        s.num_key_value_heads,
        s.head_dim,
        s.rms_norm_eps,
    )
    r, n, c = step.seqs, step.tokens, step.context
    qkv = F.linear(qkv_in, w["qkv"])
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q, k, v = q.view(-1, heads, d), k.view(-1, kv_heads, d), v.view(-1, kv_heads, d)
    if s.qk_norm:
        q, k = _rms_norm(q, w["q_norm"], eps), _rms_norm(k, w["k_norm"], eps)
    q, k = _rotate(q, step.cos, step.sin), _rotate(k, step.cos, step.sin)
    keys, values = kv[0], kv[1]  # (R, kv_heads, capacity, d)
    keys[:, :, c : c + n] = k.view(r, n, kv_heads, d).transpose(1, 2)
    values[:, :, c : c + n] = v.view(r, n, kv_heads, d).transpose(1, 2)
    out = gqa_attention(
        q.view(r, n, heads, d), keys[:, :, : c + n], values[:, :, : c + n], step.mask
    )
    x = x + F.linear(out.reshape(r * n, heads * d), w["o"])
    gate, up = F.linear(_rms_norm(x, w["post_norm"], eps), w["gate_up"]).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, w["down"])


class VerifyStep:
    """The static inputs of one (R, q, C) verify step: token ids, rotary tables, mask."""

    def __init__(self, model: Decoder, seqs: int, tokens: int, context: int, seed: int = 0):
        self.seqs, self.tokens, self.context = seqs, tokens, context
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(model.shape.vocab_size, (seqs * tokens,), generator=gen)
        self.ids = ids.to(model.device)
        positions = (context + torch.arange(tokens)).repeat(seqs).to(model.device)
        self.cos, self.sin = model.rotary(positions)
        group = model.shape.num_attention_heads // model.shape.num_key_value_heads
        self.mask = (
            causal_mask(tokens, context, group, model.dtype, model.device) if tokens > 1 else None
        )


def replayer(run: Callable[[], Any], device: torch.device, warmup: int) -> Callable[[], Any]:
    """`run` captured as a CUDA graph (after `warmup` eager calls on a side stream), its replay
    returned; on a CPU, `run` itself (eager replay of the same step function)."""
    if device.type != "cuda":
        for _ in range(warmup):
            run()
        return run
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def time_calls(call: Callable[[], Any], device: torch.device, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls: CUDA events around each replay (its launch and GPU
    work), or wall time on a CPU."""
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        else:
            began = time.perf_counter()
            call()
            out.append(time.perf_counter() - began)
    return out


@dataclass(frozen=True)
class VerifyGrid:
    """Verify points: every R in `seqs` x q in `tokens` x C in `contexts`."""

    seqs: tuple[int, ...]
    tokens: tuple[int, ...]
    contexts: tuple[int, ...]

    def points(self) -> Iterator[tuple[int, int, int]]:
        for c in self.contexts:
            for r in self.seqs:
                for q in self.tokens:
                    yield r, q, c

    @property
    def size(self) -> int:
        return len(self.seqs) * len(self.tokens) * len(self.contexts)


def _percentile(values: list[float], p: float) -> float:
    """numpy's linear percentile (`dsim.hardware.measure.latency_percentiles`, the other
    profiles'), by hand: the GPU machine has no numpy."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * p
    lo = math.floor(at)
    return ordered[lo] + (ordered[min(lo + 1, len(ordered) - 1)] - ordered[lo]) * (at - lo)


@contextmanager
def attention_kernels(device: torch.device, allow_math: bool) -> Iterator[None]:
    """On CUDA, attention only through the flash or memory-efficient kernels, unless
    `allow_math`: a step that none of them takes fails, rather than silently timing the math
    path's materialised scores."""
    if device.type != "cuda" or allow_math:
        with nullcontext():
            yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    with sdpa_kernel(fused):
        yield


def _time_point(
    model: Decoder, pool: KVPool, point: tuple[int, int, int], warmup: int, repeats: int
) -> list[float]:
    """Seconds of each timed replay of one step (its graph is freed on return)."""
    step = VerifyStep(model, *point)
    replay = replayer(lambda: model.forward(pool, step), model.device, warmup)
    return time_calls(replay, model.device, repeats)


def _row(point: tuple[int, int, int], seconds: list[float]) -> dict[str, Any]:
    r, q, c = point
    ms = [t * 1e3 for t in seconds]
    return {
        "batch_tokens": r * q, "num_seqs": r, "context_len": c,
        "latency_ms": statistics.median(ms), "latency_ms_p10": _percentile(ms, 0.1),
        "latency_ms_p90": _percentile(ms, 0.9), "phase": "verify",
    }  # fmt: skip


def measure(
    model: Decoder,
    grid: VerifyGrid,
    repeats: int = 10,
    warmup: int = 2,
    deadline_s: float = math.inf,
    allow_math: bool = False,
    on_point: Callable[[int], None] = lambda done: None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Timed rows (one per point: median, p10, p90 of `repeats` replays) and the points not
    timed (out of memory, no fused attention kernel, or past `deadline_s` seconds from now)."""
    stop = time.monotonic() + deadline_s
    pool = KVPool(model.shape, model.dtype, model.device)
    pool.reserve(max(grid.seqs), max(grid.contexts) + max(grid.tokens))
    for rid in range(max(grid.seqs)):  # lowest free slots, in order: sequence r is slot r
        pool.open(rid, pool.kv.shape[4])
    rows, skipped = [], []
    with torch.inference_mode(), attention_kernels(model.device, allow_math):
        for point in grid.points():
            why = "deadline" if time.monotonic() > stop else ""
            if not why:
                try:
                    rows.append(_row(point, _time_point(model, pool, point, warmup, repeats)))
                except RuntimeError as exc:  # out of memory, no kernel for the shape
                    why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            if why:
                r, q, c = point
                skipped.append({"num_seqs": r, "tokens": q, "context_len": c, "why": why})
            on_point(len(rows) + len(skipped))
    return rows, skipped


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def _csv_text(rows: list[dict[str, Any]]) -> str:
    import csv

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})
    return buf.getvalue()


def profile_serving(
    fields: dict[str, Any],
    name: str,
    grid: VerifyGrid,
    out: str | Path,
    *,
    device: str = "cuda",
    dtype: str = "bfloat16",
    repeats: int = 10,
    warmup: int = 2,
    deadline_s: float = math.inf,
    allow_math: bool = False,
    command: str = "",
    progress: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Measure the grid on random weights of the config `fields` and write the profile CSV
    (the standard columns: `dsim run --profile` reads it) and its NAME.json sidecar."""
    dtype = TORCH[SERVING.parse(dtype)]  # torch's name, which the table and sidecar record
    shape = Shape.from_fields(fields, name)
    dev = torch.device(device)
    started = time.perf_counter()
    model = Decoder(shape, dev, getattr(torch, dtype))

    def tick(done: int) -> None:
        if done % 24 == 0 or done == grid.size:
            progress(f"{done}/{grid.size} points, {time.perf_counter() - started:.0f} s")

    rows, skipped = measure(model, grid, repeats, warmup, deadline_s, allow_math, tick)
    rows = [{**row, "device": device_label(dev), "model": name, "dtype": dtype} for row in rows]
    settings = dict(dtype=dtype, repeats=repeats, warmup=warmup, command=command)
    settings["attention_kernels"] = (
        "fused only (flash, memory-efficient)"
        if dev.type == "cuda" and not allow_math
        else "any (math allowed)"
    )
    meta = {**_sidecar(shape, name, grid, dev), **settings, "skipped": skipped}
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    write_with_sidecar(out, lambda tmp: tmp.write_text(_csv_text(rows)), meta)
    return rows


def _sidecar(shape: Shape, name: str, grid: VerifyGrid, dev: torch.device) -> dict[str, Any]:
    """What the profile is, how it was measured, and what it leaves out."""
    how = (
        "captured as a CUDA graph and replayed; CUDA events around each replay"
        if dev.type == "cuda"
        else "called eagerly (CPU: no graphs); wall time"
    )
    return {
        "estimate": False,
        "method": "measured: random-weight decoder, KV cache reserved up front (KVPool), GQA "
        "attention reading each KV head once, fused QKV and gate-up, every (R, q, C) step " + how,
        "measures": "GPU work plus graph replay of a verify step (logits at every token): no "
        "scheduler, sampler or input preparation, so it checks the gpu-only estimate's level "
        "and the shape T(R, q) / T(R, 1), not an engine preset's overhead",
        "model": name,
        "model_config": asdict(shape),
        "device": device_label(dev),
        "device_type": dev.type,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "grid": asdict(grid),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }

"""Measured hardware load profiles: time real verification steps of a random-weight model.

The model comes from a zoo config (transformers' own model classes, random weights: latency
does not depend on weight values) with a DynamicCache holding `context_len` tokens per
sequence, the cache real-model mode uses. A verify point is R sequences each verifying q tokens
(B = R*q) on top of that context, a prefill point R sequences each prefilling a chunk that ends
at the context; after each step the cache is cropped back, so every repeat sees the same
context. This is the GPU path (`--device cuda`); on the CPU `dsim profile` times real mode's
own pass instead (`dsim.models.cpu_profile`). The step timer is injectable (CUDA events on GPU).
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from dsim.cpu import cpu_name
from dsim.errors import InputError
from dsim.hardware import zoo
from dsim.hardware.dtypes import AUTO, MEASURED, TORCH
from dsim.hardware.latency import write_profile
from dsim.report import progress_bar

PERCENTILES = (10, 50, 90)  # a measured profile's latency_ms_p10, latency_ms and latency_ms_p90


class StepTimer(Protocol):
    def __call__(self, step: Callable[[], None]) -> float:
        """Run `step` once and return its latency in seconds."""
        ...


def cpu_timer(step: Callable[[], None]) -> float:
    """Wall time of a synchronous CPU step."""
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def thread_cpu_timer(step: Callable[[], None]) -> float:
    """CPU time of the calling thread during a synchronous step (1 torch thread): what the
    step costs on a core of its own, without the time other load keeps it descheduled."""
    start = time.thread_time()
    step()
    return time.thread_time() - start


CPU_TIMERS = {"wall": cpu_timer, "cpu": thread_cpu_timer}


class CudaEventTimer:
    """GPU step time from CUDA events: kernels run asynchronously, so wall time would lie.

    `cuda` is the `torch.cuda` module (injectable so the path is testable without a GPU).
    """

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda

    def __call__(self, step: Callable[[], None]) -> float:
        start = self.cuda.Event(enable_timing=True)
        end = self.cuda.Event(enable_timing=True)
        self.cuda.synchronize()
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


class CudaKernelTimer:
    """GPU busy time of a step: the sum of its kernels' durations (torch.profiler), without the
    host's launch gaps between them. An eager step on a fast GPU is often launch-bound, so its
    event time measures Python; kernel time is what the step costs once launches are hidden
    (CUDA graphs), the quantity a GPU-only estimate predicts.

    `cuda` is `torch.cuda`, `profiler` is `torch.profiler` and `device_type` the CUDA member of
    `torch.autograd.DeviceType` (injectable so the path is testable without a GPU).
    """

    def __init__(self, cuda: Any, profiler: Any, device_type: Any) -> None:
        self.cuda, self.profiler, self.device_type = cuda, profiler, device_type

    def __call__(self, step: Callable[[], None]) -> float:
        self.cuda.synchronize()
        with self.profiler.profile(activities=[self.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            self.cuda.synchronize()
        kernels = (e for e in prof.events() if e.device_type == self.device_type)
        return sum(e.self_device_time_total for e in kernels) / 1e6  # microseconds


TIMER_NOTES = {
    "events": "cuda events (elapsed time, host launch gaps included)",
    "kernels": "kernels (torch.profiler: sum of the step's kernel durations, launch gaps excluded)",
}
GPU_TIMERS = tuple(TIMER_NOTES)


def gpu_timer(name: str) -> StepTimer:
    """The CUDA step timer called `name` (events: elapsed time; kernels: GPU busy time)."""
    import torch

    if name == "events":
        return CudaEventTimer(torch.cuda)
    return CudaKernelTimer(torch.cuda, torch.profiler, torch.autograd.DeviceType.CUDA)


def latency_percentiles(seconds: np.ndarray) -> tuple[float, float, float]:
    """p10, p50 and p90 of timed steps in milliseconds (numpy's linear method), the columns
    every measured profile writes."""
    p10, p50, p90 = np.percentile(seconds * 1e3, PERCENTILES)
    return p10, p50, p90


def time_point(
    step: Callable[[], None],
    reset: Callable[[], None],
    timer: StepTimer,
    repeats: int,
    warmup: int,
) -> np.ndarray:
    """Seconds for `repeats` timed steps after `warmup` untimed ones; `reset` after every step."""
    for _ in range(warmup):
        step()
        reset()
    times = np.empty(repeats)
    for i in range(repeats):
        times[i] = timer(step)
        reset()
    return times


@dataclass(frozen=True)
class Grid:
    """Where to measure: every R in `seqs` times every q in `tokens_per_seq` (B = R*q, so R
    varies independently of B), and the (R, q) cells of `cells` besides, at every context;
    prefill rows of every R in `prefill_seqs` times every chunk in `prefill_chunks` ending at
    every context that holds the chunk; and a few mixed verify + prefill steps at the middle
    context (the composition check)."""

    seqs: tuple[int, ...]
    tokens_per_seq: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_seqs: tuple[int, ...] = ()
    prefill_chunks: tuple[int, ...] = ()
    cells: tuple[tuple[int, int], ...] = ()  # extra (R, q) verify cells

    def points(self) -> list[tuple[int, int, int]]:
        """Verify points (context_len, batch_tokens, num_seqs) in measuring order: the cross
        product, then the extra cells it does not hold."""
        cross = [(r, q) for r in self.seqs for q in self.tokens_per_seq]
        cells = cross + [c for c in dict.fromkeys(self.cells) if c not in cross]
        return [(c, r * q, r) for c in self.contexts for r, q in cells]

    def prefill_points(self) -> list[tuple[int, int, int]]:
        """Prefill points (context_len at the end of the chunk, prefill tokens, sequences)."""
        return [
            (c, r * k, r)
            for c in self.contexts
            for r in self.prefill_seqs
            for k in self.prefill_chunks
            if k <= c
        ]

    def mixed_points(self) -> list[tuple[tuple[int, int], tuple[int, int], int]]:
        """((R, q) verify, (R_p, chunk) prefill, context): every R > 1 at the q nearest 4,
        with one long chunk of one sequence and the most sequences' shortest chunk."""
        if not (self.prefill_seqs and self.prefill_chunks):
            return []
        ctx = self.contexts[len(self.contexts) // 2]
        q = min(self.tokens_per_seq, key=lambda t: (abs(t - 4), t))
        fits = [k for k in self.prefill_chunks if k <= ctx]
        if not fits:
            return []
        prefills = sorted({(1, max(fits)), (max(self.prefill_seqs), min(fits))})
        verifies = [(r, q) for r in self.seqs if r > 1] or [(self.seqs[0], q)]
        return [(v, p, ctx) for v in verifies for p in prefills]

    def describe(self) -> dict[str, tuple]:
        return {
            "seqs": self.seqs,
            "tokens_per_seq": self.tokens_per_seq,
            "contexts": self.contexts,
            "prefill_seqs": self.prefill_seqs,
            "prefill_chunks": self.prefill_chunks,
        } | ({"cells": self.cells} if self.cells else {})


def resolve_device(device: str) -> Any:
    import torch

    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                None, None, f"--device cuda: no CUDA device (torch {torch.__version__})"
            )
        return torch.device("cuda")
    raise InputError(None, None, f"--device must be cpu or cuda, got {device!r}")


def resolve_dtype(dtype: str, device: Any) -> Any:
    """`auto` is float32 on CPU (what real mode runs there) and bfloat16 on GPU."""
    import torch

    name = MEASURED.parse(dtype)
    if name == AUTO:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return getattr(torch, TORCH[name])


def drafter_standin(config: Any) -> Any:
    """A one-layer block of the target's width: the cost shape of one EAGLE-style drafting step
    (a stand-in for a real drafter; the sidecar says so)."""
    small = copy.deepcopy(config)
    small.num_hidden_layers = 1
    if getattr(small, "layer_types", None):
        small.layer_types = small.layer_types[:1]
    return small


def profiled_config(model: str, drafter: bool) -> Any:
    """The zoo config to time: the model's, or its drafter stand-in's (rows are then drafter
    passes of B tokens over R sequences)."""
    config = zoo.load_config(model)
    return drafter_standin(config) if drafter else config


def check_run(repeats: int, warmup: int, threads: int | None) -> None:
    """Reject bad timing options, then set torch's thread count if one is given."""
    import torch

    if repeats < 1 or warmup < 0:
        raise InputError(None, None, "--repeats must be >= 1 and warm-up >= 0")
    if threads is not None:
        if threads < 1:
            raise InputError(None, None, f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)


def build_model(config: Any, device: Any, dtype: Any) -> Any:
    """Random-weight causal LM from the config, on `device`, in eval mode (never downloads)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def filled_cache(config: Any, base: Any, num_seqs: int) -> Any:
    """A DynamicCache with `base`'s context for `num_seqs` sequences in every layer."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    part = base[:num_seqs]
    for layer in range(config.num_hidden_layers):
        cache.update(part, part, layer)
    return cache


def measure_profile(
    model: Any,
    grid: Grid,
    *,
    repeats: int,
    warmup: int,
    timer: StepTimer,
    on_point: Callable[[], None] = lambda: None,
) -> tuple[pd.DataFrame, list[dict[str, int]]]:
    """Median, p10 and p90 step latency of `model` (on its device, in its dtype) at every
    verify and prefill point of the grid; points that run out of memory are skipped and
    returned separately."""
    import torch

    config, device, dtype = model.config, model.device, model.dtype
    gen = torch.Generator(device=device).manual_seed(0)
    kv_heads, width = config.num_key_value_heads, zoo.head_dim(config)
    rows, skipped = [], []
    verify, prefill = grid.points(), grid.prefill_points()
    for ctx in grid.contexts:
        points = [("verify", b, r, b // r, ctx) for c, b, r in verify if c == ctx]
        points += [("prefill", p, r, p // r, ctx - p // r) for c, p, r in prefill if c == ctx]
        most = max(r for _, _, r, _, _ in points)
        shape = (most, kv_heads, ctx, width)
        base = torch.randn(shape, generator=gen, device=device, dtype=dtype)
        for phase, b, r, q, cached in points:
            ids = torch.randint(config.vocab_size, (r, q), generator=gen, device=device)
            try:
                cache = filled_cache(config, base[:, :, :cached], r)
                times = _time_steps(model, cache, ids, phase, timer, repeats, warmup)
            except torch.OutOfMemoryError:
                skipped.append(
                    {"phase": phase, "batch_tokens": b, "context_len": ctx, "num_seqs": r}
                )
                _release(device)
            else:
                p10, p50, p90 = latency_percentiles(times)
                rows.append((phase, b, r, ctx, p50, p10, p90))
            on_point()
        del base
        _release(device)
    cols = ["phase", "batch_tokens", "num_seqs", "context_len", "latency_ms"]
    df = pd.DataFrame(rows, columns=[*cols, "latency_ms_p10", "latency_ms_p90"])
    return df, skipped


def _time_steps(
    model: Any, cache: Any, ids: Any, phase: str, timer: StepTimer, repeats: int, warmup: int
) -> np.ndarray:
    """A verify step computes logits at every position, a prefill step at the last only."""
    import torch

    q = ids.shape[1]
    keep = 0 if phase == "verify" else 1

    def step() -> None:
        with torch.inference_mode():
            model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep)

    return time_point(step, lambda: cache.crop(-q), timer, repeats, warmup)


def _release(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()


def device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def profile_model(
    model: str,
    grid: Grid,
    out: str | Path,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    repeats: int = 5,
    warmup: int = 2,
    threads: int | None = None,
    drafter: bool = False,
    timer: str = "events",
    command: str = "",
    progress: bool = True,
) -> pd.DataFrame:
    """Measure a profile of `model` (or its drafter stand-in) and write CSV + JSON sidecar."""
    import torch
    import transformers

    check_run(repeats, warmup, threads)
    if timer not in GPU_TIMERS:
        raise InputError(None, None, f"--timer must be events or kernels on cuda, got {timer!r}")
    config = profiled_config(model, drafter)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    step_timer = gpu_timer(timer) if dev.type == "cuda" else cpu_timer
    load_before = os.getloadavg()
    started = time.perf_counter()
    net = build_model(config, dev, torch_dtype)
    total = len(grid.points()) + len(grid.prefill_points())
    with progress_bar(f"profiling {model}", total, enabled=progress) as bar:
        df, skipped = measure_profile(
            net,
            grid,
            repeats=repeats,
            warmup=warmup,
            timer=step_timer,
            on_point=bar.advance,
        )
    if df.empty:
        raise InputError(None, None, "every grid point ran out of memory; nothing measured")
    name = device_name(dev)
    dtype_name = str(torch_dtype).removeprefix("torch.")
    label = f"{model} drafter stand-in" if drafter else model
    df = df.assign(device=name, model=label, dtype=dtype_name)
    meta = {
        "estimate": False,
        "method": "measured: random-weight transformers model, DynamicCache, "
        "R sequences x q tokens per step, cache cropped back after every step",
        "model": model,
        "model_config": zoo.describe(config),
        "attn_implementation": net.config._attn_implementation,
        "device": name,
        "device_type": dev.type,
        "dtype": dtype_name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "warmup": warmup,
        "timer": TIMER_NOTES[timer] if dev.type == "cuda" else "perf_counter",
        "grid": grid.describe(),
        "skipped_out_of_memory": skipped,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "wall_s": round(time.perf_counter() - started, 1),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
    }
    if drafter:
        meta["drafter"] = (
            "stand-in: one decoder layer of the target's width; a row prices one drafter pass of "
            "batch_tokens tokens over num_seqs sequences (as --draft-cost reads it); not a real "
            "drafter"
        )
    write_profile(df, out, meta)
    return df

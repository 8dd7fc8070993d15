"""Engine probes on a GPU: what a speculative round's engine terms stand for, timed on one
device beside the serving-grade grid (the GPU profile study, Engine probes).

Three probes, each on random weights of a dense target (Qwen3-8B by default):

- **graphs**: one decode step (R = n sequences, one token each, C cached tokens) called eagerly
  and as a CUDA-graph replay, at token counts that are and are not captured sizes. Eager minus
  replay is what launching costs when a step falls outside the captured graphs; the host's own
  launch time (the eager call's wall time before it synchronises) divided by the layers and by
  the non-view aten ops the step dispatches prices dsim's launch priors; the replayed curve at
  n and at the next captured size prices the padding a graphed step pays.
- **drafter**: an EAGLE-3 draft pass at the target's width (fc fusing three hidden states, one
  decoder layer whose QKV reads [embedding; hidden], an LM head over a 32k draft vocabulary,
  a greedy draft token), its first pass (with the fc) and a later one, replayed as graphs.
- **sampler**: a verify round's rejection sampling for R requests x K drafts over the target's
  vocabulary (`rejection_sample`: greedy, or random at temperature 1 with the draft taken as
  certain, as vLLM treats a drafter that hands it no probabilities), replayed as a graph.

Like `dsim.models.gpu_profile` this needs torch and dsim's stdlib-only helpers only. Pure-torch
kernels (unfused norms and rotary, a sampler of several passes over the vocabulary) make each
probe an upper bound of a tuned engine's GPU work; the launch counts are aten ops, not kernels.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from dsim.errors import InputError
from dsim.fileio import write_json
from dsim.models.gpu_profile import (
    Decoder,
    RandomWeights,
    Shape,
    VerifyStep,
    _percentile,
    _rms_norm,
    attention_kernels,
    device_label,
    layer_forward,
    replayer,
    time_calls,
)
from dsim.models.ragged import KVPool
from dsim.models.serving_profile import QWEN3_8B_CONFIG, device_options, environment, ints

DRAFT_VOCAB = 32000  # EAGLE-3's released checkpoints' draft vocabulary (dsim.hardware.arch's)
EAGLE3_INPUTS = 3  # target hidden states the first pass's fc fuses


@dataclass(frozen=True)
class ProbeGrid:
    """The probes' points: decode token counts (graphs), drafter batch sizes, sampler shapes."""

    decode_tokens: tuple[int, ...]
    decode_context: int
    draft_seqs: tuple[int, ...]
    draft_context: int
    draft_first_tokens: int  # tokens per request of the first pass (1 + K verify positions)
    sampler_seqs: tuple[int, ...]
    sampler_drafts: tuple[int, ...]
    sampler_modes: tuple[str, ...] = ("greedy", "random")

    def __post_init__(self) -> None:
        for mode in self.sampler_modes:
            if mode not in ("greedy", "random"):
                raise ValueError(f"sampler mode {mode!r}: greedy or random")


def dispatched_ops(call: Callable[[], Any]) -> int:
    """Non-view aten ops one call of `call` dispatches (views launch no kernel): the launches
    an eager step launches, counted by a dispatch mode."""

    class Counter(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:
                self.ops += 1
            return func(*args, **(kwargs or {}))

    with Counter() as counter:
        call()
    return counter.ops


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = [t * 1e3 for t in seconds]
    return {
        "ms": statistics.median(ms),
        "ms_p10": _percentile(ms, 0.1),
        "ms_p90": _percentile(ms, 0.9),
    }


def time_eager(
    call: Callable[[], Any], device: torch.device, repeats: int
) -> tuple[list[float], list[float]]:
    """Seconds of each of `repeats` eager calls (CUDA events: launch gaps included) and the
    host's launch time of each (wall time until the call returns, before synchronising)."""
    elapsed, launched = [], []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            began = time.perf_counter()
            call()
            launched.append(time.perf_counter() - began)
            end.record()
            end.synchronize()
            elapsed.append(start.elapsed_time(end) / 1e3)
        else:
            began = time.perf_counter()
            call()
            launched.append(time.perf_counter() - began)
            elapsed.append(launched[-1])
    return elapsed, launched


def graphs_probe(
    model: Decoder, pool: KVPool, n: int, context: int, warmup: int, repeats: int
) -> dict[str, Any]:
    """One decode step of n sequences eager and replayed: times, host launch time, ops."""
    step = VerifyStep(model, n, 1, context)

    def run() -> torch.Tensor:
        return model.forward(pool, step)

    for _ in range(warmup):
        run()
    ops = dispatched_ops(run)
    eager, launched = time_eager(run, model.device, repeats)
    replay = replayer(run, model.device, 1)
    graph = time_calls(replay, model.device, repeats)
    _, replay_launched = time_eager(replay, model.device, repeats)
    layers = model.shape.num_hidden_layers
    launch_ms = statistics.median(launched) * 1e3
    return {
        "tokens": n, "num_seqs": n, "context_len": context, "layers": layers, "aten_ops": ops,
        **{f"eager_{k}": v for k, v in _summary(eager).items()},
        **{f"graph_{k}": v for k, v in _summary(graph).items()},
        "eager_launch_ms": launch_ms,
        "graph_launch_ms": statistics.median(replay_launched) * 1e3,
        "launch_us_per_layer": launch_ms * 1e3 / layers,
        "launch_us_per_op": launch_ms * 1e3 / max(ops, 1),
    }  # fmt: skip


class Eagle3Drafter:
    """EAGLE-3's draft pass beside a target `Decoder`, random weights: an fc fusing three of the
    target's hidden states (first pass only), the embedding and the hidden state each normed and
    concatenated into one decoder layer's QKV, that layer's MLP, a final norm, an LM head over a
    draft vocabulary and the greedy draft token. Its KV cache is a one-layer pool."""

    def __init__(self, target: Decoder, draft_vocab: int = DRAFT_VOCAB, seed: int = 1):
        s, h = target.shape, target.shape.hidden_size
        rand = RandomWeights(target.device, target.dtype, seed)
        self.target, self.shape = target, replace(s, num_hidden_layers=1, vocab_size=draft_vocab)
        self.fc = rand.matrix(h, EAGLE3_INPUTS * h)
        self.hidden_norm = rand.ones(h)
        self.layer = rand.layer(s, qkv_inputs=2)
        self.norm, self.lm_head = rand.ones(h), rand.matrix(draft_vocab, h)

    def forward(
        self, kv: torch.Tensor, step: VerifyStep, hidden: torch.Tensor, first: bool
    ) -> torch.Tensor:
        """Draft token ids (R,): each request's next draft from its last of `step`'s q tokens
        (logits only there, as engines compute them). `hidden` is the target's three layers'
        states (R * q, 3H) on the first pass, the drafter's last state (R * q, H) after."""
        eps, w = self.shape.rms_norm_eps, self.layer
        x = F.linear(hidden, self.fc) if first else hidden
        embedded = _rms_norm(self.target.embed[step.ids], w["in_norm"], eps)
        qkv_in = torch.cat((embedded, _rms_norm(x, self.hidden_norm, eps)), dim=-1)
        x = layer_forward(self.shape, w, qkv_in, x, kv, step)
        last = x.view(step.seqs, step.tokens, -1)[:, -1]
        return F.linear(_rms_norm(last, self.norm, eps), self.lm_head).argmax(-1)


def drafter_probe(
    drafter: Eagle3Drafter, pool: KVPool, seqs: int, context: int, first_tokens: int,
    warmup: int, repeats: int,
) -> dict[str, Any]:  # fmt: skip
    """EAGLE-3's first pass (the fc, over `first_tokens` positions per request, as an engine's
    first pass covers the verified positions) and a later pass (one token per request, no fc)
    over `seqs` sequences, each replayed as a graph."""
    target = drafter.target
    gen = torch.Generator(device=target.device).manual_seed(seqs)
    h = target.shape.hidden_size
    row: dict[str, Any] = {"num_seqs": seqs, "context_len": context, "first_tokens": first_tokens}
    kv = pool.kv[0, :, :seqs]
    for name, q, first in (("first", first_tokens, True), ("rest", 1, False)):
        step = VerifyStep(target, seqs, q, context)
        width = EAGLE3_INPUTS * h if first else h
        hidden = torch.randn(
            seqs * q, width, generator=gen, device=target.device, dtype=target.dtype
        )  # fmt: skip
        replay = replayer(
            partial(drafter.forward, kv, step, hidden, first), target.device, warmup
        )  # fmt: skip
        timed = _summary(time_calls(replay, target.device, repeats))
        row.update({f"{name}_{k}": v for k, v in timed.items()})
    return row


def rejection_sample(
    logits: torch.Tensor, drafts: torch.Tensor, mode: str, gen: torch.Generator | None = None
) -> torch.Tensor:
    """A verify round's output tokens (R, K + 1): each request's drafts up to its first
    rejection, then the correction there (or the bonus token when all K are accepted), then -1.

    `logits` (R * (K + 1), V): the target's logits at each request's K draft positions and its
    bonus position; `drafts` (R, K). `greedy`: a draft is accepted while it is the target's
    argmax. `random` (temperature 1): the draft is taken as certain (no draft probabilities),
    so draft x is accepted with probability p(x) and a rejection samples from p with x removed,
    renormalised: the output is distributed as p, whatever the draft (lossless). Sampling by
    argmax of p / Exp(1) noise, which needs no normalisation and no host synchronisation."""
    r, k = drafts.shape
    if mode == "greedy":
        best = logits.argmax(-1).view(r, k + 1)
        accepted = drafts == best[:, :k]
        corrections = best
    else:
        probs = torch.softmax(logits.float(), dim=-1).view(r, k + 1, -1)
        kw = dict(device=logits.device, generator=gen)
        p_draft = probs[:, :k].gather(-1, drafts[..., None]).squeeze(-1)
        accepted = torch.rand(r, k, **kw) < p_draft
        noise = torch.empty_like(probs).exponential_(generator=gen)
        removed = probs[:, :k].scatter(-1, drafts[..., None], 0.0)
        recovered = (removed / noise[:, :k]).argmax(-1)
        bonus = (probs[:, k] / noise[:, k]).argmax(-1, keepdim=True)
        corrections = torch.cat((recovered, bonus), dim=1)
    taken = accepted.long().cumprod(dim=1).sum(dim=1, keepdim=True)  # accepted prefix length
    at = torch.arange(k + 1, device=logits.device)[None, :]
    padded = torch.cat((drafts, torch.full_like(drafts[:, :1], -1)), dim=1)
    correction = corrections.gather(1, taken)
    return torch.where(at < taken, padded, torch.where(at == taken, correction, -1))


def sampler_probe(
    vocab: int, seqs: int, drafts: int, mode: str, device: torch.device, warmup: int,
    repeats: int,
) -> dict[str, Any]:  # fmt: skip
    """One rejection-sampling step of `seqs` requests x `drafts` drafts, replayed as a graph."""
    gen = torch.Generator(device=device).manual_seed(seqs * 16 + drafts)
    logits = torch.randn(seqs * (drafts + 1), vocab, generator=gen, device=device)
    ids = torch.randint(vocab, (seqs, drafts), generator=gen, device=device)
    replay = replayer(lambda: rejection_sample(logits, ids, mode), device, warmup)
    summary = _summary(time_calls(replay, device, repeats))
    return {"num_seqs": seqs, "drafts": drafts, "mode": mode, "vocab": vocab, **summary}


def _guarded(
    points: list[tuple[str, dict[str, Any], Callable[[], dict[str, Any]]]],
    deadline: float,
    progress: Callable[[str], None],
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Run each (probe, point, measure) in order; a point that fails (out of memory, no fused
    attention kernel) or comes after `deadline` (a monotonic time) is listed as skipped."""
    rows: dict[str, list[dict[str, Any]]] = {"graphs": [], "drafter": [], "sampler": []}
    skipped = []
    for i, (probe, point, run) in enumerate(points, 1):
        why = "deadline" if time.monotonic() > deadline else ""
        if not why:
            try:
                rows[probe].append(run())
            except RuntimeError as exc:
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if why:
            skipped.append({"probe": probe, **point, "why": why})
        if i % 10 == 0 or i == len(points):
            progress(f"{i}/{len(points)} probe points")
    return rows, skipped


def run_probes(
    shape: Shape, grid: ProbeGrid, *, device: str = "cuda", dtype: str = "bfloat16",
    repeats: int = 10, warmup: int = 3, deadline_s: float = math.inf, allow_math: bool = False,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:  # fmt: skip
    """Every probe of `grid` on random weights of `shape`: the rows, what was skipped and why,
    and what was measured how (the JSON the device call brings back)."""
    started, dev = time.perf_counter(), torch.device(device)
    model = Decoder(shape, dev, getattr(torch, dtype))
    drafter = Eagle3Drafter(model)
    pool = KVPool(shape, model.dtype, dev)
    pool.reserve(max(grid.decode_tokens), grid.decode_context + 1)
    draft_pool = KVPool(drafter.shape, model.dtype, dev)
    draft_pool.reserve(max(grid.draft_seqs), grid.draft_context + grid.draft_first_tokens)
    for p in (pool, draft_pool):
        for rid in range(p.kv.shape[2]):
            p.open(rid, p.kv.shape[4])
    w = (warmup, repeats)
    c, dc = grid.decode_context, grid.draft_context
    points: list[tuple[str, dict[str, Any], Callable[[], dict[str, Any]]]] = []
    for n in grid.decode_tokens:
        points.append(("graphs", {"tokens": n}, partial(graphs_probe, model, pool, n, c, *w)))
    for r in grid.draft_seqs:
        run = partial(drafter_probe, drafter, draft_pool, r, dc, grid.draft_first_tokens, *w)
        points.append(("drafter", {"num_seqs": r}, run))
    for m, r, k in itertools.product(grid.sampler_modes, grid.sampler_seqs, grid.sampler_drafts):
        run = partial(sampler_probe, shape.vocab_size, r, k, m, dev, *w)
        points.append(("sampler", {"num_seqs": r, "drafts": k, "mode": m}, run))
    with torch.inference_mode(), attention_kernels(dev, allow_math):
        rows, skipped = _guarded(points, time.monotonic() + deadline_s, progress)
    return {
        "device": device_label(dev), "device_type": dev.type, "torch": torch.__version__,
        "cuda": torch.version.cuda, "dtype": dtype, "model_config": asdict(shape),
        "grid": asdict(grid), "repeats": repeats, "warmup": warmup,
        "timing": "CUDA events around each call (eager: launch gaps included) and the host's "
        "launch time before synchronising" if dev.type == "cuda" else "wall time (CPU: no graphs)",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **rows, "skipped": skipped, "wall_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip


DECODE_TOKENS = "1,3,4,6,8,12,16,20,24,33,40,64,100,104,128,250,256,260,272,384,500,512"
DRAFT_SEQS = "1,2,4,8,16,32,64,128,256"
SAMPLER_SEQS = "1,4,16,64,256"
SAMPLER_DRAFTS = "1,3,7"


def main(argv: list[str] | None = None) -> None:
    """`python3 -m dsim.models.engine_probes --out $OUT/engine-probes.json`: bad input is one
    line and exit 2; the JSON is written atomically, once every probe has run or been skipped."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(QWEN3_8B_CONFIG), help="the target's config.json")
    p.add_argument("--decode-tokens", default=DECODE_TOKENS, help="graphs: decode token counts")
    p.add_argument("--decode-context", type=int, default=512, help="graphs: cached tokens")
    p.add_argument("--draft-seqs", default=DRAFT_SEQS, help="drafter: sequences per pass")
    p.add_argument("--draft-context", type=int, default=1024, help="drafter: cached tokens")
    p.add_argument("--draft-first-tokens", type=int, default=4, help="drafter: first pass's q")
    p.add_argument("--sampler-seqs", default=SAMPLER_SEQS, help="sampler: requests")
    p.add_argument("--sampler-drafts", default=SAMPLER_DRAFTS, help="sampler: drafts K")
    device_options(p, deadline_s=90.0)
    p.add_argument("--out", required=True, help="the probes' JSON")
    args = p.parse_args(argv)
    try:
        if not args.out.endswith(".json"):
            raise InputError(None, None, f"--out {args.out}: end it in .json")
        for option in ("decode_context", "draft_context", "draft_first_tokens", "repeats"):
            if getattr(args, option) < 1:
                raise InputError(None, None, f"--{option.replace('_', '-')}: at least 1")
        print(environment(args.device), flush=True)
        shape = Shape.from_fields(json.loads(Path(args.config).read_text()), args.config)
        grid = ProbeGrid(
            ints(args.decode_tokens, "--decode-tokens"), args.decode_context,
            ints(args.draft_seqs, "--draft-seqs"), args.draft_context, args.draft_first_tokens,
            ints(args.sampler_seqs, "--sampler-seqs"),
            ints(args.sampler_drafts, "--sampler-drafts"),
        )  # fmt: skip
        result = run_probes(
            shape, grid, device=args.device, dtype=args.dtype, repeats=args.repeats,
            warmup=args.warmup, deadline_s=args.deadline_s, allow_math=args.allow_math,
            progress=lambda line: print(line, flush=True),
        )  # fmt: skip
        result["command"] = shlex.join(
            ["python3", "-m", "dsim.models.engine_probes", *sys.argv[1:]]
        )
        write_json(args.out, result)
    except (InputError, OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"engine_probes: {exc}", file=sys.stderr)
        sys.exit(2)
    done = sum(len(result[k]) for k in ("graphs", "drafter", "sampler"))
    print(f"wrote {args.out} ({done} points, {len(result['skipped'])} skipped)")


if __name__ == "__main__":
    main()

"""`vllm-adaptive`: vLLM's adaptive verification (`enable_adaptive_verification`, PR #47808)
as its code has it (docs/design.md, vLLM's adaptive verification).

Source read: `vllm/v1/worker/gpu/spec_decode/adaptive_verification.py` at commit
9cc1a19eb69b6977c7e3ef20493477ac92b3ce94 (github.com/TheEpicDolphin/vllm, a fork of
vllm-project/vllm carrying the merged file; the revision of it stored under vllm-project/vllm
here, 8eadfc2c4c29812fba0dfe8a547b4ef29bdafec9, is another revision: no logits cap, no startup
profile, tables interpolated from captured-graph timings), its caller
`vllm/v1/worker/gpu/model_runner.py` (`max_total_logits = get_max_chunk_logits(vocab_size)`,
`record_confidences` after each drafting) and `get_max_chunk_logits` (one 1 GiB float32 chunk
of logits rows).

The rule, per step:
- budget B from stale confidences: survival S(r, i) = c_r1 ... c_ri of each request's
  confidences as the host last received them (`lag` rounds old; 1.0 for a request new since),
  sorted descending over all requests; B* = argmax over B = 0..cap of
  (N_sampling + sum of the B best survivals) / (draft[num_reqs] + verify[T + B]),
  cap = min(drafts scheduled, max_total_logits - num_reqs) (one bonus token a request);
- allocation on the device from this round's confidences: the B globally best survivals,
  a contiguous prefix per request (ties: the shallower position, then the earlier request).
B never reads this round's confidences and a request's later drafts never outrank its earlier
ones, so whether draft j is verified depends on drafts 1..j only: lossless.

The cost tables are the policy's own, built once as the engine builds them at startup
(`batches_to_profile`, `set_initial_cost_curves`, `build_cost_tables_from_curves`): the
target's pass and the drafter's round timed at each captured token count and at 1.5x the
largest then doublings up to the step token limit, all at one profiling context (8192 tokens by
default, tunable with `VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN`: vLLM's
adaptive-verification post of 2026-08-14, section "The cost model"); the verify curve by
tokens, the drafter's by request count, each forced monotone (running max); a size at or below
the largest capture costs its next profiled point (the padding staircase), above it the
profiled points are interpolated, past the last one the last slope extends. A dummy run of n
tokens is read as a uniform decode batch of ceil(n / (1 + gamma)) requests (dsim's reading: the
dummy run's request count was not read). An engine that captures nothing is profiled at powers
of two and interpolated everywhere (the code would refuse to start). `costs=FILE` gives the
curves instead (columns table, size, ms).

The host sync the code needs waits for the copy of the confidences recorded a step earlier,
and the budget is a host sort of R x gamma survivals; under async scheduling both run while the
GPU runs the step before, so the policy is not synchronous: no per-round `--sched-cost`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from dsim.checks import check_sizes
from dsim.errors import InputError
from dsim.policies.protocol import SPS, EngineCosts, StepContext
from dsim.spec_grammar import ints, key_values, number
from dsim.tables import read_table, require_columns

MAX_CHUNK_BYTES = 2**30  # the sampler's float32 logits chunk (get_max_chunk_logits)
FP32_BYTES = 4
PROFILE_CONTEXT = 8192
MAX_CONTEXT = 2**20  # the longest profiling context taken: a million tokens
LAGS = (1, 2)  # 1: as the code runs it (one step in flight); 2: a snapshot one round older
OPTIONS = ("lag", "capture", "context", "costs")


def max_total_logits(vocab: int) -> int | None:
    """Logits rows one verification chunk holds (None: vocabulary unknown, no cap)."""
    return max(1, MAX_CHUNK_BYTES // (vocab * FP32_BYTES)) if vocab > 0 else None


def profile_sizes(capture_sizes: tuple[int, ...], max_tokens: int) -> tuple[list[int], int]:
    """The token counts the engine times at startup and its largest captured size (0: none)."""
    if not capture_sizes:
        sizes, n = [], 1
        while n < max_tokens:
            sizes.append(n)
            n *= 2
        return [*sizes, max_tokens], 0
    limit = size = capture_sizes[-1]
    tail = {min(size + size // 2, max_tokens)}
    while size < max_tokens:
        size = min(size * 2, max_tokens)
        tail.add(size)
    return [*capture_sizes, *sorted(tail - set(capture_sizes))], limit


def build_table(curve: list[tuple[int, float]], extent: int, limit: int, where: str) -> np.ndarray:
    """Seconds at sizes 0..extent from profiled (size, seconds) points: running max, the next
    point's cost at or below `limit` (padding), interpolation above it, the last slope past
    the last point (`limit` 0 and no captures: `where` names the curve in an error)."""
    xs, ys = (np.asarray(v, np.float64) for v in zip(*sorted(curve), strict=True))
    if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        bad = next(x for x, y in sorted(curve) if not (math.isfinite(x) and math.isfinite(y)))
        raise InputError(where, None, f"cost at size {bad:g} is not a finite number")
    ys = np.maximum.accumulate(ys)
    values = np.arange(extent + 1)
    result = ys[np.minimum(np.searchsorted(xs, values, side="left"), len(xs) - 1)]
    smooth, above = values > limit, xs > limit
    if smooth.any() and above.any():
        result[smooth] = np.interp(values[smooth], xs[above], ys[above])
    if len(xs) > 1:
        after = values > xs[-1]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        result[after] = ys[-1] + slope * (values[after] - xs[-1])
    if not np.isfinite(result).all():
        raise InputError(where, None, "the cost table is not finite (costs too large)")
    return result


@dataclass(frozen=True)
class CostTables:
    """The policy's startup prices: the drafter's round by request count and the target's
    pass by tokens (seconds), and the logits cap."""

    draft: np.ndarray
    verify: np.ndarray
    logits: int | None


def profiled_curves(
    costs: EngineCosts, context: float, capture: tuple[int, ...] | None
) -> tuple[list[tuple[int, float]], list[tuple[int, float]], int]:
    """The drafter's curve by request count, the target's by tokens and the capture limit."""
    if capture and capture[-1] > costs.max_tokens:
        raise InputError(
            None, None, f"policy vllm-adaptive: capture size {capture[-1]} is above the step "
            f"token limit ({costs.max_tokens}): a step never holds that many tokens; list sizes "
            f"up to {costs.max_tokens}"
        )  # fmt: skip
    sizes, limit = profile_sizes(capture or costs.capture_sizes, costs.max_tokens)
    draft: dict[int, list[float]] = {}
    verify = []
    for n in sizes:
        reqs = min(-(-n // (1 + costs.gamma)), costs.max_reqs)
        verify.append((n, float(costs.verify_s(n, reqs, context))))
        draft.setdefault(reqs, []).append(float(costs.draft_s(reqs, context)))
    return [(r, float(np.median(v))) for r, v in sorted(draft.items())], verify, limit


Curves = tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]


@lru_cache(maxsize=8)
def read_curves(path: str) -> Curves:
    """`costs=FILE`: rows `table,size,ms` (table draft: size in requests; verify: in tokens),
    read once per process; the drafter's and the target's curves in seconds."""
    df = read_table(path)
    require_columns(df, path, ("table", "size", "ms"))
    curves: dict[str, list[tuple[int, float]]] = {"draft": [], "verify": []}
    for row, (table, size, ms) in enumerate(df[["table", "size", "ms"]].itertuples(False), 1):
        try:
            size_f, ms_f = float(size), float(ms)
        except (TypeError, ValueError):
            size_f = ms_f = math.nan
        if table not in curves or not (math.isfinite(size_f) and size_f.is_integer()):
            raise InputError(path, row, "expected table draft or verify and a whole size")
        if not math.isfinite(ms_f) or ms_f <= 0 or size_f < 0:
            raise InputError(
                path, row, f"size {size!r}, ms {ms!r}: a size >= 0 and a time > 0 (a pass costs "
                "time), both finite"
            )  # fmt: skip
        if any(n == int(size_f) for n, _ in curves[str(table)]):
            raise InputError(path, row, f"size {int(size_f)} is in the {table} table twice")
        curves[str(table)].append((int(size_f), ms_f / 1e3))
    if not curves["draft"] or not curves["verify"]:
        raise InputError(path, None, "a cost file needs draft and verify rows")
    return tuple(curves["draft"]), tuple(curves["verify"])


@dataclass
class VllmAdaptive:
    """`vllm-adaptive[:lag=1,capture=S1/S2/...,context=8192,costs=FILE]` (module doc)."""

    name: str = "vllm-adaptive"
    lag: int = 1
    capture: tuple[int, ...] | None = None  # None: the engine's captured sizes
    context: float = PROFILE_CONTEXT
    costs_file: str | None = None  # curves given (`read_curves`) instead of profiled
    drafts: bool = True
    synchronous: bool = False
    reads_step: bool = True
    _tables: CostTables | None = field(default=None, repr=False)
    _past: deque = field(default_factory=deque, repr=False)  # (ids, conf) of recent rounds

    def tables(self, costs: EngineCosts) -> CostTables:
        """Built on the first step, as the engine builds them before serving."""
        if self._tables is None:
            if self.costs_file is not None:
                draft, verify = read_curves(self.costs_file)
                limit = max(self.capture or costs.capture_sizes or (0,))
            else:
                draft, verify, limit = profiled_curves(costs, self.context, self.capture)
            where = self.costs_file or f"policy {self.name}: cost table"
            self._tables = CostTables(
                build_table(list(draft), costs.max_reqs, limit, where),
                build_table(list(verify), costs.max_tokens, limit, where),
                max_total_logits(costs.vocab),
            )
        return self._tables

    def stale(self, ids: np.ndarray, gamma: int) -> np.ndarray:
        """Each request's confidences as of `lag` rounds ago (ones where it was not running)."""
        out = np.ones((len(ids), gamma))
        if len(self._past) == self.lag:
            old_ids, old_conf = self._past[0]
            order = np.argsort(old_ids, kind="stable")
            pos = np.minimum(np.searchsorted(old_ids[order], ids), len(order) - 1)
            found = old_ids[order][pos] == ids if len(order) else np.zeros(len(ids), bool)
            out[found] = old_conf[order[pos[found]]]
        return out

    def budget(self, stale: np.ndarray, step: StepContext) -> int:
        """B*: the draft budget maximising expected tokens per second at the startup prices."""
        tables = self.tables(step.costs)
        survival = np.cumprod(stale, axis=1)
        scores = np.sort(np.where(survival > 0, survival, 0.0).ravel())[::-1]
        cap = len(scores)
        if tables.logits is not None:
            cap = min(cap, max(0, tables.logits - step.num_reqs))
        gain = step.num_sampling + np.concatenate(([0.0], np.cumsum(scores[:cap])))
        t = step.non_draft_tokens
        verify = tables.verify[t : t + cap + 1]
        if len(verify) < cap + 1:  # past the step token limit: the table's last slope
            extra = np.arange(t + len(verify), t + cap + 1) - (len(tables.verify) - 1)
            slope = tables.verify[-1] - tables.verify[-2]
            verify = np.concatenate([verify, tables.verify[-1] + slope * extra])
        draft = tables.draft[min(step.num_reqs, len(tables.draft) - 1)]
        return int(np.argmax(gain / (draft + verify)))

    def lengths(
        self, conf: np.ndarray, sps: SPS, truth: np.ndarray | None, step: StepContext
    ) -> np.ndarray:
        r, gamma = conf.shape
        b = self.budget(self.stale(step.ids, gamma), step)
        self._past.append((np.array(step.ids), conf.copy()))  # ids: a view the engine rewrites
        if len(self._past) > self.lag:
            self._past.popleft()
        return allocate(conf, b)


def allocate(conf: np.ndarray, budget: int) -> np.ndarray:
    """Verify lengths admitting the `budget` best current survivals (step-major stable order:
    ties go to the shallower position, then the earlier request)."""
    r, gamma = conf.shape
    if budget >= r * gamma:
        return np.full(r, gamma, dtype=np.int64)
    survival = np.cumprod(conf, axis=1)
    survival = np.where(survival > 0, survival, 0.0)
    order = np.argsort(-survival.T.ravel(), kind="stable")[:budget]
    return np.bincount(order % r, minlength=r).astype(np.int64)


def parse(spec: str, arg: str) -> VllmAdaptive:
    """`vllm-adaptive[:key=value,...]`; a bad option is one InputError line."""
    opts = key_values(arg, f"policy {spec}")
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise InputError(None, None, f"policy {spec}: unknown option {unknown[0]!r}; known: "
                         f"{', '.join(OPTIONS)}")  # fmt: skip
    lag = opts.get("lag", "1")
    if lag not in {str(v) for v in LAGS}:
        raise InputError(None, None, f"policy {spec}: unknown lag {lag!r}; known: "
                         f"{', '.join(map(str, LAGS))} (rounds between the confidences that "
                         "size the budget and this round's)")  # fmt: skip
    capture = None
    if "capture" in opts:
        capture = ints(opts["capture"].replace("/", ","), f"policy {spec}: capture")
        check_sizes(capture, f"policy {spec}: capture sizes (S1/S2/...)")
    context = number(
        opts.get("context", str(PROFILE_CONTEXT)), f"policy {spec}: context", ge=1,
        le=MAX_CONTEXT, integer=True,
    )  # fmt: skip
    costs = opts.get("costs")
    if costs is not None:
        if not Path(costs).is_file():
            what = "is a folder" if Path(costs).is_dir() else "no such file"
            raise InputError(costs, None, f"{what} (policy vllm-adaptive's costs=FILE)")
        for curve in read_curves(costs):  # a bad file fails before the run
            build_table(list(curve), 1, 0, costs)
    return VllmAdaptive(spec, int(lag), capture, context, costs)

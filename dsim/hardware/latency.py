"""Step latency of the target from a hardware load profile (docs/design.md, The step-time model;
Trace and profile formats).

A profile gives the median latency of measured steps: verify rows (`batch_tokens` B tokens over
`num_seqs` R sequences with mean KV context `context_len` C) and optional prefill rows (B
prefill tokens over R prefilling sequences, C their mean context at the end of the chunk).

The model, per phase and per measured context, is additive in tokens and sequences,

    latency_C(B, R) = f_C(B) + g_C(R),

with f_C piecewise linear over the measured B and g_C piecewise linear over the measured R
(g_C = 0 at the smallest R), fitted by least squares on that context's rows (a plane in B and
R where the rows cannot determine every knot: too few B measured at several R). f carries the
weight reads, the per-token matmuls and the attention of each token over its context (linear
in B at fixed C); g carries per-sequence work (each sequence's KV reads, its cache handling).
The form needs no rectangular grid, and its in-sample residual is reported (`fit_report`,
the profile's sidecar, `dsim profile show`). Across contexts the model interpolates linearly
in C; past the measured range it extrapolates linearly (clamped to stay positive), so real
curves keep their cliffs. A profile without `num_seqs`, or whose R is a function of B (one R
per B), cannot separate the two and is treated as independent of R (g = 0; said in
`describe`).

A mixed step (verify and prefill work in one pass) is not the sum of the two steps: weights are
read once and the per-step overhead is paid once. `step` composes it as

    verify(B, R, C) + prefill(P, R_p, C_p) - min(fixed_verify(C), fixed_prefill(C_p)),

where fixed = f(0) + g(0), the model's latency at zero tokens and zero sequences (clipped to
[0, the smaller part]). An engine that runs prefill as a pass of its own (`fused=False`,
`EngineConfig.fused_prefill`; dsim's real mode) pays verify + prefill. A profile without
prefill rows prices prefill with the verify surface.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dsim.checks import check_number, check_sizes
from dsim.errors import InputError
from dsim.fileio import write_with_sidecar
from dsim.hardware.engines import Scheduling
from dsim.hardware.gpu_model import GRAPH_MODES, SpecRound, next_captured
from dsim.inputs import read_json_object
from dsim.tables import numeric_column, read_table, require_columns

MAX_BATCH_TOKENS = 1_000_000  # the model tabulates every batch size up to twice the largest
# Past these a row is a slip, not a step: a forward pass of an hour (1e308 would run, its sums
# overflowing), a context beyond every model's window (DeepSeek-V3's is 163,840).
MAX_STEP_MS = 3_600_000
MAX_CONTEXT = 2**24
REQUIRED = ("batch_tokens", "context_len", "latency_ms")
OPTIONAL_NUMERIC = ("num_seqs", "latency_ms_p10", "latency_ms_p90")
PHASES = ("verify", "prefill")
MIN_TABLE_TOKENS = 8192  # tabulate f at every integer B up to at least this
MIN_TABLE_SEQS = 1024


def read_profile(path: str | Path) -> pd.DataFrame:
    """Load and validate a profile CSV; bad cells raise InputError naming the row. The result
    always has a `phase` column (verify when the file has none)."""
    df = read_table(path)
    require_columns(df, path, REQUIRED)
    out = pd.DataFrame(
        {
            "phase": _phases(df, path),
            "batch_tokens": numeric_column(
                df, path, "batch_tokens", positive=True, at_most=MAX_BATCH_TOKENS
            ),
            "context_len": numeric_column(
                df, path, "context_len", nonnegative=True, at_most=MAX_CONTEXT
            ),
            "latency_ms": numeric_column(
                df, path, "latency_ms", positive=True, at_most=MAX_STEP_MS
            ),
        }
    )
    if not (out["phase"] == "verify").any():
        raise InputError(path, None, "no verify rows (phase verify is the default)")
    for col in OPTIONAL_NUMERIC:
        if col in df.columns:
            out[col] = numeric_column(df, path, col, positive=True)
    if "num_seqs" in out:
        over = (out["num_seqs"] > out["batch_tokens"]).to_numpy()
        if over.any():
            i = int(np.argmax(over))
            raise InputError(
                path,
                i + 1,
                f"num_seqs {df['num_seqs'].iloc[i]} > batch_tokens {df['batch_tokens'].iloc[i]} "
                "(every sequence has at least one token)",
            )
    for col in df.columns.difference(out.columns):
        out[col] = df[col]
    key = [c for c in ("phase", "batch_tokens", "num_seqs", "context_len") if c in out]
    dup = out.duplicated(key).to_numpy()
    if dup.any():
        raise InputError(path, int(np.argmax(dup)) + 1, f"duplicate ({', '.join(key)})")
    return out


def _phases(df: pd.DataFrame, path: str | Path) -> np.ndarray:
    if "phase" not in df.columns:
        return np.full(len(df), "verify", dtype=object)
    raw = df["phase"]
    phase = raw.astype(str).str.strip().to_numpy(dtype=object)
    bad = ~np.isin(phase, PHASES) | raw.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(
            path, i + 1, f"column 'phase': must be verify or prefill, got {raw.iloc[i]!r}"
        )
    return phase


# The sidecar's sections that readers look into (an estimate's engine rule, memory and
# parallelism; a measurement's model config): each an object when present.
SIDECAR_SECTIONS = ("engine", "memory", "parallel", "model_config")


def profile_metadata(path: str | Path) -> dict[str, Any]:
    """The JSON sidecar (NAME.json beside NAME.csv), or {} when there is none; its sections
    checked here, once, so no reader meets a string where it expects an object."""
    side = Path(path).with_suffix(".json")
    if not side.exists():
        return {}
    meta = read_json_object(side, "profile sidecar")
    for name in SIDECAR_SECTIONS:
        if name in meta and not isinstance(meta[name], dict):
            raise InputError(
                side, None, f"{name}: expected an object, got {type(meta[name]).__name__}"
            )
    gpus = meta.get("parallel", {}).get("gpus")
    if gpus is not None:
        check_number(gpus, "parallel.gpus", ge=1, integer=True, where=side)
    return meta


def decode_graphs(meta: dict[str, Any], where: str | Path) -> tuple[tuple[int, ...], str]:
    """The sizes a profile's engine captures full decode graphs at and what they count
    ("tokens" or "requests"), from its sidecar; () when its decode steps run without them."""
    graphs = meta.get("engine", {}).get("graphs") or {}
    side = Path(where).with_suffix(".json")
    if not isinstance(graphs, dict):
        raise InputError(None, None, f"{side}: engine.graphs must be an object, got {graphs!r}")
    for key, known in (("decode", GRAPH_MODES), ("keyed_by", ("tokens", "requests"))):
        if key in graphs and graphs[key] not in known:
            raise InputError(
                None, None, f"{side}: engine.graphs.{key} {graphs[key]!r} is not one of "
                f"{', '.join(known)}"
            )  # fmt: skip
    sizes = graphs.get("sizes") or ()
    if sizes:
        what = f"{side}: engine graphs sizes"
        sizes = check_sizes(tuple(sizes) if isinstance(sizes, list) else (sizes,), what)
        record = meta["engine"].get("scheduling")  # read by its own reader: a bad one is one line
        budget = None if record is None else Scheduling.from_record(record, str(side)).token_budget
        if budget is not None and sizes[-1] > budget:
            raise InputError(
                None, None, f"{what}: {sizes[-1]} is above the engine's step token budget "
                f"({budget}, engine.scheduling.token_budget): a step never holds that many"
            )  # fmt: skip
    if graphs.get("decode") == "eager":
        sizes = ()
    return sizes, str(graphs.get("keyed_by", "tokens"))


def staircase(meta: dict[str, Any], where: str | Path) -> tuple[int, ...]:
    """The token counts whose padding a verify step pays between a profile's points: full
    decode graphs keyed by tokens (vLLM's). Graphs keyed by requests (SGLang's) pad the request
    count, which the additive surface f(B) + g(R) cannot carry: none (docs/design.md)."""
    sizes, keyed = decode_graphs(meta, where)
    return sizes if keyed == "tokens" else ()


def engine_label(meta: dict[str, Any]) -> str:
    """Which engine a profile's steps belong to, from its sidecar `meta`: an estimate's preset
    (with its overhead scale when not 1), "measured" for a measurement, "" without a sidecar."""
    if not meta:
        return ""
    if not meta.get("estimate"):
        return "measured"
    engine = meta.get("engine")
    if not isinstance(engine, dict) or "name" not in engine:
        return "not recorded"
    scale = engine.get("overhead_scale", 1.0)
    return str(engine["name"]) + ("" if scale == 1 else f" x {scale:g}")


def spec_costs(path: str | Path, sidecar: dict | None = None) -> tuple[SpecRound, float]:
    """An estimate's engine speculative costs from its sidecar (read here unless given): the
    round's terms and the ragged verify penalty; zeros where the sidecar records none (a
    measurement, `vllm-2023`), so those profiles run as before. An estimate whose round terms
    predate the host time per proposer step (a non-zero per-pass constant, which meant another
    thing) is refused: regenerate it."""
    engine = (profile_metadata(path) if sidecar is None else sidecar).get("engine")
    if not isinstance(engine, dict):
        return SpecRound(), 0.0
    side = Path(path).with_suffix(".json")
    spec = engine.get("spec_round", {})
    terms = spec.get("terms_s", {}) if isinstance(spec, dict) else None
    old = isinstance(terms, dict) and terms.get("per_pass_s", 0) != 0
    if old and "host_pass_s" not in terms:
        raise InputError(
            side,
            None,
            "engine spec_round: per_pass_s is an older dsim's round "
            "term; regenerate the estimate with `dsim profile --roofline`",
        )
    ragged = engine.get("ragged", {})
    penalty = ragged.get("penalty", 0.0) if isinstance(ragged, dict) else None
    values = [
        terms.get(k, 0.0) if isinstance(terms, dict) else None
        for k in ("per_round_s", "host_pass_s")
    ]
    for name, v in zip(
        ("per_round_s", "host_pass_s", "ragged penalty"), [*values, penalty], strict=True
    ):
        if not (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < np.inf):
            raise InputError(side, None, f"engine {name}: expected a number >= 0, got {v!r}")
    return SpecRound(float(values[0]), float(values[1])), float(penalty)


def gpu_figures(sidecar: dict[str, Any], replicas: int, throughput_tok_s: float) -> dict[str, Any]:
    """GPUs per replica (an estimate's sidecar says how many GPUs one step runs on), GPUs in
    total and output throughput per GPU; None where the sidecar does not say (a measurement)."""
    gpus = sidecar.get("parallel", {}).get("gpus")  # checked by `profile_metadata`
    if gpus is None:
        return {"gpus_per_replica": None, "gpus_total": None, "throughput_tok_s_per_gpu": None}
    gpus = int(gpus)
    return {
        "gpus_per_replica": gpus,
        "gpus_total": gpus * replicas,
        "throughput_tok_s_per_gpu": throughput_tok_s / (gpus * replicas),
    }


def write_profile(df: pd.DataFrame, path: str | Path, meta: dict[str, Any]) -> None:
    """Write the CSV and its JSON sidecar atomically."""
    write_with_sidecar(path, lambda tmp: df.to_csv(tmp, index=False, float_format="%.6g"), meta)


def _interp_linear(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """np.interp with linear extrapolation from the end segments."""
    if len(xs) == 1:
        return np.full_like(x, ys[0], dtype=np.float64)
    y = np.interp(x, xs, ys)
    lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
    hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    y = np.where(x < xs[0], ys[0] + lo_slope * (x - xs[0]), y)
    return np.where(x > xs[-1], ys[-1] + hi_slope * (x - xs[-1]), y)


def _int(b: Any) -> Any:
    """Python int for integer scalars (the tables' fast path), anything else unchanged."""
    return int(b) if isinstance(b, np.integer) else b


def _hat(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Piecewise-linear basis: column k is the tent at knots[k] (x within the knots)."""
    eye = np.eye(len(knots))
    return np.stack([np.interp(x, knots, eye[k]) for k in range(len(knots))], axis=1)


def _fit_additive(
    b: np.ndarray, r: np.ndarray, y: np.ndarray, use_r: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares f at the unique B and g at the unique R (g = 0 at the smallest R). When
    the rows cannot determine that (too few B shared between sequence counts), a plane
    a + t B + s (R - R_min) instead; returns knots and values of f and g either way."""
    bk, rk = np.unique(b), np.unique(r)
    if not use_r or len(rk) == 1:
        rk = rk[:1]
    design = np.hstack([_hat(b, bk), _hat(r, rk)[:, 1:]])
    if np.linalg.matrix_rank(design) == design.shape[1]:
        sol = np.linalg.lstsq(design, y, rcond=None)[0]
        return bk, sol[: len(bk)], rk, np.concatenate([[0.0], sol[len(bk) :]])
    cols = [np.ones_like(b), b] + ([r - rk[0]] if len(rk) > 1 else [])
    a, t, *slope = np.linalg.lstsq(np.stack(cols, axis=1), y, rcond=None)[0]
    ends, rends = np.unique(bk[[0, -1]]), np.unique(rk[[0, -1]])
    return ends, a + t * ends, rends, (slope[0] if slope else 0.0) * (rends - rends[0])


@dataclass
class Surface:
    """One phase's latency surface: f_C(B) and g_C(R) per measured context, tabulated at every
    integer B and R so the simulator's lookups are array indexing."""

    contexts: list[float]
    f: np.ndarray  # (contexts, table B) seconds
    g: np.ndarray  # (contexts, table R) seconds
    knots: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # bk, f, rk, g
    r_dependent: bool
    rows: int
    residual: np.ndarray  # relative in-sample error at every measured row

    @classmethod
    def fit(cls, df: pd.DataFrame, use_r: bool, graph_tokens: tuple[int, ...] = ()) -> Surface:
        """The surface of `df`'s rows; with `graph_tokens` (the token counts full graphs are
        captured at) f(B) is f at B rounded up to the next captured size, a staircase: the
        rows price their own padded steps, and a B between two rows runs the padded graph."""
        contexts = np.sort(df["context_len"].unique()).astype(np.float64)
        bmax = max(MIN_TABLE_TOKENS, int(2 * df["batch_tokens"].max()))
        rmax = max(MIN_TABLE_SEQS, int(2 * df["num_seqs"].max()))
        tb, tr = np.arange(bmax + 1.0), np.arange(rmax + 1.0)
        # the tokens a step of B runs: B, or the next captured size where graphs pad it
        run = np.where(tb >= 1, next_captured(tb, graph_tokens), tb) if graph_tokens else tb
        f, g, knots, residual = [], [], [], []
        for ctx in contexts:
            part = df[df["context_len"] == ctx]
            b, r = part["batch_tokens"].to_numpy(float), part["num_seqs"].to_numpy(float)
            y = part["latency_ms"].to_numpy(float) / 1e3
            bk, fv, rk, gv = _fit_additive(b, r, y, use_r)
            knots.append((bk, fv, rk, gv))
            f.append(_interp_linear(run, bk, fv))
            g.append(_interp_linear(tr, rk, gv))
            residual.append((np.interp(b, bk, fv) + np.interp(r, rk, gv)) / y - 1)
        return cls(
            contexts.tolist(),
            np.stack(f),
            np.stack(g),
            knots,
            use_r,
            len(df),
            np.concatenate(residual),
        )

    def bracket(self, context_len: float) -> tuple[int, int, float]:
        """Rows of the two contexts around `context_len` and the blend weight (may extrapolate)."""
        ctxs = self.contexts
        if len(ctxs) == 1:
            return 0, 0, 0.0
        i = min(max(bisect.bisect_left(ctxs, context_len), 1), len(ctxs) - 1)
        return i - 1, i, (context_len - ctxs[i - 1]) / (ctxs[i] - ctxs[i - 1])

    def __post_init__(self) -> None:
        # Python lists for the scalar path: indexing and float arithmetic without numpy
        # scalars (the engine prices ~1e6 steps per run).
        self._fl, self._gl = self.f.tolist(), self.g.tolist()
        self._fixed = [fv[0] + gv[0] for fv, gv in zip(self._fl, self._gl, strict=True)]

    def _f(self, rows: tuple[int, ...], b: Any) -> list[Any]:
        """f(B) at each of `rows`: table entries when B is within the table (checked once)."""
        if isinstance(b, int) and 0 <= b < len(self._fl[0]):
            return [self._fl[row][b] for row in rows]
        arr = np.asarray(b)
        if arr.dtype.kind in "iu" and arr.size and arr.min() >= 0 and arr.max() < self.f.shape[1]:
            return [self.f[row, arr] for row in rows]
        out = [_interp_linear(arr.astype(np.float64), *self.knots[row][:2]) for row in rows]
        return [float(y) if y.ndim == 0 else y for y in out]

    def _g(self, lo: int, hi: int, r: int) -> tuple[float, float]:
        """g(R) at rows lo and hi (a pair, not a loop: the engine asks once a step)."""
        gl = self._gl
        if 0 <= r < len(gl[0]):
            return gl[lo][r], gl[hi][r]
        g_lo, g_hi = (float(_interp_linear(np.float64(r), *self.knots[k][2:])) for k in (lo, hi))
        return g_lo, g_hi

    def at(self, tokens: Any, seqs: int, context_len: float) -> Any:
        """f(B) + g(R) blended across the contexts around C (unfloored); B may be an array."""
        return self.section(seqs, context_len)(tokens)

    def section(self, seqs: int, context_len: float) -> Section:
        """The surface at fixed R and C, a function of B alone."""
        lo, hi, w = self.bracket(context_len)
        return Section(self, lo, hi, w, *self._g(lo, hi, seqs))

    def fixed(self, context_len: float) -> float:
        """Latency at zero tokens and zero sequences: the per-step cost a mixed step pays once."""
        lo, hi, w = self.bracket(context_len)
        y0 = self._fixed[lo]
        return max(y0 + w * (self._fixed[hi] - y0), 0.0)

    def report(self) -> dict[str, Any]:
        err = np.abs(self.residual)
        return {
            "rows": self.rows,
            "depends_on_num_seqs": self.r_dependent,
            "fit_median_abs_error": round(float(np.median(err)), 4),
            "fit_worst_abs_error": round(float(np.max(err)), 4),
        }


class Section:
    """A surface at fixed R and C: its context bracket and g_C(R) are looked up once, so the
    engine's several look-ups per step (drafter, SPS(B), the step's charge) pay only f_C(B)."""

    __slots__ = ("surface", "lo", "hi", "w", "g_lo", "g_hi", "f_lo", "f_hi")

    def __init__(self, surface: Surface, lo: int, hi: int, w: float, g_lo: float, g_hi: float):
        self.surface, self.lo, self.hi, self.w = surface, lo, hi, w
        self.g_lo, self.g_hi = g_lo, g_hi
        self.f_lo, self.f_hi = surface._fl[lo], surface._fl[hi]

    def __call__(self, tokens: Any) -> Any:
        """f(B) + g(R) blended across the contexts around C (unfloored); B may be an array."""
        if isinstance(tokens, int) and 0 <= tokens < len(self.f_lo):  # the scalar fast path
            f_lo, f_hi = self.f_lo[tokens], self.f_hi[tokens]
        elif self.lo == self.hi:
            f_lo = f_hi = self.surface._f((self.lo,), tokens)[0]
        else:
            f_lo, f_hi = self.surface._f((self.lo, self.hi), tokens)
        return self._blend(f_lo, f_hi)

    def span(self, start: int, stop: int) -> np.ndarray:
        """`self(np.arange(start, stop))`, the same values, from slices of the table rows (the
        policies' SPS over consecutive B: no bounds check or gather per call)."""
        f = self.surface.f
        if not 0 <= start <= stop <= f.shape[1]:
            return self(np.arange(start, stop))
        return self._blend(f[self.lo, start:stop], f[self.hi, start:stop])

    def _blend(self, f_lo: Any, f_hi: Any) -> Any:
        y0 = f_lo + self.g_lo
        if self.lo == self.hi:
            return y0
        return y0 + self.w * (f_hi + self.g_hi - y0)


class StepPrice:
    """`LatencyModel.step` and `.latency` at one step's sequences and contexts, with every
    look-up that does not depend on the verify tokens B done once (the engine prices a step
    several times: the drafter's pass, the policy's SPS(B), the step's charge)."""

    __slots__ = (
        "model",
        "num_seqs",
        "context_len",
        "section",
        "floor",
        "prefill_tokens",
        "p",
        "shared",
    )

    def __init__(
        self,
        model: LatencyModel,
        num_seqs: int,
        context_len: float,
        prefill_tokens: int = 0,
        prefill_seqs: int = 0,
        prefill_context: float = 0.0,
        fused: bool = True,
    ) -> None:
        self.model, self.num_seqs, self.context_len = model, int(num_seqs), context_len
        self.section, self.floor = model.verify.section(self.num_seqs, context_len), model._floor
        self.prefill_tokens, self.p, self.shared = prefill_tokens, 0.0, 0.0
        if prefill_tokens:
            self.p = model.prefill(prefill_tokens, prefill_seqs, prefill_context)
        if prefill_tokens and fused:
            fixed = model.verify.fixed(context_len), model.prefill_surface.fixed(prefill_context)
            self.shared = min(*fixed, self.p)

    def verify(self, batch_tokens: Any) -> Any:
        """`LatencyModel.latency` at this step's sequences and context."""
        b = batch_tokens if type(batch_tokens) is int else _int(batch_tokens)
        y = self.section(b)
        return y if type(y) is float and y > self.floor else self.model._floored(y)

    def span(self, start: int, stop: int) -> np.ndarray:
        """`self(np.arange(start, stop))`, the same values, faster (`Section.span`)."""
        v = self.model._floored(self.section.span(start, stop))
        return self._with_prefill(v) if self.prefill_tokens else v

    def latency(self, batch_tokens: Any, num_seqs: int, context_len: float) -> Any:
        """`LatencyModel.latency` (a drop-in for it, e.g. for `DraftCost`)."""
        if num_seqs == self.num_seqs and context_len == self.context_len:
            return self.verify(batch_tokens)
        return self.model.latency(batch_tokens, num_seqs, context_len)

    def __call__(self, verify_tokens: Any) -> Any:
        """`LatencyModel.step` for B verify tokens (B may be an array: the policies' SPS(B))."""
        if not self.prefill_tokens:
            return self.verify(verify_tokens)
        if not self.num_seqs:
            return self.p
        return self._with_prefill(self.verify(verify_tokens))

    def ragged(self, verify_tokens: Any, penalty: float) -> Any:
        """`self(B)` with the target's verify pass times (1 + penalty): a step whose requests
        verify different lengths (an unfused step's own prefill pass is not multiplied)."""
        v = self.verify(verify_tokens) * (1.0 + penalty)
        return self._with_prefill(v) if self.prefill_tokens else v

    def ragged_span(self, start: int, stop: int, penalty: float) -> np.ndarray:
        """`ragged` at B = start..stop-1 (`span`'s table slices)."""
        v = self.model._floored(self.section.span(start, stop)) * (1.0 + penalty)
        return self._with_prefill(v) if self.prefill_tokens else v

    def _with_prefill(self, v: Any) -> Any:
        """The step's verify latency `v` plus its prefill pass, less what a fused step shares."""
        if isinstance(v, float):
            return v + self.p - min(self.shared, v)
        return v + self.p - np.minimum(self.shared, v)


class StepRate:
    """SPS(B) = 1 / (extra_s + price(B)): steps per second of a round that verifies B tokens,
    the step's drafter, speculative machinery and scheduling seconds `extra_s` included (what
    the policies weigh); `span(start, stop)` gives B = start..stop-1 without building and
    gathering an index. Under a `ragged_penalty` (the penalty this step pays if its requests
    verify different lengths; 0 when it cannot pay one) SPS(B) is a ragged round's and
    `uniform(B)`, `uniform_span` a round whose requests all verify the same length."""

    __slots__ = ("price", "extra_s", "ragged_penalty")

    def __init__(self, price: StepPrice, extra_s: float, ragged_penalty: float = 0.0) -> None:
        self.price, self.extra_s, self.ragged_penalty = price, extra_s, ragged_penalty

    def __call__(self, batch_tokens: Any) -> Any:
        if self.ragged_penalty:
            return 1.0 / (self.extra_s + self.price.ragged(batch_tokens, self.ragged_penalty))
        return 1.0 / (self.extra_s + self.price(batch_tokens))

    def span(self, start: int, stop: int) -> np.ndarray:
        if self.ragged_penalty:
            ragged = self.price.ragged_span(start, stop, self.ragged_penalty)
            return 1.0 / (self.extra_s + ragged)
        return 1.0 / (self.extra_s + self.price.span(start, stop))

    def uniform(self, batch_tokens: Any) -> Any:
        return 1.0 / (self.extra_s + self.price(batch_tokens))

    def uniform_span(self, start: int, stop: int) -> np.ndarray:
        return 1.0 / (self.extra_s + self.price.span(start, stop))


class LatencyModel:
    """Target step latency in seconds from a profile: verify, prefill and mixed steps (module
    doc). The engine charges every step through `step`; checks read `latency` (verify only)."""

    def __init__(
        self,
        df: pd.DataFrame,
        name: str = "profile",
        engine: str = "",
        graph_tokens: tuple[int, ...] = (),
    ) -> None:
        """`graph_tokens`: the token counts the engine captures full decode graphs at, whose
        padding a verify step between two profiled counts pays (`Surface.fit`)."""
        self.name = name
        self.engine = engine
        if "phase" not in df:
            df = df.assign(phase="verify")
        if "num_seqs" in df:
            self.r_note = "depends on num_seqs"
            tied = df.groupby(["phase", "batch_tokens"])["num_seqs"].nunique().max() <= 1
            if tied:
                self.r_note = "num_seqs is tied to batch_tokens: treated as independent of R"
            use_r = not tied
        else:
            df = df.assign(num_seqs=1.0)
            self.r_note = "no num_seqs column: treated as independent of R"
            use_r = False
        verify = df[df["phase"] == "verify"]
        prefill = df[df["phase"] == "prefill"]
        if verify.empty:
            raise InputError(name, None, "no verify rows (phase verify is the default)")
        self.verify = Surface.fit(verify, use_r, graph_tokens)
        self.prefill_surface = Surface.fit(prefill, use_r) if len(prefill) else self.verify
        self.has_prefill = bool(len(prefill))
        self._floor = float(df["latency_ms"].min()) / 1e3 * 0.05

    @classmethod
    def from_csv(cls, path: str | Path, meta: dict[str, Any] | None = None) -> LatencyModel:
        """The profile's model, its sidecar `meta` read here unless given; a staircase in the
        verify tokens where the sidecar records one (`staircase`)."""
        meta = profile_metadata(path) if meta is None else meta
        return cls(read_profile(path), Path(path).stem, engine_label(meta), staircase(meta, path))

    def latency(self, batch_tokens: Any, num_seqs: int = 1, context_len: float = 0.0) -> Any:
        """Seconds for a verify step of B tokens over R sequences with mean context C; B may be
        a scalar or an array (at fixed R and C)."""
        return self._floored(self.verify.at(_int(batch_tokens), int(num_seqs), context_len))

    def prefill(self, tokens: int, num_seqs: int = 1, context_len: float = 0.0) -> float:
        """Seconds for a prefill-only step (the verify surface when the profile has no
        prefill rows)."""
        return self._floored(self.prefill_surface.at(_int(tokens), int(num_seqs), context_len))

    def step(
        self,
        verify_tokens: Any,
        num_seqs: int,
        context_len: float,
        prefill_tokens: int = 0,
        prefill_seqs: int = 0,
        prefill_context: float = 0.0,
        fused: bool = True,
    ) -> Any:
        """Seconds for a step with verify work (B may be an array at fixed R and C: the
        policies' SPS(B)) and prefill work; a fused mixed step pays the fixed cost once, an
        unfused one (prefill as its own pass) pays the sum of the two."""
        return self.priced(
            num_seqs, context_len, prefill_tokens, prefill_seqs, prefill_context, fused
        )(verify_tokens)

    def priced(
        self,
        num_seqs: int,
        context_len: float,
        prefill_tokens: int = 0,
        prefill_seqs: int = 0,
        prefill_context: float = 0.0,
        fused: bool = True,
    ) -> StepPrice:
        """`step` as a function of the verify tokens alone, for one step's other figures."""
        return StepPrice(
            self, num_seqs, context_len, prefill_tokens, prefill_seqs, prefill_context, fused
        )

    def _floored(self, y: Any) -> Any:
        if isinstance(y, float):
            return y if y > self._floor else self._floor
        y = np.maximum(y, self._floor)
        return float(y) if y.ndim == 0 else y

    def fit_report(self) -> dict[str, Any]:
        """How the model reads this profile, and its in-sample relative residuals."""
        out = {"num_seqs": self.r_note, "verify": self.verify.report()}
        out["prefill"] = (
            self.prefill_surface.report()
            if self.has_prefill
            else "no prefill rows: prefill priced with the verify surface"
        )
        return out

    def describe(self) -> str:
        """One line for run summaries and `dsim profile show`."""
        v = self.verify.report()
        prefill = "own prefill rows" if self.has_prefill else "prefill priced as verify"
        engine = f"engine {self.engine}; " if self.engine else ""
        return (
            f"{self.name}: {engine}{self.r_note}; {prefill}; fit residual of the profile's own "
            f"rows: median {v['fit_median_abs_error']:.1%}, worst {v['fit_worst_abs_error']:.1%}"
        )

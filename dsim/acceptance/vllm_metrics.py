"""Acceptance from a running vLLM: its speculative-decoding counters in a Prometheus scrape.

`curl host:port/metrics > FILE` gives a Prometheus text exposition. vLLM (v1 engine, the format
of vllm/v1/spec_decode/metrics.py in the 0.9-0.11 releases) exports four counters, each with
the labels `model_name` and `engine` (one series per engine):
- `vllm:spec_decode_num_drafts`: verification rounds that carried drafts;
- `vllm:spec_decode_num_draft_tokens`: drafted tokens;
- `vllm:spec_decode_num_accepted_tokens`: accepted drafted tokens;
- `vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}` (i = 0-based draft position):
  rounds whose first i + 1 drafts were all accepted.
The client library writes counters with a `_total` suffix (and `_created` timestamps, ignored
here); both spellings are read. Per-position counts over drafts are the unconditional
acceptance (prefix survival) at each position; their ratios are the conditional curve.
Docs: docs/acceptance-trace.md, "vLLM scrapes"; docs/design.md, Acceptance sources.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsim.acceptance.parametric import DomainModel, serving_latent
from dsim.errors import InputError, Notice
from dsim.inputs import input_file

PREFIX = "vllm:spec_decode_"
DRAFTS = "num_drafts"
DRAFT_TOKENS = "num_draft_tokens"
ACCEPTED = "num_accepted_tokens"
PER_POS = "num_accepted_tokens_per_pos"
METRICS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,?)\s*')
_UNESCAPE = {"n": "\n", '"': '"', "\\": "\\"}
_POSITION = re.compile(r"0|[1-9][0-9]*")  # canonical: `00` and `0` are not two positions
MAX_POSITIONS = 1024  # draft positions a scrape may report
# vLLM adds a round's accepted tokens to the total and to its positions together, so the two
# agree but for rounds counted between the scrape's reads of them: a larger gap is said.
TOTALS_TOLERANCE = 0.01

Key = tuple[str, tuple[tuple[str, str], ...]]  # metric (without prefix/suffix), sorted labels


@dataclass(frozen=True)
class Sample:
    value: float
    line: int


@dataclass(frozen=True)
class Acceptance:
    """Counts summed over the selected series, and the curves they give."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_position: np.ndarray  # accepted-prefix counts, position 1..n

    @property
    def unconditional(self) -> np.ndarray:
        """P(first k drafts all accepted), k = 1..n: the prefix survival."""
        return self.per_position / self.drafts

    @property
    def conditional(self) -> np.ndarray:
        """P(draft k accepted | drafts 1..k-1 accepted); 0 past a position nobody reached."""
        u = self.unconditional
        prev = np.concatenate([[1.0], u[:-1]])
        return np.divide(u, prev, out=np.zeros_like(u), where=prev > 0)

    @property
    def reached(self) -> int:
        """Positions some round reached: 1, then one more for each position ever accepted."""
        return min(len(self.per_position), 1 + int(np.count_nonzero(self.per_position)))

    @property
    def tau(self) -> float:
        """Mean tokens per round including the bonus token, as vLLM reports it."""
        return 1.0 + float(self.per_position.sum()) / self.drafts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _UNESCAPE.get(m[1], "\\" + m[1]), text)


def _parse_sample(text: str, path: Path, line: int) -> tuple[str, dict[str, str], float]:
    """One sample line: name, labels and value (an optional timestamp is ignored)."""
    name = _NAME.match(text)[0]
    rest, labels = text[len(name) :].lstrip(), {}
    if rest.startswith("{"):
        rest = rest[1:]
        while not rest.lstrip().startswith("}"):
            m = _LABEL.match(rest)
            if m is None:
                raise InputError(path, line, f"malformed labels in {text!r}")
            if m[1] in labels:
                raise InputError(path, line, f"label {m[1]!r} given twice in {text!r}")
            labels[m[1]] = _unescape(m[2])
            rest = rest[m.end() :]
            if not m[3] and not rest.startswith("}"):
                raise InputError(path, line, f"malformed labels in {text!r}")
        rest = rest.lstrip()[1:]
    fields = rest.split()
    if not 1 <= len(fields) <= 2:
        raise InputError(path, line, f"expected 'NAME{{LABELS}} VALUE', got {text!r}")
    try:
        value = float(fields[0])
    except ValueError:
        raise InputError(path, line, f"{name}: non-numeric sample {fields[0]!r}") from None
    if not np.isfinite(value) or value < 0:
        raise InputError(path, line, f"{name}: a counter must be finite and >= 0, got {value}")
    return name, labels, value


def read_scrape(path: str | Path) -> dict[Key, Sample]:
    """The speculative-decoding counter series of a scrape, keyed by metric and labels."""
    path = input_file(path, "vLLM metrics scrape")
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise InputError(path, None, "not a text file (expected a Prometheus scrape)") from None
    out: dict[Key, Sample] = {}
    for i, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text.startswith(PREFIX):  # comments, HELP/TYPE lines, other metrics
            continue
        name, labels, value = _parse_sample(text, path, i)
        metric = name[len(PREFIX) :]
        if metric.endswith("_created"):
            continue
        metric = metric.removesuffix("_total")
        if metric not in METRICS:
            continue
        key = (metric, tuple(sorted(labels.items())))
        if key in out:
            raise InputError(path, i, f"{name}: the same series appears twice")
        out[key] = Sample(value, i)
    if not out:
        raise InputError(path, None, f"no speculative-decoding metrics ({PREFIX}*) in the scrape")
    return out


def _difference(after: dict[Key, Sample], before: dict[Key, Sample], paths) -> dict[Key, Sample]:
    """Per-series increase from BEFORE to AFTER; a counter that went down means a restart."""
    after_path, before_path = paths
    out = dict(after)
    for key, old in before.items():
        new = after.get(key)
        if new is None:
            raise InputError(
                before_path, old.line, f"series {_show(key)} is missing from {after_path}"
            )
        if new.value < old.value:
            raise InputError(
                after_path,
                new.line,
                f"{_show(key)} went down since {before_path} ({old.value:g} -> {new.value:g}): "
                "the server restarted between the scrapes",
            )
        out[key] = Sample(new.value - old.value, new.line)
    return out


def _show(key: Key) -> str:
    metric, labels = key
    return PREFIX + metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def _select(series: dict[Key, Sample], model: str | None, path: Path) -> dict[Key, Sample]:
    """Series of one model: the one named, or the only one there is."""
    models = sorted({dict(labels).get("model_name", "") for _, labels in series})
    if model is None:
        if len(models) > 1:
            raise InputError(
                path,
                None,
                f"the scrape holds several models ({', '.join(models)}): pick one with "
                "[model=NAME]",
            )
        return series
    if model not in models:
        raise InputError(
            path, None, f"model {model!r} matches no model_name label (models: {', '.join(models)})"
        )
    return {k: s for k, s in series.items() if dict(k[1]).get("model_name", "") == model}


def read_vllm_acceptance(
    path: str | Path, model: str | None = None, since: str | Path | None = None
) -> Acceptance:
    """Counts of one model summed over engines, from one scrape or the difference of two."""
    path = Path(path)
    series = read_scrape(path)
    if since is not None:
        series = _difference(series, read_scrape(since), (path, Path(since)))
    series = _select(series, model, path)
    window = f" since {since}" if since is not None else ""
    totals: dict[str, float] = {}
    positions: dict[int, list] = {}  # 0-based position -> [count, first line]
    for (metric, labels), sample in series.items():
        if metric != PER_POS:
            totals[metric] = totals.get(metric, 0.0) + sample.value
            continue
        text = dict(labels).get("position")
        if text is None or not _POSITION.fullmatch(text) or int(text) >= MAX_POSITIONS:
            raise InputError(
                path,
                sample.line,
                f"position label must be one of 0, 1, ..., {MAX_POSITIONS - 1} (no leading "
                f"zeros), got {text!r}",
            )
        entry = positions.setdefault(int(text), [0.0, sample.line])
        entry[0] += sample.value
    missing = [PREFIX + m for m in (DRAFTS, DRAFT_TOKENS, ACCEPTED) if m not in totals]
    if not positions:
        missing.append(PREFIX + PER_POS)
    if missing:
        raise InputError(path, None, f"missing {', '.join(missing)}")
    n = max(positions) + 1
    if sorted(positions) != list(range(n)):
        gap = min(set(range(n)) - set(positions))
        raise InputError(path, None, f"{PREFIX}{PER_POS}: no series for position {gap}")
    counts = np.array([positions[k][0] for k in range(n)])
    if not (np.isfinite(counts).all() and all(np.isfinite(v) for v in totals.values())):
        raise InputError(
            path, None, f"the counters' sums overflow (beyond {np.finfo(float).max:.3g})"
        )
    drafts = totals[DRAFTS]
    if drafts == 0:
        raise InputError(path, None, f"zero drafts{window}: no speculative decoding to measure")
    for k in range(n):
        line = positions[k][1]
        if counts[k] > drafts:
            raise InputError(
                path, line, f"position {k}: {counts[k]:g} accepted exceeds {drafts:g} drafts"
            )
        if k and counts[k] > counts[k - 1]:
            raise InputError(
                path,
                line,
                f"position {k}: {counts[k]:g} accepted, more than position {k - 1}'s "
                f"{counts[k - 1]:g} (a prefix count cannot rise with position)",
            )
    if totals[ACCEPTED] > totals[DRAFT_TOKENS] or totals[DRAFT_TOKENS] > drafts * n:
        raise InputError(
            path,
            None,
            f"inconsistent totals: {totals[ACCEPTED]:g} accepted, {totals[DRAFT_TOKENS]:g} "
            f"draft tokens, {drafts:g} drafts of at most {n} tokens",
        )
    summed = float(counts.sum())
    if abs(summed - totals[ACCEPTED]) > TOTALS_TOLERANCE * max(totals[ACCEPTED], summed):
        warnings.warn(
            f"{path}: its per-position counters sum to {summed:g} accepted tokens but "
            f"{PREFIX}{ACCEPTED} says {totals[ACCEPTED]:g}{window}: dsim follows the per-position "
            "counters (a scrape of two servers, or of counters reset apart?)",
            Notice,
            stacklevel=2,
        )
    return Acceptance(drafts, totals[DRAFT_TOKENS], totals[ACCEPTED], counts)


def vllm_domain(
    path: str | Path,
    gamma: int,
    spread: float,
    spread_req: float,
    model: str | None = None,
    since: str | Path | None = None,
) -> DomainModel:
    """The parametric domain of a scrape: latent position means fitted so that the conditional
    curve served at full verification with these spreads is the scrape's at every position it
    reached, the way the presets are fitted (a scrape has no per-request information, so the
    spreads are assumptions). Positions it never reached are never accepted, and said so."""
    acc = read_vllm_acceptance(path, model, since)
    n, reached = len(acc.per_position), acc.reached
    if n < gamma:
        raise InputError(path, None, f"the scrape has {n} draft positions: use --gamma {n} or less")
    if reached < min(n, gamma):
        warnings.warn(
            f"{path}: no round reached draft position {reached + 1}, so dsim never accepts a "
            f"draft from position {reached + 1} on",
            Notice,
            stacklevel=2,
        )
    curve = tuple(acc.conditional[:reached].tolist())
    latent = serving_latent(curve, spread, spread_req, path)
    return DomainModel(model or "vllm", latent + (0.0,) * (n - reached))

"""Sweep configuration: a TOML file, checked completely before any simulation starts.

Layout (every key but `policies` and the load axis is optional)::

    description = "what the sweep shows"
    policies = ["mtp1", "dspark"]
    baseline = "mtp1"                 # gains are reported over this policy (default: the first),
                                      # or "best-fixed": the best of the fixed:K policies
    seeds = [0, 1, 2]                 # every point is run once per seed (default: run.seed)

    [run]                             # any RunSpec field but policy and the load axis, or
                                      # vllm bench serve's names (request_rate, burstiness,
                                      # max_concurrency, num_prompts, dataset_name, random_*)
    trace = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
    gamma = 5

    [load]                            # exactly one axis
    rate_scale = [1, 2, 4, 8]         # arrival-rate scale factors, or
    # max_seqs = [8, 32, 128]         # caps on concurrent requests, or
    # replicas = [1, 2, 4]            # replicas behind run.router (docs/cluster.md)

    [layout]                          # optional, crossed with the load axis and each other
    disagg = ["2:6", "3:5", "off"]    # P:D splits ("off": run.replicas colocated replicas)
    # replicas = [2, 4]               # colocated replicas
    # profile = ["a.csv", "b.csv"]    # step-time profiles (TP degrees, engines); an entry
                                      # may be a bundle with its own drafter cost:
    # profile = [{ profile = "a.csv", draft_cost = "a-eagle3.csv", drafter_kind = "ar" }]

    [sla]
    anchors = [40, 80]                # minimum per-user tok/s
    ttft_p99_s = 10.0                 # tail bounds (dsim.sla): a point missing one is excluded
    tpot_p99_s = 0.05                 # ttft|tpot|itl|e2el at p50|p90|p99, in s (at most);
    # tps_p10 = 20                    # tps at p1|p10|p50, in tok/s (at least)

Every problem is one line naming the file and the key; the first one found is raised.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path
from types import UnionType
from typing import Any, NoReturn, get_args, get_type_hints

from dsim import bench_names, bundles, spec_grammar
from dsim.checks import check_number
from dsim.cluster.topology import layout as cluster_layout
from dsim.errors import InputError
from dsim.policies import check_gamma, parse_policy
from dsim.run_inputs import resolve, spec_warnings
from dsim.run_spec import MAX_COUNTS, RUN_OPTIONS, VLLM_NAMES, RunSpec
from dsim.sla import Sla
from dsim.sla import read as read_sla

LOAD_AXES = ("rate_scale", "max_seqs", "replicas")
INTEGER_AXES = ("max_seqs", "replicas")
LAYOUT_AXES = ("disagg", "replicas", "profile")
BUNDLE_KEYS = ("profile", "draft_cost", "drafter_kind")  # a `[layout] profile` entry's table
BEST_FIXED = "best-fixed"  # the baseline that is the upper envelope of the fixed:K policies
COLOCATED = "off"  # a `[layout] disagg` entry: no disaggregation
_TOP_KEYS = {"description", "policies", "baseline", "seeds", "run", "load", "layout", "sla"}
_RUN_TYPES = get_type_hints(RunSpec)
_RUN_KEYS = [f for f in RUN_OPTIONS if f != "policy"]


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: the base RunSpec, the policies and load values to cross, SLA anchors."""

    path: Path
    description: str
    base: RunSpec
    policies: tuple[str, ...]
    baseline: str
    load_axis: str
    loads: tuple[float, ...]
    sla_anchors: tuple[float, ...]
    seeds: tuple[int, ...] = (0,)
    layouts: tuple[Layout, ...] = ()  # empty: the base spec's layout only
    sla: Sla = Sla()  # the tail bounds a point must keep to count

    @property
    def baseline_members(self) -> tuple[str, ...]:
        """The policies the baseline is the best of: every fixed:K for best-fixed."""
        if self.baseline == BEST_FIXED:
            return tuple(p for p in self.policies if p.startswith("fixed:"))
        return (self.baseline,)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The base settings that some policy or layout ignores or that look wrong, one line
        each (as `dsim run` says them): said before the sweep and kept in the report."""
        specs = (
            replace(self.base, policy=policy, **layout.fields)
            for policy in self.policies
            for layout in self.layouts or (Layout(()),)
        )
        return tuple(
            dict.fromkeys(
                line  # each spec's drafter cost, checked with the config
                for s in specs
                for line in spec_warnings(s, spec_grammar.draft_cost(s.draft_cost).ratio)
            )
        )

    def specs(self) -> list[tuple[str, float, RunSpec]]:
        """(policy, load, spec) for every point: policies outer, then layouts, loads
        (ascending), seeds innermost."""
        return [
            (
                policy,
                load,
                replace(
                    self.base,
                    policy=policy,
                    seed=seed,
                    **layout.fields,
                    **{self.load_axis: _axis(self, load)},
                ),
            )
            for policy in self.policies
            for layout in self.layouts or (Layout(()),)
            for load in self.loads
            for seed in self.seeds
        ]

    def layout_of(self, spec: RunSpec) -> str:
        """The label of the layout `spec` runs ("" without a [layout] table): of the layouts
        whose fields it has, the one that sets the most (a profile's bundle, not the profile
        alone)."""
        fields = spec.as_dict()
        runs = [lay for lay in self.layouts if all(fields[k] == v for k, v in lay.fields.items())]
        return max(runs, key=lambda lay: len(lay.values)).label if runs else ""


@dataclass(frozen=True)
class Layout:
    """One point of the [layout] axes: the RunSpec fields it sets, in the config's key order."""

    values: tuple[tuple[str, Any], ...]

    @property
    def fields(self) -> dict[str, Any]:
        return {k: (None if k == "disagg" and v == COLOCATED else v) for k, v in self.values}

    @property
    def label(self) -> str:
        """`disagg 2:6`, `profile NAME`, `draft NAME` (files by their stem), joined by commas."""
        return ", ".join(f"{_LABELS.get(k, k)} {_label_value(k, v)}" for k, v in self.values)


_LABELS = {"draft_cost": "draft", "drafter_kind": "kind"}


def _label_value(key: str, value: Any) -> str:
    if key == "profile" or (key == "draft_cost" and spec_grammar.draft_cost(value).profile):
        return Path(value).stem
    return str(value)


def _axis(cfg: SweepConfig, load: float) -> float | int:
    return int(load) if cfg.load_axis in INTEGER_AXES else float(load)


def load_config(path: str | Path) -> SweepConfig:
    """Parse and validate a sweep TOML, including that every input file exists and parses."""
    path = Path(path)
    if path.is_dir():
        toml = sorted(p.name for p in path.glob("*.toml"))
        hint = f" (it holds {', '.join(toml)})" if toml else ""
        raise InputError(path, None, f"is a directory: give the sweep's .toml file{hint}")
    if not path.is_file():
        raise InputError(path, None, "config file not found")
    try:
        raw = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"not valid TOML: {exc}") from None
    check = _Checker(path)
    check.keys(raw, _TOP_KEYS, "")
    description = check.typed(raw, "description", str, "") or ""
    policies = tuple(check.str_list(raw, "policies", required=True))
    if len(set(policies)) != len(policies):
        check.fail("policies", "lists a policy twice")
    baseline = check.typed(raw, "baseline", str, "") or policies[0]
    if baseline == BEST_FIXED and not any(p.startswith("fixed:") for p in policies):
        check.fail("baseline", f"{BEST_FIXED} needs at least one fixed:K among the policies")
    if baseline not in (*policies, BEST_FIXED):
        check.fail("baseline", f"{baseline!r} is not one of the policies (or {BEST_FIXED})")
    axis, loads = check.load_table(check.table(raw, "load"))
    layout_table = check.table(raw, "layout")
    base = check.run_table(check.table(raw, "run"), axis, layout_table)
    check.load_values(axis, loads, base)
    seeds = check.seeds(raw, base.seed, "seed" in check.table(raw, "run"))
    layouts = check.layouts(layout_table, axis)
    for policy in policies:
        check.wrap(
            "policies",
            lambda p=policy: check_gamma(p, parse_policy(p, base.sla_tps), base.gamma),
        )
    sla = check.table(raw, "sla")
    anchors = check.number_list(sla, "anchors", "sla.", positive=True)
    bounds = [(key, value) for key, value in sla.items() if key != "anchors"]
    for key, value in bounds:
        check.wrap(f"sla.{key}", lambda pair=(key, value): read_sla([pair]))
    for layout in layouts or (Layout(()),):  # first: its line names the bundle that fixes it
        _check_bundle(check, replace(base, **layout.fields), layout)
    _check_inputs(check, base)
    for layout in layouts:
        _check_inputs(check, replace(base, **layout.fields), "layout")
    check_window(check, base, axis, loads)
    return SweepConfig(
        path,
        description,
        base,
        policies,
        baseline,
        axis,
        tuple(loads),
        tuple(sorted(anchors)),
        seeds,
        layouts,
        read_sla(bounds),
    )


def check_window(check: _Checker, spec: RunSpec, axis: str, loads: list[float]) -> None:
    """With a window and rate scales, the highest load reads the most of the trace: check now
    that its window ends inside the trace, not mid-sweep."""
    if spec.window and axis == "rate_scale":
        _check_inputs(check, replace(spec, rate_scale=max(loads)))


# The config key an input's error is reported under, by the spec field that raised it.
_FIELD_KEYS = {"topology": "run", "policy": "policies"}


def _check_inputs(check: _Checker, spec: RunSpec, key: str | None = None) -> None:
    """Read every input the simulations will read, so a bad file fails now, not mid-sweep;
    `key` names the config key the error is reported under (default: the spec field's)."""
    try:
        resolve(spec)
    except InputError as exc:
        field = getattr(exc, "field", None) or "run"
        check.fail(key or _FIELD_KEYS.get(field, f"run.{field}"), str(exc))


def _check_bundle(check: _Checker, spec: RunSpec, layout: Layout) -> None:
    """A drafter profile priced for another target than the point's profile is refused,
    naming both files; the fix is a layout entry that bundles the profile with its drafter."""
    if "draft_cost" in layout.fields:
        key, fix = "layout.profile", "pair this profile with a drafter priced for it"
    elif "profile" in layout.fields:
        key = "layout.profile"
        fix = (f'give it its own drafter: profile = [{{ profile = "{spec.profile}", '
               'draft_cost = "DRAFTER.csv" }, ...] (dsim profile --roofline GPU --model M --tp N '
               '--draft-model D writes one), or run.draft_cost = "ratio:X"')  # fmt: skip
    else:
        key = "run.draft_cost"
        fix = "name a drafter profile priced for run.profile, or ratio:X"
    check.wrap(key, lambda: bundles.check(spec.profile, spec.draft_cost, fix))


class _Checker:
    """Type and key checks that raise InputError(config path, key: problem)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> NoReturn:
        raise InputError(self.path, None, f"{key}: {problem}")

    def wrap(self, key: str, build: Any) -> None:
        """Run a parser of the simulator; its InputError is re-raised naming the config key."""
        try:
            build()
        except InputError as exc:
            self.fail(key, str(exc))

    def keys(self, table: dict, known: set[str] | list[str], prefix: str) -> None:
        for key in table:
            if key not in known:
                self.fail(f"{prefix}{key}", f"unknown key (known: {', '.join(sorted(known))})")

    def table(self, raw: dict, key: str) -> dict:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            self.fail(key, f"expected a table [{key}], got {_kind(value)}")
        return value

    def typed(self, table: dict, key: str, kind: type, prefix: str) -> Any:
        if key not in table:
            return None
        value = table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.fail(f"{prefix}{key}", f"expected {_name(kind)}, got {_kind(value)}")
        return value

    def str_list(self, table: dict, key: str, required: bool) -> list[str]:
        value = table.get(key)
        if value is None:
            if required:
                self.fail(key, "missing (a non-empty list of policy names)")
            return []
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self.fail(key, f"expected a non-empty list of strings, got {_kind(value)}")
        return value

    def number_list(self, table: dict, key: str, prefix: str, positive: bool) -> list[float]:
        value = table.get(key, [])
        if not isinstance(value, list):
            self.fail(f"{prefix}{key}", f"expected a list of numbers, got {_kind(value)}")
        for v in value:
            if not _is_number(v):
                self.fail(f"{prefix}{key}", f"expected a list of numbers, got {_kind(v)} {v!r}")
        for v in value:
            self.wrap(
                f"{prefix}{key}", lambda v=v: check_number(v, "values", gt=0 if positive else None)
            )
        return [float(v) for v in value]

    def seeds(self, raw: dict, default: int, run_has_seed: bool) -> tuple[int, ...]:
        """The seed axis: distinct non-negative integers; run.seed alone is one seed."""
        if "seeds" not in raw:
            return (default,)
        if run_has_seed:
            self.fail("seeds", "set either seeds or run.seed, not both")
        value = raw["seeds"]
        ok = isinstance(value, list) and value
        if not ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.fail("seeds", f"expected a non-empty list of integers, got {_kind(value)}")
        if any(v < 0 for v in value) or len(set(value)) != len(value):
            self.fail("seeds", "seeds must be distinct integers >= 0")
        if max(value) > MAX_COUNTS["seed"]:
            self.fail("seeds", f"seeds must be at most {MAX_COUNTS['seed']}, got {max(value)}")
        return tuple(value)

    def run_table(self, run: dict, axis: str, layout: dict) -> RunSpec:
        """The [run] table as a RunSpec: every key must be a `dsim run` option (by its field's
        name or vLLM's) of the right type."""
        run = self.vllm_names(run)
        if axis in run:
            self.fail(f"run.{axis}", "is the load axis: set it in [load]")
        for key in layout:
            if key in run:
                self.fail(f"run.{key}", "is a layout axis: set it in [layout]")
        if "policy" in run:
            self.fail("run.policy", "set the top-level `policies` list instead")
        bench = {k: run.pop(k) for k in bench_names.OPTIONS if k in run}
        self.keys(run, _RUN_KEYS, "run.")
        values = {}
        for key in run:
            kinds = _RUN_TYPES[key]
            kind = get_args(kinds)[0] if isinstance(kinds, UnionType) else kinds
            values[key] = self.typed(run, key, kind, "run.")
        if bench:  # vllm bench serve's names: the trace spec they mean
            where = f"run.{next(iter(bench))}"
            try:
                trace, cap = bench_names.trace_spec(values.get("trace", RunSpec().trace), bench)
            except InputError as exc:
                self.fail(where, str(exc))
            values["trace"] = trace
            if cap is not None and values.get("max_requests") is None:
                values["max_requests"] = cap
        try:
            return RunSpec(**values)
        except InputError as exc:  # RunSpec checks every number: name the [run] key
            self.fail(f"run.{str(exc).split()[0]}", str(exc))

    def layouts(self, table: dict, load_axis: str) -> tuple[Layout, ...]:
        """[layout]: lists of disagg splits, replica counts and profiles, crossed in key order."""
        self.keys(table, LAYOUT_AXES, "layout.")
        if load_axis in table:
            self.fail(f"layout.{load_axis}", "is the load axis: sweep it in [load] only")
        if "disagg" in table and load_axis == "replicas":
            self.fail("layout.disagg", "replaces replicas, the load axis: sweep another load")
        if "disagg" in table and "replicas" in table:
            self.fail("layout", "set disagg or replicas, not both (disagg replaces replicas)")
        axes = []
        for key, values in table.items():
            kind = int if key == "replicas" else str
            ok = isinstance(values, list) and values
            entries = [self.bundle(v) if key == "profile" and isinstance(v, dict) else ((key, v),)
                       for v in (values if ok else [])]  # fmt: skip
            if not ok or not all(
                isinstance(v, kind) and not isinstance(v, bool) for e in entries for _, v in e
            ):
                what = "integers" if kind is int else "strings"
                also = " (or { profile, draft_cost, drafter_kind } tables)" * (key == "profile")
                self.fail(f"layout.{key}", f"expected a non-empty list of {what}{also}")
            if len(set(entries)) != len(entries):
                self.fail(f"layout.{key}", "lists a value twice")
            axes.append(entries)
        return tuple(Layout(sum(combo, ())) for combo in product(*axes)) if axes else ()

    def bundle(self, entry: dict) -> tuple[tuple[str, Any], ...]:
        """A `[layout] profile` entry's table: a profile with its own drafter cost (and the
        drafter kind that prices it), as the RunSpec fields it sets."""
        self.keys(entry, BUNDLE_KEYS, "layout.profile.")
        if "profile" not in entry:
            self.fail("layout.profile", 'a { ... } entry needs profile = "FILE"')
        return tuple((k, entry[k]) for k in BUNDLE_KEYS if k in entry)

    def vllm_names(self, run: dict) -> dict:
        """[run] with vLLM's names (`max_num_seqs`, ...) read as the fields they mean."""
        out = dict(run)
        for name, field in VLLM_NAMES.items():
            if name in run:
                if field in run:
                    self.fail(f"run.{name}", f"is run.{field} under vLLM's name: give one")
                out[field] = out.pop(name)
        return out

    def load_values(self, axis: str, loads: list[float], base: RunSpec) -> None:
        """Each load value as the spec checks it (a replicas axis as the cluster does, and not
        beside `run.disagg`), so a bad value names this key before any point runs."""
        if axis == "replicas" and base.disagg is not None:
            self.fail("load.replicas", "run.disagg sets the replicas (P:D): drop one of the two")
        for v in loads:
            value = int(v) if axis in INTEGER_AXES else v
            self.wrap(f"load.{axis}", lambda value=value: replace(base, **{axis: value}))
            if axis == "replicas":
                self.wrap("load.replicas", lambda value=value: cluster_layout(value, None))

    def load_table(self, load: dict) -> tuple[str, list[float]]:
        self.keys(load, LOAD_AXES, "load.")
        if len(load) != 1:
            self.fail("load", f"set exactly one load axis: {' or '.join(LOAD_AXES)}")
        axis = next(iter(load))
        values = self.number_list(load, axis, "load.", positive=True)
        if not values:
            self.fail(f"load.{axis}", "needs at least one value")
        if len(set(values)) != len(values):
            self.fail(f"load.{axis}", "lists a value twice")
        if axis in INTEGER_AXES and any(v != int(v) for v in values):
            self.fail(f"load.{axis}", "values must be integers")
        return axis, sorted(values)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _name(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false"}[kind]


def _kind(value: Any) -> str:
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string"}
    names |= {list: "a list", dict: "a table"}
    return names.get(type(value), type(value).__name__)

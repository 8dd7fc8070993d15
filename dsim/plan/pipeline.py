"""`dsim plan` end to end: options -> every check (the size gate included) -> profiles written
-> bisection over cached points -> plan.csv, points.csv, plan.png, report.md in OUT.

Nothing is written until every input has been read and checked: the roofline estimates are
checked from a temporary folder, then written under OUT/profiles/ (the same bytes on a rerun,
so the points keep their cache keys)."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dsim import bench_names, shipped, spec_grammar
from dsim.acceptance.sources import parse_acceptance
from dsim.errors import InputError
from dsim.fileio import check_output_dir, check_writable
from dsim.metrics import arrival_rate
from dsim.pareto.sweep import check_executor
from dsim.plan import answer, grid, report, search, space, targets
from dsim.plan.tiers import Tier
from dsim.run_inputs import load_spec_workload, reading, resolve_engine
from dsim.run_spec import RunSpec, default
from dsim.size_gate import WorkSize, check_size

OWNERS = ("plan.csv", "points")  # what marks a folder as a plan's (points: an interrupted one)


@dataclass(frozen=True)
class Options:
    """`dsim plan`'s options, parsed (commands.py reads the strings)."""

    model: str | None
    gpus: tuple[str, ...]
    tps: tuple[int, ...]
    engines: tuple[str, ...]
    profiles: tuple[str, ...]
    layouts: tuple[space.Layout, ...]
    policies: tuple[tuple[str, int], ...]
    max_seqs: tuple[int, ...]
    token_budgets: tuple[int | None, ...]  # (None,): each engine's own
    tiers: tuple[Tier, ...]
    budget: int
    trace: str
    closed: bool
    rate: float | None  # the target rate, req/s
    acceptance: str
    draft_cost: str | None  # None: not given (each target's drafter estimate, or the default)
    draft_model: str | None  # the drafter estimated beside each target (--draft-model)
    seeds: int
    requests: int
    step: float
    draft_path: str | None


@dataclass(frozen=True)
class Plan:
    options: Options
    base: RunSpec  # what every point shares: traffic and acceptance
    traffic: grid.Traffic
    estimates: tuple[targets.Estimate, ...]
    configs: tuple[space.Config, ...]
    grids: tuple[tuple[float, ...], ...]  # per configuration
    notes: tuple[str, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.options.seeds))

    def spec_of(self, config: space.Config, load: float, seed: int) -> RunSpec:
        """The run of `config` at `load` (req/s open loop, clients closed loop) and `seed`."""
        spec = replace(config.spec(self.base), seed=seed)
        if self.traffic.closed:
            return replace(spec, trace=_closed_trace(self.options, int(load)))
        return replace(spec, rate_scale=load / self.traffic.base_rate)


def _closed_trace(o: Options, clients: int) -> str:
    given = {"num_prompts": o.requests, "max_concurrency": clients}
    return bench_names.trace_spec(o.trace, given)[0]


def _plan_keys(o: Options) -> None:
    """The plan always sets its trace's request count (from --requests, which has a default)
    and, closed loop, its clients (the load it searches): a synthetic trace setting one too is
    refused naming the plan's option, not the benchmark options `bench_names` would name."""
    if not spec_grammar.is_synthetic(o.trace):
        return
    given = spec_grammar.key_values(spec_grammar.name_arg(o.trace)[1], f"trace spec {o.trace!r}")
    where = f"--trace {o.trace!r}"
    if "n" in given:
        raise InputError(None, None, f"{where} sets n=, which --requests sets: drop n= and "
                         f"give --requests {given['n']}")  # fmt: skip
    if o.closed and "concurrency" in given:
        raise InputError(None, None, f"{where} sets concurrency=, the clients --closed-loop "
                         "searches as the load: drop concurrency=")  # fmt: skip


def _traffic(o: Options) -> tuple[RunSpec, grid.Traffic, list[str]]:
    """The shared spec and the trace read once: its mean lengths and rate at scale 1."""
    _plan_keys(o)
    if o.closed:
        base = RunSpec(trace=o.trace, acceptance=o.acceptance)
        workload = load_spec_workload(replace(base, trace=_closed_trace(o, 1)))
    else:
        trace, cap = bench_names.trace_spec(o.trace, {"num_prompts": o.requests})
        base = RunSpec(trace=trace, max_requests=cap, acceptance=o.acceptance)
        workload = load_spec_workload(base)
        if workload.concurrency is not None:
            raise InputError(None, None, f"--trace {o.trace!r} has a closed-loop client "
                             "(concurrency=): drop it and pass --closed-loop")  # fmt: skip
    rate = arrival_rate(workload.arrival_s)
    if not o.closed and not rate > 0:
        raise InputError(None, None, f"--trace {o.trace!r}: its arrivals span 0 s, so it has "
                         "no rate to scale (give a rate, or --closed-loop)")  # fmt: skip
    notes = []
    if len(workload) < o.requests:
        notes.append(f"the trace has {len(workload):,} requests, fewer than --requests "
                     f"{o.requests:,}: each point runs them all")  # fmt: skip
    means = (float(np.mean(workload.prompt_tokens)), float(np.mean(workload.output_tokens)))
    return base, grid.Traffic(o.closed, *means, math.nan if o.closed else rate), notes


def _targets(
    o: Options, out: Path
) -> tuple[list[targets.Target], list[targets.Estimate], list[str]]:
    """The targets as the plan's specs name them (estimates under OUT/profiles/), each with
    its drafter cost, the estimates still to write, and the --tp values left out."""
    if o.draft_model is not None and o.draft_cost is not None:
        raise InputError(None, None, "give --draft-model (a drafter estimate per target) or "
                         "--draft-cost, not both")  # fmt: skip
    cost = o.draft_cost or default("draft_cost")
    if o.profiles:
        if o.draft_model is not None:
            raise InputError(None, None, "--draft-model estimates a drafter beside each --model "
                             "estimate; with --profile give --draft-cost (a drafter profile "
                             "priced for every profile, or ratio:X)")  # fmt: skip
        found = [targets.given(shipped.locate(p)) for p in o.profiles]
        fix = ("give a drafter profile priced for each --profile (dsim profile --roofline GPU "
               "--model M --tp N --draft-model D), or --draft-cost ratio:X")  # fmt: skip
        return [t.with_draft_cost(cost, fix) for t in found], [], []
    if o.model is None:
        raise InputError(None, None, "give --model and --gpu (estimated here) or --profile FILE")
    built, notes = targets.estimates(o.gpus, o.model, o.tps, o.engines, o.draft_model)
    if o.draft_model is None:
        fix = "give --draft-model NAME (a drafter estimate per target) or --draft-cost ratio:X"
        built = [e.with_draft_cost(cost, fix) for e in built]
    return [e.named_in(out / "profiles") for e in built], built, notes


def _size(o: Options, configs: list[space.Config], requests: int, jobs: int) -> WorkSize:
    """At most this many points: a bisection per tier over each configuration's grid."""
    points = 0
    for c in configs:
        size = c.max_seqs * c.layout.split[1] if o.closed else len(grid.loads(1.0, False, o.step))
        points += search.most_probes(size, len(o.tiers)) * o.seeds
    return WorkSize("this plan (at most)", points, points * requests, jobs)


def _grids(
    plan_configs: list[space.Config],
    base: RunSpec,
    traffic: grid.Traffic,
    o: Options,
    built: list[targets.Estimate],
) -> list[tuple[float, ...]]:
    """Each configuration read as its runs will read it (a bad policy, K or drafter cost is
    one line now), and its load grid from its bracket; estimates read from a scratch copy."""
    with tempfile.TemporaryDirectory(prefix="dsim-plan-") as tmp:
        scratch = {e.profile.name: e.write(Path(tmp)) for e in built}
        grids = []
        for c in plan_configs:
            target = scratch.get(Path(c.target.profile).name, c.target)
            engine = resolve_engine(replace(c, target=target).spec(base))
            if traffic.closed:
                top = float(c.max_seqs * c.layout.split[1])
            else:
                top = grid.rate_bound(c, engine, traffic)
            grids.append(grid.loads(top, traffic.closed, o.step))
        for gamma in sorted({c.gamma for c in plan_configs}):
            with reading("acceptance"):
                parse_acceptance(o.acceptance, gamma, None)
    return grids


def prepare(o: Options, out: Path, executor: str, jobs: int, yes: bool) -> Plan:
    """Every check that can fail on input, before anything is simulated or written."""
    check_executor(executor, jobs)
    check_output_dir(out, OWNERS)
    base, traffic, notes = _traffic(o)
    found, built, skipped = _targets(o, out)
    configs = space.configs(found, o.layouts, o.policies, o.max_seqs, o.token_budgets, o.budget)
    left = len(found) * len(o.layouts) * len(o.policies) * len(o.max_seqs) * len(o.token_budgets)
    if left > len(configs):
        n = left - len(configs)
        notes.append(f"{n} configuration{'s' * (n != 1)} above the budget of {o.budget} "
                     f"GPU{'s' * (o.budget != 1)} left out")  # fmt: skip
    check_size(_size(o, configs, o.requests, jobs), yes)
    grids = _grids(configs, base, traffic, o, built)
    return Plan(o, base, traffic, tuple(built), tuple(configs), tuple(grids),
                tuple(skipped + notes))  # fmt: skip


def run_plan(
    plan: Plan,
    out: Path,
    executor: str = "local",
    jobs: int = 2,
    address: str | None = None,
    progress: Callable[[int], None] | None = None,
):
    """Write the profiles, search, and write the outputs; returns plan.csv's table."""
    check_writable(out)
    (out / "points").mkdir(parents=True, exist_ok=True)  # marks the folder a plan's first
    for e in plan.estimates:
        e.write(out / "profiles")
    curves = [search.Curve(c, g) for c, g in zip(plan.configs, plan.grids, strict=True)]
    o = plan.options
    ran = search.search(curves, o.tiers, plan.seeds, plan.spec_of, out, executor, jobs, address,
                        progress)  # fmt: skip
    closed = plan.traffic.closed
    answers = [answer.answer(c, t, o.seeds, closed) for t in o.tiers for c in curves]
    table = answer.table(answers, o.rate, o.budget)
    about = _about(plan, ran)
    text = report.render(table, o.tiers, curves, about)
    report.write_outputs(out, table, report.points_table(curves, o.tiers), text, about)
    return table


def _drafters(plan: Plan) -> str:
    """The drafter cost each target is run with: one for all, or each its own."""
    costs = {c.target.label: c.target.draft_cost for c in plan.configs}
    if len(set(costs.values())) == 1:
        return next(iter(costs.values()))
    return "per target: " + ", ".join(f"{t} {Path(cost).name}" for t, cost in costs.items())


def _about(plan: Plan, ran: int) -> report.About:
    o = plan.options
    if plan.traffic.closed:
        traffic = f"{o.trace}, closed loop: the load is the number of clients"
        unit = "clients"
    else:
        traffic = (f"{o.trace}, open loop at {plan.traffic.base_rate:.4g} req/s scaled: the "
                   "load is the offered rate")  # fmt: skip
        unit = "req/s"
    targets_ = sorted({c.target.label for c in plan.configs})
    lines = (
        f"{len(plan.configs)} configuration{'s' * (len(plan.configs) != 1)}: "
        f"{', '.join(targets_)}; layouts "
        f"{', '.join(lay.label for lay in o.layouts)}; policies "
        f"{', '.join(f'{p} K{k}' for p, k in o.policies)}; max_num_seqs "
        f"{', '.join(map(str, o.max_seqs))}; step token budgets "
        f"{', '.join('the engine' if b is None else str(b) for b in o.token_budgets)}",
        f"acceptance {o.acceptance}; drafter cost {_drafters(plan)}",
        f"{o.requests:,} requests a point, {o.seeds} seed{'s' * (o.seeds != 1)}, load grid "
        f"steps of at most {o.step:.0%}; {ran:,} points run or read from the cache",
        f"GPU budget {o.budget}" + (f"; target {o.rate:g} req/s" if o.rate else ""),
        *plan.notes,
    )
    model = o.model or ", ".join(sorted({c.target.model for c in plan.configs}))
    return report.About(f"dsim plan: {model}", traffic, lines, o.acceptance, o.draft_path,
                        o.rate, o.budget, unit)  # fmt: skip

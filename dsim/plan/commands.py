"""`dsim plan`: the fewest GPUs and the best configuration per SLA tier (docs/plan.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dsim import shipped, spec_grammar
from dsim.errors import InputError
from dsim.hardware.engines import DEFAULT_ENGINE
from dsim.plan import answer, grid, space, tiers
from dsim.plan.pipeline import Options, prepare, run_plan
from dsim.policies.commands import PLUGIN_TIMEOUT
from dsim.policies.plugin import set_call_limit
from dsim.report import console, progress_bar, warn
from dsim.run_spec import DEFAULT_ACCEPTANCE, DEFAULT_TRACE, default
from dsim.size_gate import YES

SEARCH, TRAFFIC, RUNS = "Search space", "Traffic and SLA", "Runs"


def _opt(value: Any, help: str, panel: str, *names: str):
    return typer.Option(value, *names, help=help, rich_help_panel=panel)


OUT = typer.Option(..., help="Output folder; re-running resumes from it.")
BUDGET = _opt(..., "GPUs the plan may use.", SEARCH)
TIER = _opt([], f"A named SLA tier, repeatable: {tiers.USAGE}.", TRAFFIC, "--tier")
MODEL = _opt(None, "Model to estimate (dsim profile --roofline's names).", SEARCH)
GPU = _opt("h200", "GPU types, comma list.", SEARCH)
TP = _opt("1", "TP degrees, comma list.", SEARCH)
ENGINE = _opt(DEFAULT_ENGINE, "Engines, comma list (vllm, sglang, trtllm, ...).", SEARCH)
PROFILE = _opt([], "An estimate profile instead of --model (repeatable).", SEARCH, "--profile")
REPLICAS = _opt("1", "Colocated replica counts, comma list.", SEARCH)
DISAGG = _opt("", "P:D prefill/decode splits, comma list.", SEARCH)
POLICIES = _opt(
    "fixed,dspark",
    "Policies, comma list: fixed (fixed:K at every --gamma), fixed:K, ar, mtp1, dspark, "
    "goodput, ... (each adaptive one at every --gamma).",
    SEARCH,
)
GAMMA = _opt("3,5", "K values, comma list.", SEARCH)
MAX_NUM_SEQS = _opt(str(default("max_seqs")), "max_num_seqs values, comma list.", SEARCH)
BATCHED_TOKENS = _opt(
    "", "Step token budgets (max_num_batched_tokens), comma list (default: the engine's).", SEARCH
)
TRACE = _opt(DEFAULT_TRACE, "Arrival trace or synthetic:... (its lengths and pattern).", TRAFFIC)
RATE = _opt(None, "Target rate (req/s): the fewest GPUs that serve it.", TRAFFIC)
CLOSED_LOOP = _opt(
    False, "Load is the number of closed-loop clients, not the arrival rate.", TRAFFIC
)
ACCEPTANCE = _opt(DEFAULT_ACCEPTANCE, "Acceptance spec (as dsim run).", TRAFFIC)
DRAFT_COST = _opt(
    None,
    f"Drafter pass cost (as dsim run; default {default('draft_cost')}): a drafter profile must "
    "be priced for every target (its sidecar's model, GPU and TP).",
    TRAFFIC,
)
DRAFT_MODEL = _opt(
    None,
    "Drafter to estimate beside each target (eagle, eagle3, mtp, dspark): each target's runs "
    "price their drafter with its own estimate (not with --profile).",
    TRAFFIC,
)
DRAFT_PATH = _opt(None, "Drafter weights for the launch command.", TRAFFIC)
SEEDS = _opt(3, "Seeds per point.", RUNS)
REQUESTS = _opt(2000, "Requests per point.", RUNS)
STEP = _opt(grid.STEP, "Largest relative step of the load grid.", RUNS)
EXECUTOR = _opt("local", "local | ray.", RUNS)
ADDRESS = _opt(None, "Ray address.", RUNS)
JOBS = _opt(2, "Worker processes.", RUNS)


def _count(value: int, name: str, **bounds: float) -> int:
    return int(spec_grammar.number(str(value), name, integer=True, **bounds))


def _listed(text: str, option: str) -> tuple[str, ...]:
    """A comma list's items; none (`''`, `,`) is one line naming the option."""
    found = spec_grammar.items(text)
    if not found:
        raise InputError(None, None, f"{option} {text!r} lists nothing; give at least one value")
    return found


def _names(text: str, option: str, lower: bool = False) -> tuple[str, ...]:
    """A list of names, each once (`lower`: case-blind names, such as GPUs, read lowercase)."""
    found = _listed(text, option)
    return space.distinct(tuple(map(str.lower, found)) if lower else found, option)


def _ints(text: str, option: str) -> tuple[int, ...]:
    """A list of whole numbers >= 1, each once."""
    _listed(text, option)
    return space.distinct(spec_grammar.ints(text, option), option)


def _splits(text: str) -> tuple[str, ...]:
    """`--disagg 1:1,1:3` as P:D (`1 : 3` is `1:3`), each once; none given: ()."""
    if not text:
        return ()
    pairs = (spec_grammar.pair(x, "--disagg") for x in _listed(text, "--disagg"))
    return space.distinct(tuple(f"{p}:{d}" for p, d in pairs), "--disagg")


def _budgets(text: str) -> tuple[int | None, ...]:
    """`--max-num-batched-tokens 8192,16384`; none given: each engine's own (None)."""
    return _ints(text, "--max-num-batched-tokens") if text else (None,)


def _same_file(profile: str) -> str:
    """A profile by the file it names (`p.csv` and `./p.csv` are one profile given twice)."""
    return str(Path(shipped.locate(profile)).resolve())


def options(v: dict[str, Any]) -> Options:
    """The command's strings read once into the plan's options: every list option lists at
    least one value (`--disagg` and `--max-num-batched-tokens` may be left out), each once."""
    return Options(
        model=v["model"],
        gpus=_names(v["gpu"], "--gpu", lower=True),
        tps=_ints(v["tp"], "--tp"),
        engines=_names(v["engine"], "--engine", lower=True),
        profiles=space.distinct(tuple(v["profile"]), "--profile", _same_file),
        layouts=space.layouts(_ints(v["replicas"], "--replicas"), _splits(v["disagg"])),
        policies=space.policy_runs(
            _names(v["policies"], "--policies"), _ints(v["gamma"], "--gamma")
        ),
        max_seqs=_ints(v["max_num_seqs"], "--max-num-seqs"),
        token_budgets=_budgets(v["max_num_batched_tokens"]),
        tiers=space.distinct(tiers.parse_tiers(v["tier"]), "--tier", lambda t: t.name),
        budget=_count(v["budget"], "--budget", ge=1),
        trace=v["trace"],
        closed=v["closed_loop"],
        rate=None if v["rate"] is None else spec_grammar.number(str(v["rate"]), "--rate", gt=0),
        acceptance=v["acceptance"],
        draft_cost=v["draft_cost"],
        draft_model=v["draft_model"],
        seeds=_count(v["seeds"], "--seeds", ge=1, le=64),
        requests=_count(v["requests"], "--requests", ge=1),
        step=v["step"],
        draft_path=v["draft_model_path"],
    )


def plan(
    out: Path = OUT,
    budget: int = BUDGET,
    tier: list[str] = TIER,
    model: str | None = MODEL,
    gpu: str = GPU,
    tp: str = TP,
    engine: str = ENGINE,
    profile: list[str] = PROFILE,
    replicas: str = REPLICAS,
    disagg: str = DISAGG,
    policies: str = POLICIES,
    gamma: str = GAMMA,
    max_num_seqs: str = MAX_NUM_SEQS,
    max_num_batched_tokens: str = BATCHED_TOKENS,
    trace: str = TRACE,
    rate: float | None = RATE,
    closed_loop: bool = CLOSED_LOOP,
    acceptance: str = ACCEPTANCE,
    draft_cost: str | None = DRAFT_COST,
    draft_model: str | None = DRAFT_MODEL,
    draft_model_path: str | None = DRAFT_PATH,
    seeds: int = SEEDS,
    requests: int = REQUESTS,
    step: float = STEP,
    executor: str = EXECUTOR,
    address: str | None = ADDRESS,
    jobs: int = JOBS,
    progress: bool = typer.Option(True, help="Show a progress bar."),
    plugin_timeout: float = PLUGIN_TIMEOUT,
    yes: bool = YES,
) -> None:
    """Search layouts, TP, engines, policies, K and max_num_seqs for the best configuration per
    SLA tier and the fewest GPUs for a rate; write plan.csv, plan.png, report.md."""
    set_call_limit(plugin_timeout)
    built = prepare(options(locals()), out, executor, jobs, yes)
    for line in built.notes:
        warn(line)
    with progress_bar("plan points", total=None, enabled=progress) as bar:
        table = run_plan(built, out, executor, jobs, address, bar)
    for name, rows in table.groupby("tier", sort=False):
        why = answer.unmet(rows, built.options.rate, built.options.budget)
        if why is not None:
            warn(f"tier {name}: {why} (report.md names the closest)")
    n = len(built.configs)
    console.print(f"{n} configuration{'s' * (n != 1)} -> {out / 'report.md'}")


def register(app: typer.Typer) -> None:
    """Add `dsim plan`."""
    app.command("plan")(plan)

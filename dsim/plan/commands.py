"""`dsim plan`: the fewest GPUs and the best configuration per SLA tier (docs/plan.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim import spec_grammar
from dsim.hardware.engines import DEFAULT_ENGINE
from dsim.plan import grid, space, tiers
from dsim.plan.pipeline import Options, prepare, run_plan
from dsim.policies.commands import PLUGIN_TIMEOUT
from dsim.policies.plugin import set_call_limit
from dsim.report import console, progress_bar, warn
from dsim.run_spec import DEFAULT_ACCEPTANCE, DEFAULT_TRACE, default
from dsim.size_gate import YES

SEARCH, TRAFFIC, RUNS = "Search space", "Traffic and SLA", "Runs"


def _names(text: str) -> tuple[str, ...]:
    return spec_grammar.items(text)


def register(app: typer.Typer) -> None:
    """Add `dsim plan`."""

    @app.command("plan")
    def plan(
        out: Path = typer.Option(..., help="Output folder; re-running resumes from it."),
        budget: int = typer.Option(..., help="GPUs the plan may use.", rich_help_panel=SEARCH),
        tier: list[str] = typer.Option(
            [],
            "--tier",
            help=f"A named SLA tier, repeatable: {tiers.USAGE}.",
            rich_help_panel=TRAFFIC,
        ),
        model: str | None = typer.Option(
            None,
            help="Model to estimate (dsim profile --roofline's names).",
            rich_help_panel=SEARCH,
        ),
        gpu: str = typer.Option("h200", help="GPU types, comma list.", rich_help_panel=SEARCH),
        tp: str = typer.Option("1", help="TP degrees, comma list.", rich_help_panel=SEARCH),
        engine: str = typer.Option(
            DEFAULT_ENGINE,
            help="Engines, comma list (vllm, sglang, trtllm, ...).",
            rich_help_panel=SEARCH,
        ),
        profile: list[str] = typer.Option(
            [],
            "--profile",
            help="An estimate profile instead of --model (repeatable).",
            rich_help_panel=SEARCH,
        ),
        replicas: str = typer.Option(
            "1", help="Colocated replica counts, comma list.", rich_help_panel=SEARCH
        ),
        disagg: str = typer.Option(
            "", help="P:D prefill/decode splits, comma list.", rich_help_panel=SEARCH
        ),
        policies: str = typer.Option(
            "fixed,dspark",
            help="Policies, comma list: fixed (fixed:K at every --gamma), fixed:K, ar, mtp1, "
            "dspark, goodput, ... (each adaptive one at every --gamma).",
            rich_help_panel=SEARCH,
        ),
        gamma: str = typer.Option("3,5", help="K values, comma list.", rich_help_panel=SEARCH),
        max_num_seqs: str = typer.Option(
            str(default("max_seqs")),
            help="max_num_seqs values, comma list.",
            rich_help_panel=SEARCH,
        ),
        trace: str = typer.Option(
            DEFAULT_TRACE,
            help="Arrival trace or synthetic:... (its lengths and pattern).",
            rich_help_panel=TRAFFIC,
        ),
        rate: float | None = typer.Option(
            None,
            help="Target rate (req/s): the fewest GPUs that serve it.",
            rich_help_panel=TRAFFIC,
        ),
        closed_loop: bool = typer.Option(
            False,
            help="Load is the number of closed-loop clients, not the arrival rate.",
            rich_help_panel=TRAFFIC,
        ),
        acceptance: str = typer.Option(
            DEFAULT_ACCEPTANCE, rich_help_panel=TRAFFIC, help="Acceptance spec (as dsim run)."
        ),
        draft_cost: str = typer.Option(
            default("draft_cost"), rich_help_panel=TRAFFIC, help="Drafter pass cost (as dsim run)."
        ),
        draft_model_path: str | None = typer.Option(
            None, help="Drafter weights for the launch command.", rich_help_panel=TRAFFIC
        ),
        seeds: int = typer.Option(3, help="Seeds per point.", rich_help_panel=RUNS),
        requests: int = typer.Option(2000, help="Requests per point.", rich_help_panel=RUNS),
        step: float = typer.Option(
            grid.STEP, help="Largest relative step of the load grid.", rich_help_panel=RUNS
        ),
        executor: str = typer.Option("local", help="local | ray.", rich_help_panel=RUNS),
        address: str | None = typer.Option(None, help="Ray address.", rich_help_panel=RUNS),
        jobs: int = typer.Option(2, help="Worker processes.", rich_help_panel=RUNS),
        progress: bool = typer.Option(True, help="Show a progress bar."),
        plugin_timeout: float = PLUGIN_TIMEOUT,
        yes: bool = YES,
    ) -> None:
        """Search layouts, TP, engines, policies, K and max_num_seqs for the best configuration
        per SLA tier and the fewest GPUs for a rate; write plan.csv, plan.png, report.md."""
        set_call_limit(plugin_timeout)
        ks = spec_grammar.ints(gamma, "--gamma")
        options = Options(
            model=model,
            gpus=_names(gpu),
            tps=spec_grammar.ints(tp, "--tp"),
            engines=_names(engine),
            profiles=tuple(profile),
            layouts=space.layouts(spec_grammar.ints(replicas, "--replicas"), _names(disagg)),
            policies=space.policy_runs(_names(policies), ks),
            max_seqs=spec_grammar.ints(max_num_seqs, "--max-num-seqs"),
            tiers=tiers.parse_tiers(tier),
            budget=int(spec_grammar.number(str(budget), "--budget", integer=True, ge=1)),
            trace=trace,
            closed=closed_loop,
            rate=None if rate is None else spec_grammar.number(str(rate), "--rate", gt=0),
            acceptance=acceptance,
            draft_cost=draft_cost,
            seeds=int(spec_grammar.number(str(seeds), "--seeds", integer=True, ge=1, le=64)),
            requests=int(spec_grammar.number(str(requests), "--requests", integer=True, ge=1)),
            step=step,
            draft_path=draft_model_path,
        )
        built = prepare(options, out, executor, jobs, yes)
        for line in built.notes:
            warn(line)
        with progress_bar("plan points", total=None, enabled=progress) as bar:
            table = run_plan(built, out, executor, jobs, address, bar)
        met = table.groupby("tier", sort=False)["met"].any()
        for name, ok in met.items():
            if not ok:
                warn(f"tier {name}: no configuration meets it (report.md names the closest)")
        console.print(f"{len(built.configs)} configurations -> {out / 'report.md'}")

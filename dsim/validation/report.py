"""report.md: `dsim validate`'s figures (`dsim.validation.figures`) as one markdown page."""

from __future__ import annotations

import pandas as pd

from dsim.report import markdown_table
from dsim.validation.figures import BASELINE, LABELS, METRICS, SIM_KINDS

FIXES = {
    "passes": "re-measure the profile through real mode's own step, closer in time to the "
    "runs, or model what it misses (sequences, context)",
    "engine_overhead": "fit the engine's own time per step on bursts closer to the runs' batch "
    "sizes, or per step rather than per run (the calibration's a + b R + c V)",
    "acceptance": "replay acceptance from more trace rows (the trace half is small) or "
    "condition it on the prompt",
    "queueing": "more requests per run and repeats (queueing at small n is noisy), or fix the "
    "components above, which queueing amplifies",
}


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _num(x: float) -> str:
    return f"{x:.4g}"


def _loads(x: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in x)


def report_markdown(
    meta: dict,
    plan: dict,
    runs: list[dict],
    results: dict,
    comp: dict,
    attr: pd.DataFrame,
    drift: dict,
) -> str:
    """report.md: the machine and its drift, the loads and rates, every run's date and load
    average, the results table, the ranking and ratios, the targets met/missed and the
    attribution."""
    lines = ["# dsim validate report", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += _drift(drift) + _plan(plan, runs) + _runs(runs)
    for load in comp:
        lines += _load(load, results, comp[load])
    return "\n".join(lines + _attribution(attr, comp))


def _drift(drift: dict) -> list[str]:
    change, tol = drift["change"], drift["tolerance"]
    verdict = (
        f"within the {tol:.0%} tolerance"
        if abs(change) <= tol
        else f"**beyond** the {tol:.0%} tolerance: this run's wall-clock comparison is not "
        "evidence either way"
    )
    return [
        "",
        f"Machine drift: the same bursts re-served after the last run took {_pct(change)} "
        f"time in the model passes (pass factor {drift['pass_factor_start']:.4f} at the start, "
        f"{drift['pass_factor_end']:.4f} at the end): {verdict}.",
    ]


def _plan(plan: dict, runs: list[dict]) -> list[str]:
    rows = []
    for name, p in plan.items():
        real_busy = [r["real_busy"] for r in runs if r["load"] == name and r["policy"] == BASELINE]
        rows.append(
            [
                name,
                f"{p['busy_target']:.3f}",
                _num(p["rate"]),
                f"{p['sim_busy']:.3f}",
                ", ".join(f"{b:.3f}" for b in real_busy) or "-",
            ]
        )
    header = ["load", "target busy", "rate (req/s)", "sim mtp1 busy", "real mtp1 busy (runs)"]
    title = "## Loads (rate rule: simulated mtp1 busy fraction, bisection on the rate)"
    return ["", title, "", markdown_table(header, rows)]


def _runs(runs: list[dict]) -> list[str]:
    rows = [
        [
            r["load"],
            str(r["seed"]),
            r["policy"],
            r["start_utc"],
            f"{r['wall_s']:.0f}",
            _loads(r["load_average_before"]),
            _loads(r["load_average_after"]),
            f"{r['real_busy']:.3f}",
        ]
        for r in runs
    ]
    header = ["load", "seed", "policy", "start (UTC)", "wall s", "loadavg before", "after", "busy"]
    return ["", "## Runs", "", markdown_table(header, rows), ""]


def _load(load: str, results: dict, c: dict) -> list[str]:
    """One load: real vs simulated metrics, the ranking, the ratios and the targets."""
    lines = [f"## {load}: real vs simulated (mean ± sd over repeats)", ""]
    lines += [markdown_table(_RESULTS_HEADER, _results(load, results)), ""]
    lines += [
        f"Ranking by TPOT p50: real {' < '.join(c['real']['ranking'])}; "
        f"trace sim {' < '.join(c['sim']['ranking'])}.",
        "",
    ]
    if "ratios" in c["real"]:
        rows = [
            [p, f"{c['real']['ratios'][p]:.3f}", f"{c['sim']['ratios'][p]:.3f}", _pct(e)]
            for p, e in c["ratio_errors"].items()
        ]
        lines += [markdown_table(["TPOT p50 / mtp1", "real", "sim", "error"], rows), ""]
    lines += ["Targets (trace-driven simulation):", ""]
    lines += [f"- {name}: **{'met' if met else 'missed'}**" for name, met in c["targets"].items()]
    return [*lines, ""]


_RESULTS_HEADER = ["policy", "metric", "real", "trace sim", "error", "preset sim", "error"]


def _results(load: str, results: dict) -> list[list[str]]:
    """A row per policy and metric with runs at `load`: real, then each simulation and its
    error."""
    rows = []
    for policy, kinds in results.items():
        for metric in METRICS:
            cells = [policy, LABELS[metric]]
            for kind in SIM_KINDS:
                v = kinds[kind][metric]["loads"].get(load)
                if v is None:
                    break
                if kind == SIM_KINDS[0]:
                    cells.append(f"{_num(v['real'])} ± {_num(v['real_sd'])}")
                cells += [f"{_num(v['sim'])} ± {_num(v['sim_sd'])}", _pct(v["error"])]
            else:
                rows.append(cells)
    return rows


def _attribution(attr: pd.DataFrame, comp: dict) -> list[str]:
    """The attribution table and, if a target was missed, its largest component's fix."""
    lines = ["## Error attribution of the trace simulation's TPOT p50 (means over repeats)", ""]
    rows = [
        [
            a.load,
            a.policy,
            _pct(a.tpot_error),
            _pct(a.passes),
            _pct(a.engine_overhead),
            f"{a.overhead_ms_per_step:.2f}",
            f"{a.charged_ms_per_step:.2f}",
            _pct(a.acceptance),
            _pct(a.queueing),
        ]
        for a in attr.itertuples()
    ]
    header = ["load", "policy", "TPOT error", "step model: passes", "overhead"]
    header += ["overhead ms/step real", "charged", "acceptance", "queueing"]
    lines += [markdown_table(header, rows), ""]
    missed = [(ld, n) for ld, c in comp.items() for n, met in c["targets"].items() if not met]
    if missed:
        parts = ["passes", "engine_overhead", "acceptance", "queueing"]
        share = attr[parts].abs().mean()
        worst = str(share.idxmax())
        lines += [
            f"Missed: {', '.join(f'{n} ({ld})' for ld, n in missed)}. The largest component "
            f"(mean |factor| over loads and policies) is {worst} ({100 * share[worst]:.1f}%); "
            f"the fix that would close it: {FIXES[worst]}.",
            "",
        ]
    return lines

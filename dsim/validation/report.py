"""report.md: `dsim validate`'s figures (`dsim.validation.figures`) as one markdown page."""

from __future__ import annotations

import math

import pandas as pd

from dsim.report import markdown_table
from dsim.validation.figures import BASELINE, LABELS, METRICS, RANKING_ALPHA, SIM_KINDS
from dsim.validation.reference import WINDOW

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
    """The verdict, then every run of every attempt at a triple: its median pass factor, its
    reference passes, their unfollowed drift (the verdict's) and their drift from the first
    third to the last, on both clocks, and the trace's gap to the passes' mean."""
    tol, records = drift["tolerance"], drift["triples"]
    low, high = drift["pass_factor_range"]
    bad = [f"{r['load']} seed {r['seed']}" for r in records if r["kept"] and not r["within"]]
    verdict = (
        f"every triple within the {tol:.0%} tolerance"
        if drift["valid"]
        else f"**beyond** the {tol:.0%} tolerance, re-run once or kept within the time budget "
        f"({', '.join(bad)}): this run's wall-clock comparison is not evidence either way"
    )
    reruns = drift["reruns"]
    lines = [
        "",
        f"Machine drift, measured inside every run: {verdict}; {reruns} triple"
        f"{'' if reruns == 1 else 's'} re-run. The runs' pass factors ranged "
        f"{low:.4f}-{high:.4f} over the study ({_pct(high / low - 1)}; medians per run).",
        "",
        "## Drift per run (reference passes timed inside it)",
        "",
    ]
    rows = [
        [
            r["load"],
            str(r["seed"]),
            str(r["attempt"]),
            run["policy"],
            f"{run['pass_factor']:.4f}",
            str(run["reference"]["passes"]),
            f"{run['reference']['median_wall_ms']:.2f}",
            f"{run['reference']['unfollowed']:.1%}",
            f"{run['reference']['cpu_unfollowed']:.1%}",
            _pct(run["reference"]["drift"]),
            _pct(run["reference"]["cpu_drift"]),
            f"{run['reference']['median_wall_ms'] / run['reference']['median_cpu_ms']:.3f}",
            _pct(run["reference"]["trace_gap"]),
            ("kept" if r["kept"] else "re-run") + ("" if r["within"] else ", drifted"),
        ]
        for r in records
        for run in r["runs"]
    ]
    header = ["load", "seed", "attempt", "policy", "median k", "reference passes", "median ms"]
    header += ["unfollowed", "unfollowed (CPU)", "drift", "drift (CPU)", "wall/CPU", "trace gap"]
    header += ["triple"]
    note = (
        "Each step of a run's simulations lasts the engine-calibrated profile's price times "
        "the run's speed trace at its start: the median of the "
        f"{WINDOW} reference passes centred on the nearest one over the calibration's median "
        "reference pass (median k: the calibration's k times the run's median over the "
        f"calibration's). Unfollowed: the mean |pass / median of its {WINDOW - 1} neighbours "
        "- 1|, what the trace cannot follow; a triple with a run beyond the tolerance is "
        "re-run once if the projected total with the re-run fits the time budget. Drift: the "
        "median pass of the run's last third over its first third, minus 1 (what one factor "
        "per run could not follow; reported, not judged). Trace gap: the trace's mean over the "
        "passes' mean, minus 1 (reported, not judged): near 0 when the passes jitter evenly "
        "about the core's speed, negative when some are slowed now and then, which the run's "
        "steps pay and a median leaves out. The "
        "reference passes are timed on two clocks: wall time, which prices and judges (it sees "
        "everything, other processes' preemption included), and the thread's CPU time, which "
        "leaves out preemption and waits but sees a slower core (frequency, shared cache and "
        "memory pressure). Wall/CPU near 1: the passes had a core of their own; a drift on the "
        "wall clock alone: the machine got busier."
    )
    return [*lines, markdown_table(header, rows), "", note]


def _plan(plan: dict, runs: list[dict]) -> list[str]:
    rows = []
    for name, p in plan.items():
        real_busy = [r["real_busy"] for r in runs if r["load"] == name and r["policy"] == BASELINE]
        walls = [r["wall_s"] for r in runs if r["load"] == name]
        rows.append(
            [
                name,
                f"{p['busy_target']:.3f}",
                _num(p["rate"]),
                f"{p['sim_busy']:.3f}",
                ", ".join(f"{b:.3f}" for b in real_busy) or "-",
                f"{p['run_busy_s']:.1f}",
                f"{sum(walls) / len(walls):.1f}" if walls else "-",
            ]
        )
    header = [
        "load", "target busy", "rate (req/s)", "sim mtp1 busy", "real mtp1 busy (runs)",
        "sim busy s a run (the projection's weight)", "real s a run (mean wall)",
    ]  # fmt: skip
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
            f"{r['passes_wall_s'] / r['passes_cpu_s']:.3f}",
        ]
        for r in runs
    ]
    header = ["load", "seed", "policy", "start (UTC)", "wall s", "loadavg before", "after", "busy"]
    header += ["passes wall/CPU"]
    return ["", "## Runs", "", markdown_table(header, rows), ""]


def _load(load: str, results: dict, c: dict) -> list[str]:
    """One load: real vs simulated metrics, the ranking, the ratios and the targets."""
    lines = [f"## {load}: real vs simulated (mean ± sd over repeats)", ""]
    lines += [markdown_table(_RESULTS_HEADER, _results(load, results)), ""]
    lines += [
        f"Ranking by TPOT p50: real {' < '.join(c['real']['ranking'])}; "
        f"trace sim {' < '.join(c['sim']['ranking'])}.",
        "",
        _ranking_gaps(c["real"]["ranking_gaps"]),
        "",
        _ranking_chance(c["real"]["ranking_chance"]),
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


def _ranking_gaps(gaps: list[dict]) -> str:
    """The real ranking's adjacent pairs, each with its paired gap and whether the repeats tell
    it apart (read, not judged)."""
    parts = [
        f"{g['faster']} < {g['slower']} by {_pct(g['difference'])}"
        + (" (one repeat)" if math.isnan(g["se"]) else f" ± {100 * g['se']:.1f}%")
        + f" ({'told apart' if g['resolved'] else 'not told apart'})"
        for g in gaps
    ]
    return (
        f"Real ranking's adjacent pairs (paired over seeds, gap ± its standard error; a paired "
        f"t-test at {RANKING_ALPHA:.0%} two-sided; read, not judged): {'; '.join(parts)}."
    )


def _ranking_chance(chance: float | None) -> str:
    """What a ranking miss at this load can say (read, not judged)."""
    said = "not read (no spread over seeds)" if chance is None else f"{chance:.2f}"
    return (
        "Chance that a simulation with no bias, erring only by the noise this study's seeds "
        "show (the real runs' own acceptance and queueing), ranks the policies as the real "
        f"runs did (read, not judged; a low chance means a ranking miss says little): {said}."
    )


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

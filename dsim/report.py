"""Console output shared by commands: the summary table and the progress bar."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

console = Console(stderr=False)


def warn(message: str) -> None:
    """One warning line on stderr, in the form of the CLI's error lines."""
    print(f"dsim: warning: {message}", file=sys.stderr)


_LABELS = {
    "throughput_tok_s": ("throughput", "tok/s"),
    "tps_p10": ("per-user speed p10", "tok/s/user"),
    "tps_p50": ("per-user speed p50", "tok/s/user"),
    "tps_p90": ("per-user speed p90", "tok/s/user"),
}
# `vllm bench serve`'s latencies with its definitions, each as mean / p50 / p90 / p99 (the
# statistics a summary has: one written before p90 and the means has p50 and p99 only).
_LATENCIES = {
    "ttft": "TTFT",
    "tpot": "TPOT (excl. 1st token)",
    "itl": "ITL (per chunk: round)",
    "e2el": "E2EL (end to end)",
}
_STATS = ("mean", "p50", "p90", "p99")
_ENGINE_LABELS = {
    "accepted_length_mean": ("accepted length tau", "tok/round"),
    "verification_waste": ("verification waste", "fraction"),
    "mean_verify_budget": ("verify budget", "tok/request/round"),
    "mean_batch_size": ("mean batch size", "requests"),
}


def figure(value: float) -> str:
    """A plain figure for a table: 4 significant digits, never an exponent (4.664, 46.64,
    13931, 0.001463); "n/a" where a metric is undefined (the arrival rate of one request)."""
    if math.isnan(value):
        return "n/a"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("unit")
    table.add_row("requests", str(summary["requests"]), "")
    table.add_row("duration", f"{summary['duration_s']:.1f}", "s")
    if "arrival_rate_req_s" in summary:  # summaries written before it was recorded lack it
        table.add_row("arrival rate", figure(summary["arrival_rate_req_s"]), "req/s")
    if "request_throughput_req_s" in summary:
        table.add_row("request throughput", figure(summary["request_throughput_req_s"]), "req/s")
    for key, (label, unit) in _LABELS.items():
        table.add_row(label, figure(summary[key]), unit)
    for metric, label in _LATENCIES.items():
        stats = [q for q in _STATS if f"{metric}_{q}_s" in summary]
        if stats:
            values = "  ".join(figure(1e3 * summary[f"{metric}_{q}_s"]) for q in stats)
            table.add_row(label, values, f"ms: {' '.join(stats)}")
    for key, (label, unit) in _ENGINE_LABELS.items():
        table.add_row(label, figure(summary[key]), unit)
    if summary.get("gpus_total") is not None:  # an estimate's sidecar says its GPUs
        gpus = summary["gpus_per_replica"]
        table.add_row(
            "GPUs",
            f"{gpus} x {summary['gpus_total'] // gpus}",
            "per replica x replicas",
        )
        table.add_row(
            "throughput per GPU", figure(summary["throughput_tok_s_per_gpu"]), "tok/s/GPU"
        )
    if "unstable" in summary:  # the overload rule (docs/pareto.md)
        verdict = "UNSTABLE" if summary["unstable"] else "stable"
        growth = f"queue {summary['queue_growth']:+d} (limit {summary['queue_growth_limit']:g})"
        ratio = summary["ttft_growth"]
        ttft = "n/a" if math.isnan(ratio) else f"x{ratio:.3g}"
        table.add_row("overload", verdict, f"{growth}, TTFT {ttft} (last/first fifth)")
        table.add_row(
            "steady throughput", figure(summary["steady_throughput_tok_s"]), "tok/s (10-90%)"
        )
        table.add_row("steady TTFT p50", figure(summary["steady_ttft_p50_s"]), "s (10-90%)")
    if len(summary.get("per_replica", ())) > 1:  # a cluster (docs/cluster.md)
        table.add_row("replicas", str(len(summary["per_replica"])), "")
        table.add_row("load imbalance", figure(summary["load_imbalance"]), "max/mean tokens")
    if "prefill_busy_max" in summary:  # disaggregated
        _disagg_rows(table, summary)
    return table


def _disagg_rows(table: Table, summary: dict) -> None:
    """The P:D split, how busy the prefill replicas were and what the KV transfer took."""
    prefill, decode = summary["prefill_replicas"], len(summary["per_replica"])
    table.add_row("P:D split", f"{prefill}:{decode - prefill}", "prefill:decode replicas")
    busy = f"{figure(summary['prefill_busy_mean'])} / {figure(summary['prefill_busy_max'])}"
    table.add_row("prefill busy mean / max", busy, "fraction of the run")
    kv = f"{figure(summary['kv_transfer_p50_s'])} / {figure(summary['kv_transfer_p99_s'])}"
    table.add_row("KV transfer p50 / p99", kv, "s per request")


class Bar:
    """What `progress_bar` yields: `bar(done, total)` sets the count, `bar.advance(n)` adds to
    it, `bar.describe(text)` changes the label."""

    def __init__(self, progress: Progress, task) -> None:
        self._progress, self._task = progress, task

    def __call__(self, done: int, total: int | None = None) -> None:
        self._progress.update(self._task, completed=done, total=total or None)

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)

    def resume(self, done: int) -> None:
        """Start the count at `done` (points a resumed sweep already has) without counting
        them as this run's pace, so the time remaining reads only the work done now."""
        self._progress.reset(self._task, completed=done)

    def describe(self, text: str) -> None:
        self._progress.update(self._task, description=text)


@contextmanager
def progress_bar(description: str, total: int | None, enabled: bool = True) -> Iterator[Bar]:
    """The one progress bar of every command: on stderr, gone when done, off when disabled
    or when stderr is not a terminal (rich would draw nothing there but leave an empty line
    before the next message)."""
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not (enabled and err.is_terminal),
        transient=True,
    )
    with progress:
        yield Bar(progress, progress.add_task(description, total=total))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table from already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def frame_table(df, digits: int = 4) -> str:
    """A DataFrame as a markdown table, floats to `digits` significant figures."""
    cells = [
        [f"{v:.{digits}g}" if isinstance(v, float) else str(v) for v in row] for row in df.values
    ]
    return markdown_table([str(c) for c in df.columns], cells) + "\n"

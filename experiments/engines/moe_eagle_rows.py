"""SGLang EAGLE-3 on Qwen3-30B-A3B at several settings and batch sizes: the round under the
SGLang terms before addendum 9 and under the shipped ones (docs/engine-v2-rules.md, addenda 8
and 9; writes moe_eagle_rows.md beside this file).

    PYTHONPATH=. .venv/bin/python experiments/engines/moe_eagle_rows.py     # a few seconds

Each EAGLE-3 row is read against its own source's plain row at the same batch size (the rule's
ratio reading, `round_fit.eagle_rows`); its round is priced as `round_fit` prices every row
(verify step, drafter passes each max(GPU work, host per proposer step), sync, per_round).
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.cpu import cpu_name
from dsim.fileio import write_with
from dsim.hardware import arch, engine_fit, round_fit, zoo
from dsim.hardware.gpu_model import SpecRound

DIR = Path(__file__).resolve().parent
ROOT = DIR.parent.parent
# SGLang's round terms until addendum 9 (P19-P20 fitted; addendum 8's first report, f2eec28)
BEFORE = SpecRound(per_round_s=0.0, host_pass_s=1.090e-3)


@contextmanager
def routing_overlap(value: float | None):
    """Price under another routing overlap (None: chance, k/E of Qwen3-30B-A3B)."""
    kept = arch.ROUTING_OVERLAP
    model = zoo.load_arch(engine_fit.SETUPS["qwen3moe-tp4"][0])
    arch.ROUTING_OVERLAP = value if value is not None else model.top_k / model.experts
    try:
        yield
    finally:
        arch.ROUTING_OVERLAP = kept


def predicted(table: pd.DataFrame, terms: SpecRound) -> np.ndarray:
    """AL x plain / round: the model's speed-up of each row."""
    return (
        table["accept_len"].to_numpy()
        * table["plain_s"].to_numpy()
        / round_fit.predict_round(table, terms)
    )


def summary(err: np.ndarray) -> str:
    a = np.abs(err)
    return (
        f"median |error| {np.median(a):.1%}, worst {a.max():.1%}, "
        f"{int((err > 0).sum())} above and {int((err < 0).sum())} below (n = {a.size})"
    )


def header() -> list[str]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout

    commit = git("rev-parse", "--short", "HEAD").strip()
    dirty = " plus uncommitted changes" if git("status", "--porcelain").strip() else ""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "# SGLang EAGLE-3 on Qwen3-30B-A3B: 14 published rounds, before and after addendum 9",
        "",
        "Made by `experiments/engines/moe_eagle_rows.py` under `docs/engine-v2-rules.md`, "
        "addendum 8 (committed 7218b23 before any of these rows was priced; its first report, "
        "under the terms then shipped, is commit f2eec28) and addendum 9 (after the fact: the "
        "14 rows fitted, P19-P20 out). Command: `PYTHONPATH=. .venv/bin/python "
        f"experiments/engines/moe_eagle_rows.py`. Machine: {cpu_name()}. Run {when}, load "
        f"average {load}. Commit {commit}{dirty}. Deterministic.",
        "",
    ]


def main() -> None:
    shipped = round_fit.spec_rounds()["sglang"]
    table = round_fit.rounds_of(round_fit.eagle_rows())
    meas = table["speedup"].to_numpy()
    pred = {k: predicted(table, t) for k, t in (("before", BEFORE), ("shipped", shipped))}
    err = {k: p / meas - 1.0 for k, p in pred.items()}
    fitted = (table["seqs"] <= round_fit.EAGLE_FITTED_MAX_BATCH).to_numpy()
    loo = {r["row"]: r["error"] for r in round_fit.leave_one_out()["rows"]}
    held = np.array([loo[n] for n in table["name"][fitted]])
    lines = header()
    lines += [
        "## Summary (the 14 rows at batch <= 8)",
        "",
        f"- Before addendum 9 (host per proposer step {BEFORE.host_pass_s * 1e3:.3f} ms, "
        f"per_round {BEFORE.per_round_s * 1e3:.3f} ms; evaluation only): speed-up "
        + summary(err["before"][fitted])
        + f"; speed-up below 1 predicted in {int((pred['before'][fitted] < 1).sum())} of 14.",
        f"- Shipped (addendum 9: host per proposer step {shipped.host_pass_s * 1e3:.3f} ms, "
        f"per_round {shipped.per_round_s * 1e3:.3f} ms, fitted on these rows, P18 and E3-E5): "
        "in sample "
        + summary(err["shipped"][fitted])
        + "; left out by source "
        + summary(held)
        + f"; speed-up below 1 predicted in {int((pred['shipped'][fitted] < 1).sum())} of 14.",
        f"- Measured speed-up below 1 in {int((meas[fitted] < 1).sum())} of 14.",
        "- Both are SGLang 0.4.4-0.4.5-era terms (the rules' rows) charged to the SGLang of "
        "December 2025 these runs used, and the rows' plain step is the model's (its context "
        "check below): a transfer, said.",
    ]
    lines += sensitivity(shipped, fitted, meas)
    lines += plain_check()
    lines += rows_table(table, pred, err, loo, fitted)
    lines += pairs(table, round_fit.predict_round(table, shipped))
    lines += absolute(table, {"before": BEFORE, "shipped": shipped}, fitted)
    write_with(DIR / "moe_eagle_rows.md", lambda p: p.write_text("\n".join(lines) + "\n"))


def sensitivity(terms: SpecRound, fitted: np.ndarray, meas: np.ndarray) -> list[str]:
    """Addendum 8's two sensitivities on the 14 rows under the shipped terms (not refitted)."""
    lines = ["", "## Sensitivities (the 14 rows; the shipped terms held)", ""]
    for label, value in (("chance (k/E)", None), ("0.38 (the range's end)", 0.38)):
        with routing_overlap(value):
            table = round_fit.rounds_of(round_fit.eagle_rows())
        err = predicted(table, terms)[fitted] / meas[fitted] - 1.0
        lines.append(f"- Routing overlap at {label}: " + summary(err) + ".")
    table = round_fit.rounds_of(round_fit.eagle_rows())
    err = predicted(table, replace(terms, host_pass_s=0.0))[fitted] / meas[fitted] - 1.0
    lines.append("- Host per proposer step 0 (per_round as shipped): " + summary(err) + ".")
    return lines


def plain_check() -> list[str]:
    """Context: the modelled plain step at each plain row's batch against batch / (plain
    tok/s), which includes the runs' prefill and client time (an upper bound on the step)."""
    lines = ["", "## Context: the plain steps", ""]
    lines += [
        "batch / tok/s carries prefill, client time and the drain of a small prompt set (20 "
        "questions in SpecForge's runs, so its batches of 32 and 64 never ran full): a step "
        "only at small batch, an upper bound there.",
        "",
    ]
    lines += ["| row | source | batch | modelled ms | batch / tok/s ms | model over run |"]
    lines += ["| --- | --- | --- | --- | --- | --- |"]
    for i in round_fit.EAGLE_ROWS:
        r = engine_fit.eval_rows()[i]
        if r["kind"] != "A":
            continue
        setup, source = round_fit.EAGLE_SETUPS[r["tp"]]
        batch = int(r["max_concurrency"])
        row = round_fit.tree(f"E{i}", source, "sglang", setup, "eagle3", batch, 1e3, 1, 1, 1, 1.0)
        step = round_fit.rounds_of([row])["plain_s"].iloc[0]
        measured = batch / float(r["output_tok_s"])
        lines.append(
            f"| E{i} | {source} (TP {r['tp']}) | {batch} | {step * 1e3:.2f} | "
            f"{measured * 1e3:.2f} | {step / measured - 1:+.1%} |"
        )
    return lines


def rows_table(
    table: pd.DataFrame,
    pred: dict[str, np.ndarray],
    err: dict[str, np.ndarray],
    loo: dict[str, float],
    fitted: np.ndarray,
) -> list[str]:
    """Every row under both term sets, with the shipped fit's left-out error."""
    lines = [
        "",
        "## Every row",
        "",
        "Measured round = (AL / S) x the modelled plain step at the row's batch; error = "
        "predicted / measured speed-up - 1. `verify / plain`: the modelled verify step over "
        "the plain step at the same batch. Shipped LOO: the row's source left out of the fit. "
        "Batches of 32 and 64 drain (addendum 8, item 2): context, not fitted.",
        "",
        "| row | source | batch | steps, top-k, draft tokens | AL | plain ms | verify / plain "
        "| measured round ms | measured S | before: S (error) | shipped: S (error) | shipped "
        "LOO |",
        "| --- " * 12 + "|",
    ]
    for pos, row in table.iterrows():
        held = f"{loo[row['name']]:+.1%}" if fitted[pos] else "context"
        lines.append(
            f"| {row['name']} | {row['source']} | {row['seqs']} | {row['passes']}, "
            f"{row['rest_per_seq']}, {row['verify_per_seq']} | {row['accept_len']:.3f} | "
            f"{row['plain_s'] * 1e3:.2f} | {row['verify_s'] / row['plain_s']:.2f} | "
            f"{row['measured_round_s'] * 1e3:.2f} | {row['speedup']:.3f} | "
            f"{pred['before'][pos]:.3f} ({err['before'][pos]:+.1%}) | "
            f"{pred['shipped'][pos]:.3f} ({err['shipped'][pos]:+.1%}) | {held} |"
        )
    return lines


def pairs(table: pd.DataFrame, round_pred: np.ndarray) -> list[str]:
    """Rows that differ in one setting at a fixed batch: what the difference costs, measured
    (from each row's ratio reading) beside the shipped model's."""
    by = table.set_index("name")
    pred = pd.Series(round_pred, index=by.index)
    lines = ["", "## Pairs: one setting changed (shipped terms)", ""]
    lines += ["| pair | what changes | measured round difference ms | modelled ms |"]
    lines += ["| --- | --- | --- | --- |"]
    for a, b, what in (
        ("E169", "E168", "draft tokens 4 -> 8 (steps 3, top-k 3, batch 1, TP 2)"),
        ("E167", "E169", "top-k 1 -> 3 (steps 3, draft tokens 4, batch 1, TP 2)"),
        ("E153", "E154", "top-k 3 -> 2, draft tokens 4 -> 8 (steps 3, batch 1, TP 4)"),
        ("E153", "E155", "steps 3 -> 4, top-k 3 -> 4, draft tokens 4 -> 16 (batch 1, TP 4)"),
        ("E167", "E173", "batch 1 -> 4 (3, 1, 4; TP 2)"),
        ("E168", "E174", "batch 1 -> 4 (3, 3, 8; TP 2)"),
        ("E155", "E157", "batch 1 -> 4 (4, 4, 16; TP 4)"),
        ("E157", "E158", "batch 4 -> 8 (4, 4, 16; TP 4)"),
    ):
        measured = (by.loc[b, "measured_round_s"] - by.loc[a, "measured_round_s"]) * 1e3
        modelled = (pred[b] - pred[a]) * 1e3
        lines.append(f"| {a} -> {b} | {what} | {measured:+.2f} | {modelled:+.2f} |")
    return lines


def absolute(table: pd.DataFrame, terms: dict[str, SpecRound], fitted: np.ndarray) -> list[str]:
    """A reading the rule did not name, added after addendum 8's results: the round as AL x
    batch / the run's tok/s (prefill and client included, so a true round is shorter)."""
    ev = engine_fit.eval_rows()
    tok_s = np.array([float(ev[int(n[1:])]["output_tok_s"]) for n in table["name"]])
    measured = table["accept_len"].to_numpy() * table["seqs"].to_numpy() / tok_s
    lines = ["", "## The round read absolutely (after addendum 8's results; not the rule's)", ""]
    for label, t in terms.items():
        err = round_fit.predict_round(table, t)[fitted] / measured[fitted] - 1.0
        lines.append(f"- {label}: the model's round against AL x batch / tok/s: {summary(err)}.")
    return lines


if __name__ == "__main__":
    main()

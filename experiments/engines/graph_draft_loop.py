"""SGLang's round with its draft loop in one CUDA graph: the form considered in
docs/engine-v2-rules.md, addendum 7, and not adopted (writes graph_draft_loop.md beside this
file).

SGLang captures its whole multi-step draft (`EAGLEWorker.draft_forward`, every one of the
`speculative_num_steps` drafter passes) as one CUDA graph and replays it once a round
(`python/sglang/srt/speculative/eagle_draft_cuda_graph_runner.py`, `capture_one_batch_size` ->
`run_once`, at sgl-project/sglang 2aa1ac7). So no host time sits under each pass: a pass costs
its GPU work, and the host's part comes once a round. This script refits the round's terms in
that form (the host per proposer step held at 0, per_round fitted as the shipped fit fits it)
on the same rows, in sample and left out by source, beside the shipped form's errors.

    PYTHONPATH=. .venv/bin/python experiments/engines/graph_draft_loop.py     # seconds

Only SGLang's fit changes form (its grid of host times narrowed to {0}, inside this process
only); vLLM 0.8 keeps its host floor per pass (its proposer launches each pass from the host) and
its own per_round (addendum 9). Both forms fit the rows the shipped fit fits (P19-P20 not, since
addendum 9); the summary is over those rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dsim.fileio import write_with
from dsim.hardware import round_fit
from dsim.hardware.gpu_model import SpecRound
from dsim.report import markdown_table

OUT = Path(__file__).resolve().parent / "graph_draft_loop.md"


def graph_fit(table) -> dict[str, SpecRound]:
    """`round_fit._fit_all` with SGLang's passes priced at their GPU work (no host floor)."""
    fitted = table[table["fitted"]]
    grid, round_fit.HOST_GRID = round_fit.HOST_GRID, np.zeros(1)
    try:
        sglang = round_fit.fit_terms(fitted[fitted["version"] == "sglang"])
    finally:
        round_fit.HOST_GRID = grid
    return {"sglang": sglang, "vllm-0.8": round_fit.vllm_terms(fitted, sglang)}


def errors(terms_of) -> tuple[dict, dict]:
    """In-sample and left-out-by-source speed-up (or round) errors per row, with the terms each
    fit gave, for the fit `terms_of(table)`."""
    table = round_fit.round_table()
    measured = np.where(np.isnan(table["speedup"]), 1.0, table["speedup"])
    full = terms_of(table)
    pred = round_fit.predict_speedup(table, full)
    inside = dict(zip(table["name"], pred / measured - 1, strict=True))
    left_out = {}
    for source in dict.fromkeys(table["source"]):
        test = (table["source"] == source).to_numpy()
        pred = round_fit.predict_speedup(table[test], terms_of(table[~test]))
        left_out |= dict(zip(table[test]["name"], pred / measured[test] - 1, strict=True))
    return {"terms": full, "in": inside}, left_out


def main() -> None:
    shipped, shipped_loso = errors(round_fit._fit_all)
    graph, graph_loso = errors(graph_fit)
    rows = [
        [name, f"{shipped['in'][name]:+.1%}", f"{shipped_loso[name]:+.1%}",
         f"{graph['in'][name]:+.1%}", f"{graph_loso[name]:+.1%}"]
        for name in shipped["in"]
    ]  # fmt: skip

    fitted = set(round_fit.round_table().query("fitted")["name"])

    def worst_median(e: dict) -> str:
        a = np.abs([v for k, v in e.items() if k in fitted])
        return f"worst {a.max():.1%}, median {np.median(a):.1%}"

    def terms(fit: dict) -> str:
        return "; ".join(
            f"{v}: per_round {1e3 * t.per_round_s:.2f} ms, host per proposer step "
            f"{1e3 * t.host_pass_s:.3f} ms"
            for v, t in fit["terms"].items()
        )

    text = "\n".join(
        [
            "# SGLang's draft loop in one CUDA graph: the round refitted in that form",
            "",
            "Made by `experiments/engines/graph_draft_loop.py` (docstring: what and why); "
            "docs/engine-v2-rules.md, addendum 7. Deterministic.",
            "",
            "- Shipped form (a pass costs max(GPU work, host per proposer step)): "
            f"{terms(shipped)}.",
            f"- Graph form (SGLang's pass costs its GPU work; host once a round): {terms(graph)}.",
            f"- Fitted speculative rows left out by source: shipped "
            f"{worst_median(shipped_loso)}; graph {worst_median(graph_loso)} (P19-P20, not "
            "fitted, in the table).",
            "",
            markdown_table(
                ["row", "shipped in sample", "shipped LOSO", "graph in sample", "graph LOSO"], rows
            ),
            "",
        ]
    )
    write_with(OUT, lambda tmp: tmp.write_text(text))
    print(text)


if __name__ == "__main__":
    main()

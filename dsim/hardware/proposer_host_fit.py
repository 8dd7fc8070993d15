"""Current vLLM's host time per proposer step, fitted on current vLLM's own rows (addendum 5 of
docs/engine-v2-rules.md) instead of taken from vLLM 0.8-0.10 as it is.

The rows are the P-EAGLE post's: P-EAGLE's TPS over EAGLE-3's on gpt-oss-20b on one B200
(vLLM >= 0.16, async scheduling). Both methods verify 1 + K tokens per request; EAGLE-3 pays K
sequential drafter passes, P-EAGLE one pass of a four-layer drafter. The ratio of their TPS is
(AL_P / AL_E) x round_E / round_P, so it measures what the sequential passes cost against the
rest of a round, in one source, target, GPU and engine: what a pass's host floor sets. Only the
concurrency-1 rows are fitted (where passes are least GPU-bound); the others are evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from dsim.hardware import draft_pass, engine_fit, round_fit
from dsim.hardware.arch import Parallel
from dsim.hardware.gpu_model import SpecRound
from dsim.hardware.graph_priors import graphs
from dsim.hardware.pricing import Pricing, pricing

VERSION = "vllm"
SOURCE = "vLLM blog 2026-03-13 'P-EAGLE' (vllm-project.github.io _posts/2026-03-13-p-eagle.md)"
EAGLE_K, PEAGLE_K = 3, 7  # the post: EAGLE-3 peaks at K=3, P-EAGLE at K=7
NOISE = 0.10
FIT_CONCURRENCY = 1
# Accepted lengths (tokens per round, bonus included) per benchmark: rows E10-E21.
ACCEPT = {
    "MT-Bench": {"peagle": {3: 2.87, 7: 3.70}, "eagle3": {3: 2.70, 7: 3.27}},
    "HumanEval": {"peagle": {3: 3.02, 7: 3.94}, "eagle3": {3: 2.65, 7: 3.03}},
    "SPEED-Bench": {"peagle": {3: 2.87, 7: 3.38}, "eagle3": {3: 2.24, 7: 2.59}},
}
FIRST_ROW = {"MT-Bench": 22, "HumanEval": 29, "SPEED-Bench": 36}  # E22.. at c = 1, 2, .., 64
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
# P-EAGLE's drafter: four decoder layers at the target's width (the post), EAGLE-3's input
# fusion and draft vocabulary (assumed: the post does not say).
PEAGLE = draft_pass.DraftModel(
    "peagle",
    "block",
    "P-EAGLE: four decoder layers over 1 + K target positions and K - 1 mask slots per request",
    "dense",
    layers=4,
    fused_inputs=3,
    input_norms=2,
    qkv_inputs=2,
    draft_vocab=draft_pass.DRAFT_VOCAB,
)


@dataclass(frozen=True)
class RatioRow:
    """One published P/E ratio with what its two rounds need."""

    name: str
    benchmark: str
    concurrency: int
    measured: float


def rows() -> list[RatioRow]:
    """E22-E42 as addendum 5 reads them (the measured ratio from the evaluation rows)."""
    ev = engine_fit.eval_rows()
    out = []
    for bench, first in FIRST_ROW.items():
        for i, c in enumerate(CONCURRENCY):
            row = ev[first + i]
            assert int(row["max_concurrency"]) == c and bench in str(row["workload"])
            out.append(RatioRow(f"E{first + i}", bench, c, float(row["speedup"])))
    return out


@cache
def _pricing() -> Pricing:
    """gpt-oss-20b on one B200, MXFP4 weights, fp8 KV cache (the post's command)."""
    par = Parallel(tp=1, dtype="fp4", kv_dtype="fp8")
    return pricing("gpt-oss-20b", "b200", par, True, graphs(VERSION, "b200"), VERSION)


def _step(tokens: float, seqs: int) -> float:
    one = [np.array([float(v)]) for v in (tokens, seqs, engine_fit.MTBENCH_CONTEXT)]
    terms = engine_fit.presets()[VERSION]
    return float(_pricing().step(terms, *one, np.array([False]))[0])


def _pass_gpu(draft: draft_pass.DraftModel, tokens: float, seqs: int) -> float:
    terms = draft_pass.drafter_terms(engine_fit.presets()[VERSION], 1.0)
    one = [np.array([float(v)]) for v in (tokens, seqs, engine_fit.MTBENCH_CONTEXT)]
    return float(draft_pass.pass_gpu(draft, _pricing(), terms, *one)[0])


@cache
def _parts(seqs: int, k: int) -> dict[str, float]:
    """The round's parts that do not depend on the terms: verify, and each drafter's passes'
    GPU work (EAGLE-3's first over 1 + K tokens per request, then over one; P-EAGLE's one pass
    over 2K tokens per request)."""
    eagle3 = draft_pass.get_draft_model("eagle3")
    return {
        "verify": _step(seqs * (1 + k), seqs),
        "eagle_first": _pass_gpu(eagle3, seqs * (1 + k), seqs),
        "eagle_rest": _pass_gpu(eagle3, seqs, seqs),
        "peagle": _pass_gpu(PEAGLE, seqs * 2 * k, seqs),
    }


def eagle_round(seqs: int, k: int, terms: SpecRound) -> float:
    """EAGLE-3's round: verify, K passes, per_round."""
    p = _parts(seqs, k)
    passes = terms.pass_seconds(p["eagle_first"]) + (k - 1) * terms.pass_seconds(p["eagle_rest"])
    return p["verify"] + passes + terms.per_round_s


def peagle_round(seqs: int, k: int, terms: SpecRound) -> float:
    """P-EAGLE's round: verify, one pass, per_round."""
    p = _parts(seqs, k)
    return p["verify"] + terms.pass_seconds(p["peagle"]) + terms.per_round_s


def predict(row: RatioRow, terms: SpecRound) -> float:
    """P-EAGLE's TPS at K=7 over EAGLE-3's at K=3 (addendum 5, item 2)."""
    al = ACCEPT[row.benchmark]
    tps_p = al["peagle"][PEAGLE_K] / peagle_round(row.concurrency, PEAGLE_K, terms)
    tps_e = al["eagle3"][EAGLE_K] / eagle_round(row.concurrency, EAGLE_K, terms)
    return tps_p / tps_e


def _with_host(host: float) -> SpecRound:
    return SpecRound(round_fit.spec_rounds()["vllm-0.8"].per_round_s, float(host))


def fit(fitted: list[RatioRow]) -> float:
    """The host time per proposer step on the grid minimising the rows' relative error."""
    losses = [
        sum(((predict(r, _with_host(h)) / r.measured - 1.0) / NOISE) ** 2 for r in fitted)
        for h in round_fit.HOST_GRID
    ]
    return float(round_fit.HOST_GRID[int(np.argmin(losses))])


@dataclass(frozen=True)
class Result:
    """The fit, its evaluation against the transfer, and the rule's verdict."""

    host_s: float
    transfer_s: float
    adopted: bool
    fitted_median: float
    eval_median: float
    transfer_eval_median: float
    by_benchmark_s: dict[str, float]
    table: list[dict]


@cache
def result() -> Result:
    """Addendum 5 carried out: fit on c = 1, evaluate c = 2..64 against the transfer."""
    all_rows = rows()
    fitted = [r for r in all_rows if r.concurrency == FIT_CONCURRENCY]
    held = [r for r in all_rows if r.concurrency != FIT_CONCURRENCY]
    host = fit(fitted)
    transfer = round_fit.spec_rounds()["vllm-0.8"].host_pass_s
    mine, theirs = _with_host(host), _with_host(transfer)

    def median(subset: list[RatioRow], terms: SpecRound) -> float:
        return float(np.median([abs(predict(r, terms) / r.measured - 1.0) for r in subset]))

    table = []
    for r in all_rows:
        c, k3, k7 = r.concurrency, EAGLE_K, PEAGLE_K
        al = ACCEPT[r.benchmark]
        table.append(
            {
                "row": r.name,
                "benchmark": r.benchmark,
                "concurrency": c,
                "fitted": r in fitted,
                "measured": r.measured,
                "predicted": round(predict(r, mine), 4),
                "error": round(predict(r, mine) / r.measured - 1.0, 4),
                "transfer_predicted": round(predict(r, theirs), 4),
                "transfer_error": round(predict(r, theirs) / r.measured - 1.0, 4),
                # the post's orderings: EAGLE-3 K=3 ahead of K=7, P-EAGLE K=7 ahead of K=3
                "eagle3_k3_over_k7": round(
                    (al["eagle3"][k3] / eagle_round(c, k3, mine))
                    / (al["eagle3"][k7] / eagle_round(c, k7, mine)),
                    4,
                ),
                "peagle_k7_over_k3": round(
                    (al["peagle"][k7] / peagle_round(c, k7, mine))
                    / (al["peagle"][k3] / peagle_round(c, k3, mine)),
                    4,
                ),
            }
        )
    eval_mine, eval_theirs = median(held, mine), median(held, theirs)
    return Result(
        host_s=host,
        transfer_s=transfer,
        adopted=0.0 <= host <= transfer and eval_mine <= eval_theirs,
        fitted_median=median(fitted, mine),
        eval_median=eval_mine,
        transfer_eval_median=eval_theirs,
        by_benchmark_s={r.benchmark: fit([r]) for r in fitted},
        table=table,
    )


def current_round() -> tuple[SpecRound, str]:
    """The `vllm` preset's round terms and where they come from (the transfer where the rule
    rejects the fit)."""
    res, base = result(), round_fit.spec_rounds()["vllm-0.8"]
    if not res.adopted:
        return base, (
            round_fit.SOURCES["vllm-0.8"] + "; current vLLM takes them as they are (a transfer: "
            "addendum 5's fit was not adopted)"
        )
    return _with_host(res.host_s), (
        f"host per proposer step {res.host_s * 1e3:.3f} ms fitted on current vLLM's P-EAGLE vs "
        f"EAGLE-3 rows at concurrency 1 (E22, E29, E36: {SOURCE}; gpt-oss-20b on one B200, "
        "charged on every GPU: host work is CPU work); per_round vLLM 0.8's "
        "(docs/engine-v2-rules.md, addendum 5)"
    )


def record() -> dict:
    """What a sidecar records about the fit."""
    res = result()
    return {
        "rules": "docs/engine-v2-rules.md, addendum 5",
        "source": SOURCE,
        "host_per_proposer_step_s": res.host_s,
        "transfer_s": res.transfer_s,
        "adopted": res.adopted,
        "fitted_median_abs_error": round(res.fitted_median, 4),
        "evaluation_median_abs_error": round(res.eval_median, 4),
        "transfer_evaluation_median_abs_error": round(res.transfer_eval_median, 4),
    }

"""Fitting the speculative round's engine terms on published speculative runs (the rules:
docs/engine-v2-rules.md; the ratio reading: docs/round-fit-rules.md).

A round costs the target's verify step (the engine's plain step model at R x V tokens), the
drafter's passes, each the longer of its GPU work (`draft_roofline`, the one owner of a pass's
GPU work) and the engine's host time per proposer step (`SpecRound.pass_seconds`), one small
all-reduce that keeps the ranks' accepted tokens in step, and `per_round` (rejection sampling,
input preparation, the host work the engine stops overlapping while it speculates). Every
engine runs K drafter passes for K draft tokens, the first over every verify position (vLLM's
padded drafter batch; SGLang's draft-extend and TensorRT-LLM's first MTP call over the
accepted tokens, padded to 1 + K), the others over one token per request (a tree's top-k).

A row is read as a ratio against its own source's plain run where one exists: the measured
round is (AL / S) x the modelled plain step, so the setup's absolute step error cancels; E126
has no plain run and gives its round directly (TPOT at AL 1). The host time per proposer step
is found on a grid (it enters through a max) and per_round by non-negative least squares at
each grid point, on relative error weighted by each row's noise. Deterministic.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from functools import cache

import numpy as np
import pandas as pd

from dsim.hardware import draft_pass, engine_fit, gpu_fit
from dsim.hardware.gpu_model import SpecRound

HOST_GRID = np.arange(0.0, 5e-3 + 1e-9, 5e-6)  # host per proposer step searched, 0..5 ms
SOURCES = {
    "sglang": "fitted on SGLang's EAGLE rounds: the 70B EAGLE-3 tree (P18), the 8B EAGLE "
    "chains (E3-E5) and 14 Qwen3-30B-A3B EAGLE-3 rounds at steps 3-8, top-k 1-10, batch 1-8 "
    "(E153-E158, E167-E174); DeepSeek MTP on 16 GPUs (P19-P20) reported, not fitted "
    "(docs/engine-v2-rules.md, addenda 8-9)",
    "vllm-0.8": "host per proposer step fitted on vLLM's EAGLE row at AL 1 (E126, K = 3 "
    "assumed) at per_round 0, which one row cannot separate from it (addendum 9, item 2)",
}
VLLM_PER_ROUND_S = 0.0  # vLLM 0.8's per_round: not identified by its rows (addendum 9, item 2)
EAGLE_ROWS = range(148, 175)  # addendum 8's rows: plain and EAGLE-3, Qwen3-30B-A3B
EAGLE_FITTED_MAX_BATCH = 8  # larger batches drain the small prompt sets (addendum 8, item 2)
EAGLE_SETTINGS = re.compile(r"\[eagle:steps=(\d+),topk=(\d+),draft_tokens=(\d+)\]")
EAGLE_SETUPS = {"4": ("qwen3moe-tp4", "AngelSlim #163"), "2": ("qwen3moe-tp2", "SpecForge #339")}


@dataclass(frozen=True)
class SpecRow:
    """One speculative row as the rules read it."""

    name: str
    source: str
    version: str  # the engine version whose terms it informs
    setup: str  # engine_fit.SETUPS key
    draft_model: str  # draft_pass.DRAFT_MODELS key
    seqs: int
    context: float
    verify_per_seq: int  # tokens each request verifies in the round
    passes: int  # drafter passes per round
    first_per_seq: int  # tokens per request of the first pass
    rest_per_seq: int  # tokens per request of each later pass
    accept_len: float  # tokens emitted per round per request (bonus token included)
    speedup: float  # speculative tok/s over the same source's plain tok/s (nan: absolute)
    round_s: float  # the measured round where no plain run exists (nan: ratio reading)
    noise: float
    fitted: bool = True  # False: reported, not fitted (P19-P20: addendum 9, item 1)


NAN = float("nan")


def tree(
    name: str,
    source: str,
    version: str,
    setup: str,
    draft: str,
    seqs: int,
    context: float,
    steps: int,
    top_k: int,
    draft_tokens: int,
    accept_len: float,
    speedup: float = NAN,
    round_s: float = NAN,
    noise: float = 0.05,
    fitted: bool = True,
) -> SpecRow:
    """SGLang's EAGLE round (`speculative_num_steps`, `_eagle_topk`, `_num_draft_tokens`):
    verify `draft_tokens` per request, `steps` passes, the first over steps + 1 (the
    draft-extend over the accepted tokens), the others over top-k per request."""
    return SpecRow(
        name,
        source,
        version,
        setup,
        draft,
        seqs,
        context,
        draft_tokens,
        steps,
        steps + 1,
        top_k,
        accept_len,
        speedup,
        round_s,
        noise,
        fitted,
    )


def chain_of(k: int) -> tuple[int, int, int]:
    """A chain of K drafts as `tree`'s (steps, top-k, draft tokens): verify 1 + K tokens per
    request, K passes, the first over all of them."""
    return k, 1, 1 + k


def spec_rows() -> list[SpecRow]:
    """P18-P20, E3-E5, E126 and addendum 8's rows at batch <= 8, as the rules and their addenda
    read them."""
    raw, ev = engine_fit.raw_rows(), engine_fit.eval_rows()
    mtb = float(engine_fit.MTBENCH_CONTEXT)
    p18 = raw.iloc[18]  # 8 steps, top-8, 64 draft tokens verified per request
    speedup = float(p18["output_tok_s"]) / float(raw.iloc[17]["output_tok_s"])
    out = [
        SpecRow(
            "P18",
            "SGLang PR",
            "sglang",
            "pr",
            "eagle3",
            1,
            mtb,
            64,
            8,
            8,
            8,
            float(p18["mean_accept_len"]),
            speedup,
            NAN,
            0.05,
        )
    ]
    for i in (19, 20):  # against the LMSYS blog's plain baseline, 51.0 tok/s per rank
        row = raw.iloc[i]
        context = float(row["input_len"]) + float(row["output_len"]) / 2
        out.append(
            tree(
                f"P{i}",
                "LMSYS blog",
                "sglang",
                "deepseek",
                "mtp",
                2,
                context,
                *chain_of(int(row["num_spec_tokens"])),
                float(row["mean_accept_len"]),
                float(row["output_tok_s"]) / 51.0,
                fitted=False,  # exclusion 2: 16 GPUs, DP attention, EP 16 (addendum 9)
            )
        )
    plain = float(ev[0]["output_tok_s"])
    for i, draft in ((3, "eagle3"), (4, "eagle3"), (5, "eagle")):
        row = ev[i]
        out.append(
            tree(
                f"E{i}",
                "SGLang PR #4247",
                "sglang",
                "docs",
                draft,
                1,
                mtb,
                *chain_of(int(row["num_spec_tokens"])),
                float(row["mean_accept_len"]),
                float(row["output_tok_s"]) / plain,
                noise=0.10,
            )
        )
    context = (9568 + 21269 / 2) / 100  # E126's total input and output tokens over 100
    round_s = float(ev[126]["mean_tpot_ms"]) / 1e3  # AL 1: a round per token
    out.append(
        tree(
            "E126",
            "vLLM PR #21477",
            "vllm-0.8",
            "docs",
            "eagle",
            2,
            context,
            *chain_of(3),
            1.0,
            round_s=round_s,
            noise=0.10,
        )
    )  # K = 3: addendum 3
    return out + eagle_rows(EAGLE_FITTED_MAX_BATCH)


def eagle_rows(max_batch: int | None = None) -> list[SpecRow]:
    """Addendum 8's EAGLE-3 rows on Qwen3-30B-A3B (SGLang, December 2025), each against its
    own source's plain row at the same batch size; `max_batch` None: every batch."""
    ev = {i: engine_fit.eval_rows()[i] for i in EAGLE_ROWS}
    plain = {(r["tp"], r["max_concurrency"]): r for r in ev.values() if r["kind"] == "A"}
    out = []
    for i, r in ev.items():
        batch = int(r["max_concurrency"])
        if r["kind"] != "B" or (max_batch is not None and batch > max_batch):
            continue
        steps, top_k, tokens = (int(v) for v in EAGLE_SETTINGS.search(r["notes"]).groups())
        setup, source = EAGLE_SETUPS[r["tp"]]
        speedup = float(r["output_tok_s"]) / float(
            plain[(r["tp"], r["max_concurrency"])]["output_tok_s"]
        )
        out.append(
            tree(
                f"E{i}",
                source,
                "sglang",
                setup,
                "eagle3",
                batch,
                float(engine_fit.MTBENCH_CONTEXT),
                steps,
                top_k,
                tokens,
                float(r["mean_accept_len"]),
                speedup,
                noise=0.10,
            )
        )
    return out


def _step(row: SpecRow, tokens: float) -> float:
    """The engine version's plain step over `tokens` tokens of the row's requests."""
    price = engine_fit.setup_pricing(row.setup, row.version)
    one = [np.array([float(v)]) for v in (tokens, row.seqs, row.context)]
    return float(price.step(engine_fit.presets()[row.version], *one, np.array([False]))[0])


def _pass_gpu(row: SpecRow, per_seq: int) -> float:
    """GPU seconds of one drafter pass over `per_seq` tokens of each request."""
    price = engine_fit.setup_pricing(row.setup, row.version)
    terms = draft_pass.drafter_terms(engine_fit.presets()[row.version], 1.0)
    draft = draft_pass.get_draft_model(row.draft_model)
    n = np.array([float(row.seqs * per_seq)])
    return float(
        draft_pass.pass_gpu(
            draft, price, terms, n, np.array([float(row.seqs)]), np.array([row.context])
        )[0]
    )


def _sync(row: SpecRow) -> float:
    """One all-reduce of the round's accepted tokens (int64 per request) across the ranks."""
    price = engine_fit.setup_pricing(row.setup, row.version)
    return float(price.reduce.time(np.array([8.0 * row.seqs]), price.par.tp)[0])


def rounds_of(rows: list[SpecRow]) -> pd.DataFrame:
    """Per row: the modelled plain step, verify step, drafter passes' GPU work, sync and the
    measured round."""
    out = []
    for row in rows:
        plain = _step(row, row.seqs)
        measured = row.round_s if np.isnan(row.speedup) else row.accept_len / row.speedup * plain
        out.append(
            asdict(row)
            | {
                "plain_s": plain,
                "verify_s": _step(row, row.seqs * row.verify_per_seq),
                "first_pass_gpu_s": _pass_gpu(row, row.first_per_seq),
                "rest_pass_gpu_s": _pass_gpu(row, row.rest_per_seq),
                "sync_s": _sync(row),
                "measured_round_s": measured,
            }
        )
    return pd.DataFrame(out)


@cache
def round_table() -> pd.DataFrame:
    """The rules' speculative rows as `rounds_of` tables them."""
    return rounds_of(spec_rows())


def predict_round(rows: pd.DataFrame, terms: SpecRound) -> np.ndarray:
    """The modelled round of each row under `terms`."""
    first = terms.pass_seconds(rows["first_pass_gpu_s"].to_numpy())
    rest = terms.pass_seconds(rows["rest_pass_gpu_s"].to_numpy())
    drafter = first + (rows["passes"].to_numpy() - 1) * rest
    fixed = rows["verify_s"].to_numpy() + rows["sync_s"].to_numpy()
    return fixed + drafter + terms.per_round_s


def fit_terms(rows: pd.DataFrame, per_round: float | None = None) -> SpecRound:
    """The host per proposer step (grid) and per_round (non-negative, closed form at each
    grid point; fixed where `per_round` is given) minimising noise-weighted relative error."""
    meas = rows["measured_round_s"].to_numpy()
    weight = 1.0 / (meas * rows["noise"].to_numpy())
    best, best_terms = np.inf, SpecRound()
    for host in HOST_GRID:
        base = predict_round(rows, SpecRound(0.0, float(host)))
        if per_round is None:
            gap = (meas - base) * weight
            fixed = max(float(np.sum(gap * weight) / np.sum(weight * weight)), 0.0)
        else:
            fixed = per_round
        loss = float(np.sum(((base + fixed - meas) * weight) ** 2))
        if loss < best - 1e-15:
            best, best_terms = loss, SpecRound(fixed, float(host))
    return best_terms


def vllm_terms(fitted: pd.DataFrame, sglang: SpecRound) -> SpecRound:
    """vLLM 0.8's terms: its host per proposer step fitted on its rows at its own per_round
    (`VLLM_PER_ROUND_S`); where a fold leaves it no row, SGLang's host per proposer step."""
    own = fitted[fitted["version"] == "vllm-0.8"]
    if len(own):
        return fit_terms(own, per_round=VLLM_PER_ROUND_S)
    return replace(sglang, per_round_s=VLLM_PER_ROUND_S)


def _fit_all(table: pd.DataFrame) -> dict[str, SpecRound]:
    """SGLang's terms on its fitted rows; vLLM's by `vllm_terms`."""
    fitted = table[table["fitted"]]
    sglang = fit_terms(fitted[fitted["version"] == "sglang"])
    return {"sglang": sglang, "vllm-0.8": vllm_terms(fitted, sglang)}


def predict_speedup(rows: pd.DataFrame, terms: dict[str, SpecRound]) -> np.ndarray:
    """AL x plain / round for ratio rows; predicted over measured round for absolute rows
    (E126), so against 1 its error is the round's."""
    out = np.empty(len(rows))
    for pos, (_, row) in enumerate(rows.iterrows()):
        pred = float(predict_round(rows.iloc[[pos]], terms[row["version"]])[0])
        out[pos] = (
            pred / row["measured_round_s"]
            if np.isnan(row["speedup"])
            else (row["accept_len"] * row["plain_s"] / pred)
        )
    return out


@cache
def spec_rounds() -> dict[str, SpecRound]:
    """The shipped terms per engine version: fitted on every speculative row."""
    return _fit_all(round_table())


@cache
def leave_one_out() -> dict:
    """Each source's rows predicted by the terms refitted without it (speed-up error, or for
    E126 the round's); rows not fitted (P19-P20) are predicted by every fit alike, and the
    summary is over the fitted rows."""
    table = round_table()
    rows = []
    in_sample = predict_speedup(table, spec_rounds())
    for source in dict.fromkeys(table["source"]):
        test = (table["source"] == source).to_numpy()
        terms = _fit_all(table[~test])
        pred = predict_speedup(table[test], terms)
        for pos, (_, row) in enumerate(table[test].iterrows()):
            meas = 1.0 if np.isnan(row["speedup"]) else row["speedup"]
            full = in_sample[np.flatnonzero(test)[pos]]
            rows.append(
                {
                    "row": row["name"],
                    "source": source,
                    "reading": "round" if np.isnan(row["speedup"]) else "speed-up",
                    "measured": round(float(meas), 4),
                    "predicted": round(float(pred[pos]), 4),
                    "error": round(float(pred[pos] / meas - 1.0), 4),
                    "in_sample_error": round(float(full / meas - 1.0), 4),
                    "fitted": bool(row["fitted"]),
                    "fold_terms_s": {k: asdict(v) for k, v in terms.items()},
                }
            )
    errors = np.array([r["error"] for r in rows if r["fitted"]])
    return {"rows": rows, "summary": gpu_fit.error_summary(errors)}


def record() -> dict:
    """What a sidecar records about the round-cost fit."""
    return {
        "rules": "docs/engine-v2-rules.md",
        "rows": [str(r) for r in round_table()["name"]],
        "terms_s": {k: asdict(v) for k, v in spec_rounds().items()},
        "leave_one_out": {
            "rows": [
                {k: v for k, v in r.items() if k != "fold_terms_s"} for r in leave_one_out()["rows"]
            ],
            "summary": leave_one_out()["summary"],
        },
    }

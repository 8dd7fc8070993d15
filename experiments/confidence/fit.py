"""Measure acceptance spreads and confidence discrimination on the live-drafter traces; fit the
parametric model on even seq_ids and judge it on odd ones (rules 1 and 2: README.md).

PYTHONPATH=$PWD python experiments/confidence/fit.py > experiments/confidence/results.md
(also writes experiments/confidence/results.json)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import expit

from dsim.acceptance.discrimination import discrimination
from dsim.acceptance.evidence import ConfidenceFit, clipped_logit, decompose, fit_confidence
from dsim.acceptance.measure import summarize
from dsim.acceptance.trace import conf_columns, read_acceptance_trace, trace_gamma, tv_columns
from dsim.fileio import write_json

HERE = Path(__file__).resolve().parent
TRACES = ("parallel", "ar", "markov", "rnn")  # primary first
REPLICATES, SEED, MIN_REACHED = 200, 0, 100
FIT_REPLICATES, FIT_SEED, BISECTIONS = 50, 1, 20
TOL_CURVE, TOL_AUC, TOL_VAR = 0.02, 0.03, 0.20


def statistics(seq: np.ndarray, conf: np.ndarray, accepted: np.ndarray) -> dict[str, Any]:
    """What the judgement compares, computed alike on recorded and simulated rounds."""
    gamma = conf.shape[1]
    disc = discrimination(conf, accepted)
    return {
        "curve": summarize(accepted, gamma).curve.tolist(),
        "reached": [d["reached"] for d in disc],
        "auc": [d["auc"] for d in disc],
        "between": decompose(accepted, seq).between_raw,
    }


def simulate(fit: ConfidenceFit, rounds: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    """The fitted model over requests with these round counts, every round drafting all gamma."""
    source = fit.source()
    source.bind(len(rounds), rng)
    seqs, confs, accs = [], [], []
    for t in range(int(rounds.max())):
        active = np.flatnonzero(rounds > t)
        conf, acc = source.draw(active, rng)
        seqs.append(active)
        confs.append(conf)
        accs.append(acc)
    seq, conf, acc = np.concatenate(seqs), np.concatenate(confs), np.concatenate(accs)
    order = np.argsort(seq, kind="stable")  # (seq, round) order
    return statistics(seq[order], conf[order], acc[order])


def measured(df: pd.DataFrame) -> dict[str, Any]:
    gamma, seq = trace_gamma(df), df["seq_id"].to_numpy()
    latent = decompose(clipped_logit(df[tv_columns(gamma)].to_numpy()), seq)
    outcome = decompose(df["accepted"].to_numpy(), seq)
    conf, accepted = df[conf_columns(gamma)].to_numpy(), df["accepted"].to_numpy()
    return {
        "requests": int(len(np.unique(seq))),
        "rounds": len(df),
        "latent": vars(latent),
        "accepted_length": vars(outcome),
        "discrimination": discrimination(conf, accepted),
    }


def solve_means(tv_mean: np.ndarray, spread: float, spread_req: float) -> np.ndarray:
    """Latent logit means whose expected sigmoid over N(0, spread^2 + spread_req^2) is tv_mean."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    sd, w = float(np.hypot(spread, spread_req)), weights / weights.sum()
    return np.array(
        [brentq(lambda m, t=t: w @ expit(m + sd * nodes) - t, -20.0, 20.0) for t in tv_mean]
    )


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The root of an increasing f on [lo, hi] (an end when f keeps its sign)."""
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def fit_rule2(half: pd.DataFrame) -> ConfidenceFit:
    """Rule 2: spread, rho, overconf as rule 1; means on the probability scale; spread_req and
    noise matched by simulation to the half's between-request variance and position-1 AUC."""
    gamma, seq = trace_gamma(half), half["seq_id"].to_numpy()
    base = fit_confidence(half)
    tv_mean = half[tv_columns(gamma)].to_numpy().mean(axis=0)
    rounds = np.unique(seq, return_counts=True)[1]
    between = decompose(half["accepted"].to_numpy(), seq).between_raw
    auc1 = discrimination(half[conf_columns(gamma)].to_numpy(), half["accepted"].to_numpy())[0]

    def model(spread_req: float, noise: float) -> ConfidenceFit:
        q = expit(solve_means(tv_mean, base.spread, spread_req))
        return dataclasses.replace(
            base, q=tuple(float(x) for x in q), spread_req=spread_req, noise=noise
        )

    def simulated(fit: ConfidenceFit, key: str) -> float:
        rng = np.random.default_rng(FIT_SEED)
        stats = [simulate(fit, rounds, rng) for _ in range(FIT_REPLICATES)]
        return float(np.mean([s[key] if key == "between" else s["auc"][0] for s in stats]))

    spread_req = _bisect(lambda s: simulated(model(s, 0.0), "between") - between, 0.0, 3.0)
    noise = _bisect(lambda n: auc1["auc"] - simulated(model(spread_req, n), "auc"), 0.0, 6.0)
    return model(spread_req, noise)


def judge(df: pd.DataFrame, fitter: Callable[[pd.DataFrame], ConfidenceFit]) -> dict[str, Any]:
    gamma = trace_gamma(df)
    fit_half, held = df[df["seq_id"] % 2 == 0], df[df["seq_id"] % 2 == 1]
    fit = fitter(fit_half)
    seq = held["seq_id"].to_numpy()
    recorded = statistics(seq, held[conf_columns(gamma)].to_numpy(), held["accepted"].to_numpy())
    rounds = np.unique(seq, return_counts=True)[1]
    rng = np.random.default_rng(SEED)
    sims = [simulate(fit, rounds, rng) for _ in range(REPLICATES)]
    model: dict[str, Any] = {}
    for key in ("curve", "auc", "between"):
        arr = np.array([s[key] for s in sims], dtype=np.float64)  # None -> nan
        model[key] = np.nanmean(arr, axis=0).tolist()
        model[f"{key}_p05"] = np.nanpercentile(arr, 5, axis=0).tolist()
        model[f"{key}_p95"] = np.nanpercentile(arr, 95, axis=0).tolist()
    judged = [
        k for k in range(gamma) if recorded["reached"][k] >= MIN_REACHED and recorded["auc"][k]
    ]
    curve_gap = [abs(model["curve"][k] - recorded["curve"][k]) for k in judged]
    auc_gap = [abs(model["auc"][k] - recorded["auc"][k]) for k in judged]
    var_ratio = model["between"] / recorded["between"]
    return {
        "fit": vars(fit),
        "held_out": recorded,
        "model": model,
        "judged_positions": [k + 1 for k in judged],
        "verdict": {
            "curve_max_gap": max(curve_gap),
            "curve_met": max(curve_gap) <= TOL_CURVE,
            "auc_max_gap": max(auc_gap),
            "auc_met": max(auc_gap) <= TOL_AUC,
            "between_ratio": var_ratio,
            "between_met": abs(var_ratio - 1.0) <= TOL_VAR,
        },
    }


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None or not np.isfinite(x) else format(x, fmt)


def report(results: dict[str, Any]) -> None:
    print("## Measured (whole trace, 72 requests)\n")
    print(
        "| trace | rounds | latent x: between-request var | between-round var | lag-1 autocorr | "
        "accepted length: between-request var (raw) | between-round var | lag-1 autocorr |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        m, lat, out = r["measured"], r["measured"]["latent"], r["measured"]["accepted_length"]
        print(f"| {name} | {m['rounds']} | {lat['between']:.3f} | {lat['within']:.3f} | "
              f"{lat['autocorr']:.3f} | {out['between_raw']:.4f} | {out['within']:.3f} | "
              f"{out['autocorr']:.3f} |")  # fmt: skip
    print("\n## Discrimination per position (whole trace: rounds reaching k; AUC; bias = mean "
          "conf - accept rate; ECE)\n")  # fmt: skip
    print("| trace | k | reached | AUC | accept rate | mean conf | bias | ECE |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        for d in r["measured"]["discrimination"]:
            print(f"| {name} | {d['position']} | {d['reached']} | {_f(d['auc'])} | "
                  f"{_f(d['rate'])} | {_f(d['conf'])} | {_f(d['bias'], '+.3f')} | "
                  f"{_f(d['ece'])} |")  # fmt: skip
    for key, title in (("judgement", "Rule 1"), ("judgement_rule2", "Rule 2")):
        report_rule(results, key, title)


def report_rule(results: dict[str, Any], key: str, title: str) -> None:
    print(f"\n## {title}: fitted on even seq_ids\n")
    print("| trace | latent means q_1..q_7 | spread | spread_req | rho | overconf | noise |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        f = r[key]["fit"]
        q = " ".join(f"{x:.3f}" for x in f["q"])
        print(f"| {name} | {q} | {f['spread']:.3f} | {f['spread_req']:.3f} | {f['rho']:.3f} | "
              f"{f['overconf']:.3f} | {f['noise']:.3f} |")  # fmt: skip
    print(f"\n## {title}: judged on odd seq_ids ({REPLICATES} model replicates; [5%, 95%])\n")
    print("| trace | k | reached | accept rate: held-out | model | AUC: held-out | model |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        j = r[key]
        h, m = j["held_out"], j["model"]
        for k in range(len(h["curve"])):
            mark = "" if k + 1 in j["judged_positions"] else " (not judged)"
            print(f"| {name} | {k + 1}{mark} | {h['reached'][k]} | {_f(h['curve'][k])} | "
                  f"{_f(m['curve'][k])} [{_f(m['curve_p05'][k])}, {_f(m['curve_p95'][k])}] | "
                  f"{_f(h['auc'][k])} | {_f(m['auc'][k])} "
                  f"[{_f(m['auc_p05'][k])}, {_f(m['auc_p95'][k])}] |")  # fmt: skip
    print("\n| trace | curve max gap (<= 0.02) | AUC max gap (<= 0.03) | between-request var of "
          "accepted length: held-out, model [5%, 95%], ratio (within 20%) |")  # fmt: skip
    print("| --- | --- | --- | --- |")
    for name, r in results.items():
        j = r[key]
        v, h, m = j["verdict"], j["held_out"], j["model"]
        print(f"| {name} | {v['curve_max_gap']:.3f} {'met' if v['curve_met'] else 'MISSED'} | "
              f"{v['auc_max_gap']:.3f} {'met' if v['auc_met'] else 'MISSED'} | "
              f"{h['between']:.4f}, {m['between']:.4f} [{m['between_p05']:.4f}, "
              f"{m['between_p95']:.4f}], {v['between_ratio']:.2f} "
              f"{'met' if v['between_met'] else 'MISSED'} |")  # fmt: skip


def main() -> None:
    results = {}
    for name in TRACES:
        df, meta = read_acceptance_trace(f"traces/acceptance/smollm2-{name}.parquet")
        results[name] = {
            "meta": meta,
            "measured": measured(df),
            "judgement": judge(df, fit_confidence),
            "judgement_rule2": judge(df, fit_rule2),
        }
    write_json(HERE / "results.json", results)
    report(results)


if __name__ == "__main__":
    main()

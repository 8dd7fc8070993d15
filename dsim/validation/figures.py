"""`dsim validate`'s figures from its runs: means and spread over repeats, errors of the mean,
the ranking of the policies, the ratios policy/mtp1, the accuracy targets and the error
attribution, as validation.json and comparison.json (`dsim.validation.report` writes them as
report.md).

Every function reads a tidy frame with one row per (load, seed, policy, kind) where kind is
"real" (the real run), "trace" or "preset" (its simulations), and one column per metric.

Error attribution of a simulated TPOT (first order, multiplicative, means over repeats):
    TPOT_sim / TPOT_real = (1 + passes + overhead) x (tau_real / tau_sim) x (1 + queueing)
with W the real run's step time (wall clock), M the part of it inside the model passes
(drafter draft, target forward, LM head + softmax), P the step model's prediction for the
real run's own batches (the engine-calibrated profiles, `dsim.validation.step_check`) and O the
engine overhead it charges (o per step). P / W = 1 + passes + overhead splits the step model's
error into shares of the real step time: passes = (P - O - M) / W, the model passes' error, and
overhead = (O - (W - M)) / W, the charged overhead's (with O = 0 it is minus the engine's
share of the step); tau_real / tau_sim - 1 is the acceptance replay's effect (more tokens per
round, shorter TPOT), and what is left is queueing (the simulated run forming other batches
and queues).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from dsim.validation.ranking_chance import load_chances

METRICS = ("throughput_tok_s", "tpot_p50_s", "tpot_p90_s", "ttft_p50_s", "accepted_length_mean")
LABELS = {
    "throughput_tok_s": "throughput (tok/s)",
    "tpot_p50_s": "TPOT p50 (s)",
    "tpot_p90_s": "TPOT p90 (s)",
    "ttft_p50_s": "TTFT p50 (s)",
    "accepted_length_mean": "accepted length",
}
SIM_KINDS = ("trace", "preset")
BASELINE = "mtp1"
TPOT_TOL, RATIO_TOL, TTFT_TOL = 0.10, 0.10, 0.20
TTFT_LOAD = "moderate"  # the load of the TTFT target
RANKING_ALPHA = 0.05  # two-sided level of the paired test read beside the ranking target


def stats(values: np.ndarray) -> dict[str, float]:
    """Mean and sample standard deviation (0 for one run) of one metric over repeats."""
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0}


def comparison(real: np.ndarray, sim: np.ndarray) -> dict:
    """Real vs simulated over repeats: means, spreads, runs and the error of the mean."""
    r, s = stats(real), stats(sim)
    return {
        "real": r["mean"],
        "sim": s["mean"],
        "error": (s["mean"] - r["mean"]) / r["mean"],
        "real_sd": r["sd"],
        "sim_sd": s["sd"],
        "real_runs": [float(x) for x in real],
        "sim_runs": [float(x) for x in sim],
    }


def _values(frame: pd.DataFrame, load: str, policy: str, kind: str, metric: str) -> np.ndarray:
    rows = frame[(frame.load == load) & (frame.policy == policy) & (frame.kind == kind)]
    return rows.sort_values("seed")[metric].to_numpy(np.float64)


def validation_json(frame: pd.DataFrame) -> dict:
    """`{policy: {kind: {metric: {"real", "sim", "error", ..., "loads": {load: {...}}}}}}`:
    the top-level real/sim/error pool every load's runs (the mean over all of them); the
    targets are judged per load, under "loads"."""
    loads = list(dict.fromkeys(frame["load"]))
    out: dict = {}
    for policy in dict.fromkeys(frame["policy"]):
        out[policy] = {}
        for kind in SIM_KINDS:
            out[policy][kind] = {}
            for metric in METRICS:
                pooled = [
                    np.concatenate([_values(frame, ld, policy, k, metric) for ld in loads])
                    for k in ("real", kind)
                ]
                entry = comparison(*pooled)
                entry["loads"] = {
                    ld: comparison(
                        _values(frame, ld, policy, "real", metric),
                        _values(frame, ld, policy, kind, metric),
                    )
                    for ld in loads
                }
                out[policy][kind][metric] = entry
    return out


def ranking(means: dict[str, float]) -> list[str]:
    """Policies from the lowest TPOT p50 (best) to the highest."""
    return sorted(means, key=lambda p: (means[p], p))


def ratios(means: dict[str, float]) -> dict[str, float]:
    """Each policy's TPOT p50 over mtp1's."""
    return {p: v / means[BASELINE] for p, v in means.items()}


def ranking_gaps(frame: pd.DataFrame, load: str, order: list[str]) -> list[dict]:
    """Each adjacent pair of the real ranking at `load`, faster first: the slower one's TPOT
    p50 over the faster one's, paired by seed (the policies of a seed share its arrivals and
    prompts), with the standard error of the mean paired difference and whether a two-sided
    paired t-test at RANKING_ALPHA tells the pair apart. Read beside the identical-ranking
    target, never judging it: a pair the repeats do not tell apart has no real order for a
    simulation to reproduce."""
    gaps = []
    for faster, slower in zip(order, order[1:], strict=False):
        a = _values(frame, load, faster, "real", "tpot_p50_s")
        b = _values(frame, load, slower, "real", "tpot_p50_s")
        d = b - a
        se, resolved = float("nan"), False  # one repeat: no spread, no order
        if len(d) > 1:
            se = float(d.std(ddof=1) / np.sqrt(len(d)))
            resolved = bool(d.mean() > scipy_stats.t.ppf(1 - RANKING_ALPHA / 2, len(d) - 1) * se)
        gaps.append(
            {
                "faster": faster,
                "slower": slower,
                "difference": float(d.mean() / a.mean()),
                "se": se / float(a.mean()),
                "resolved": resolved,
            }
        )
    return gaps


def ranking_chances(frame: pd.DataFrame, kind: str) -> dict[str, float | None]:
    """Per load: the chance an unbiased simulation ranks the policies as the real runs did,
    erring only by the noise the study's seeds show (`dsim.validation.ranking_chance`; the
    first policy is the reference, which the ranking does not depend on). Read beside the
    identical-ranking target, never judging it."""
    policies = list(dict.fromkeys(frame["policy"]))
    loads = list(dict.fromkeys(frame["load"]))
    tpot = {}
    for load in loads:
        sides = [
            [_values(frame, load, p, side, "tpot_p50_s") for p in policies]
            for side in ("real", kind)
        ]
        if len({len(v) for side in sides for v in side}) != 1:
            return dict.fromkeys(loads)  # not every policy and kind ran every seed: none paired
        tpot[load] = (np.array(sides[0]), np.array(sides[1]))
    return load_chances(tpot)


def comparisons(frame: pd.DataFrame, kind: str = "trace") -> dict:
    """Per load: TPOT p50 means, the ranking and the ratios policy/mtp1, real and simulated,
    and the accuracy targets (met or not) for the `kind` simulation."""
    out = {}
    chances = ranking_chances(frame, kind)
    for load in dict.fromkeys(frame["load"]):
        policies = list(dict.fromkeys(frame[frame.load == load]["policy"]))
        entry: dict = {}
        for side in ("real", kind):
            means = {p: float(_values(frame, load, p, side, "tpot_p50_s").mean()) for p in policies}
            name = "real" if side == "real" else "sim"
            entry[name] = {"tpot_p50_s": means, "ranking": ranking(means)}
            if BASELINE in means:
                entry[name]["ratios"] = ratios(means)
        entry["real"]["ranking_gaps"] = ranking_gaps(frame, load, entry["real"]["ranking"])
        entry["real"]["ranking_chance"] = chances[load]
        errors = {
            p: entry["sim"]["tpot_p50_s"][p] / entry["real"]["tpot_p50_s"][p] - 1 for p in policies
        }
        ttft = {
            p: float(
                _values(frame, load, p, kind, "ttft_p50_s").mean()
                / _values(frame, load, p, "real", "ttft_p50_s").mean()
                - 1
            )
            for p in policies
        }
        targets = {
            "tpot_p50_within_10pct": all(abs(e) <= TPOT_TOL for e in errors.values()),
            "identical_ranking": entry["real"]["ranking"] == entry["sim"]["ranking"],
        }
        if "ratios" in entry["real"]:
            ratio_errors = {
                p: entry["sim"]["ratios"][p] / entry["real"]["ratios"][p] - 1
                for p in policies
                if p != BASELINE
            }
            entry["ratio_errors"] = ratio_errors
            targets["ratios_within_10pct"] = all(abs(e) <= RATIO_TOL for e in ratio_errors.values())
        if load == TTFT_LOAD:
            targets["ttft_p50_within_20pct"] = all(abs(e) <= TTFT_TOL for e in ttft.values())
        entry.update(tpot_errors=errors, ttft_errors=ttft, targets=targets)
        out[load] = entry
    return out


def attribution(parts: pd.DataFrame) -> pd.DataFrame:
    """Per (load, policy): the TPOT error of the trace simulation split into its factors (see
    the module doc). `parts` has one row per real run: load, policy, tpot_real, tpot_sim,
    step_real_s (W), model_s (M), step_predicted_s (P), overhead_charged_s (O), steps,
    tau_real, tau_sim."""
    g = parts.groupby(["load", "policy"], sort=False).mean(numeric_only=True).reset_index()
    engine_s = g.step_real_s - g.model_s
    passes = (g.step_predicted_s - g.overhead_charged_s - g.model_s) / g.step_real_s
    overhead = (g.overhead_charged_s - engine_s) / g.step_real_s
    acceptance = g.tau_real / g.tau_sim - 1
    total = g.tpot_sim / g.tpot_real - 1
    queueing = (1 + total) / ((1 + passes + overhead) * (1 + acceptance)) - 1
    return pd.DataFrame(
        {
            "load": g.load,
            "policy": g.policy,
            "tpot_error": total,
            "passes": passes,
            "engine_overhead": overhead,
            "acceptance": acceptance,
            "queueing": queueing,
            "overhead_ms_per_step": 1e3 * engine_s / g.steps,
            "charged_ms_per_step": 1e3 * g.overhead_charged_s / g.steps,
        }
    )

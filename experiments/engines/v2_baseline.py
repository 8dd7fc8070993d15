"""Engine v2's baseline: the shipped v1 presets and the GPU work alone on every evaluation row
of docs/engine-v2-rules.md, read as that rule says (writes v2_baseline.md beside this file).

    PYTHONPATH=. .venv/bin/python experiments/engines/v2_baseline.py     # seconds

Plain rows are one decode step at the row's batch and context, read as `engine_fit` reads the
fitted rows (report.py); speculative rows are the ratio reading of `round_fit` (spec_report.py):
the measured round is (AL / S) x the modelled plain step. Nothing is refitted.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.fileio import write_with
from dsim.hardware import engine_fit, gpu_fit, round_fit, zoo
from dsim.hardware.engines import get_engine
from dsim.hardware.gpu_model import SpecRound, StepOverhead
from dsim.hardware.round_fit import SpecRow
from experiments.engines.report import pct
from experiments.engines.spec_report import header

DIR = Path(__file__).resolve().parent
ROOT = DIR.parent.parent
EVAL = "data/engines/evaluation_rows.csv"
GPU_ONLY = get_engine("gpu-only").terms
LLAMA8B = "llama3-8b"  # Llama-3.1-8B has Llama-3-8B's architecture (the zoo has no 3.1 entry)
LLAMA70B = "llama3.3-70b"  # Llama-3.1-70B and Llama-3.3-70B share one architecture
E0_TOK_S = 158.34  # E0, the plain run E3-E7 are read against


@dataclass(frozen=True)
class Plain:
    """A plain row as read here: where it is, its preset, its step reading and noise."""

    name: str
    setup: str
    preset: str
    measured_s: float
    metric: str
    seqs: float
    context: float
    noise: float
    model: str
    gpu: str
    tp: int
    dtype: str
    in_summary: bool
    flag: str = ""


def eval_rows() -> list[dict]:
    path = Path(str(resources.files("dsim.hardware").joinpath(EVAL)))
    with path.open() as f:
        return list(csv.DictReader(f))


def notes_number(row: dict, label: str) -> float:
    """A number the row's notes give after `label` (e.g. 'mean output tokens/request = ')."""
    return float(re.search(re.escape(label) + r"([0-9.]+)", row["notes"]).group(1))


def p_rows() -> list[Plain]:
    """P0-P17 (plain): the v1 reading of `engine_fit.fit_rows`, plus P3 and P7 (the long-input
    rows v1 leaves out), read the same way: median ITL at R = output tok/s x mean ITL."""
    fitted = engine_fit.fit_rows().set_index("row")
    raw = engine_fit.raw_rows()
    out = []
    for i in range(18):
        r = raw.iloc[i]
        key = "deepseek" if "DeepSeek" in r["model"] else ("nim" if r["tp"] == 2 else "pr")
        model, gpu, tp, dtype = engine_fit.SETUPS[key]
        setup = f"{r['engine'].split(' ')[0]} {model} {tp}x{gpu}"
        preset = "trtllm" if key == "nim" else r["engine"].lower()
        noise = 0.10 if key == "pr" else 0.05  # P17: TPOT = 1 / tok/s, batch inferred
        if i in fitted.index:
            f = fitted.loc[i]
            out.append(
                Plain(
                    f"P{i}",
                    setup,
                    preset,
                    f["measured_s"],
                    f["metric"],
                    f["seqs"],
                    f["context"],
                    noise,
                    model,
                    gpu,
                    tp,
                    dtype,
                    True,
                )
            )
            continue
        mean = float(re.search(r"mean ITL ([0-9.]+) ms", r["notes"]).group(1)) / 1e3
        flag = "long input (v1's long-input rule: a prefill-carrying gap, not a step)"
        out.append(
            Plain(
                f"P{i}",
                setup,
                preset,
                r["median_itl_ms"] / 1e3,
                "median ITL",
                r["output_tok_s"] * mean,
                r["input_len"] + r["output_len"] / 2,
                noise,
                model,
                gpu,
                tp,
                dtype,
                False,
                flag,
            )
        )
    return out


def e_rows(ev: list[dict]) -> list[Plain]:
    """E0 and the 70B TP 4 H200 series E130-E138 (E133-E134 overload: computed, flagged)."""
    mtb = float(engine_fit.MTBENCH_CONTEXT)
    out = [
        Plain(
            "E0",
            "SGLang llama3-8b 1xh100",
            "sglang",
            1 / float(ev[0]["output_tok_s"]),
            "TPOT = 1 / tok/s (batch assumed 1)",
            1.0,
            mtb,
            0.10,
            LLAMA8B,
            "h100",
            1,
            "bf16",
            True,
            "evaluation only; batch, lengths, dtype not stated",
        )
    ]
    for i in range(130, 139):
        r = ev[i]
        itl = float(r["median_itl_ms"]) / 1e3
        overload = i in (133, 134)
        if i <= 134:  # random 1024/1024, uniform lengths: mean input 512
            out_len = notes_number(r, "mean output tokens/request = ")
            seqs, context = float(r["output_tok_s"]) * itl, 512 + out_len / 2
        elif i <= 136:  # ShareGPT: output from the notes, input not stated
            seqs, context = float(r["output_tok_s"]) * itl, mtb
        else:  # no tok/s: rate x E135/E136's mean output x median TPOT
            out_len = notes_number(ev[i - 2], "mean output tokens/request = ")
            seqs = float(r["request_rate"]) * out_len * float(r["median_tpot_ms"]) / 1e3
            context = mtb
        flag = "overload: excluded (rule's exclusion 1)" if overload else ""
        if i >= 137:
            flag = (
                "Llama-3.1-70B; R from E135/E136's output lengths (same rates, probably ShareGPT)"
            )
        out.append(
            Plain(
                f"E{i}",
                f"SGLang {LLAMA70B} 4xh200",
                "sglang",
                itl,
                "median ITL",
                seqs,
                context,
                0.10,
                LLAMA70B,
                "h200",
                4,
                "bf16",
                not overload,
                flag,
            )
        )
    return out


def plain_table(rows: list[Plain]) -> pd.DataFrame:
    """GPU work, the row's v1 preset and the v1 leave-one-source-out error of each plain row."""
    loso = {f"P{r['row']}": r["error"] for r in engine_fit.loso()["rows"]}
    out = []
    for p in rows:
        gpu = engine_fit._gpu_work(p.model, p.gpu, p.tp, p.dtype, p.seqs, p.seqs, p.context, False)
        prefill = 0.0
        if p.preset == "trtllm":  # NIM's mean TPOT carries the other requests' prefills
            prefill = float(
                engine_fit.fit_rows().set_index("row").loc[int(p.name[1:]), "prefill_s"]
            )
        arch = zoo.load_arch(p.model)
        frame = pd.DataFrame(
            {
                "gpu_s": [gpu],
                "prefill_s": [prefill],
                "seqs": [p.seqs],
                "moe_layers": [arch.moe_layers],
            }
        )
        v1 = float(engine_fit.predict(frame, get_engine(p.preset).terms)[0])
        out.append(
            vars(p)
            | {
                "gpu_s": gpu + prefill,
                "prefill_s": prefill,
                "v1_s": v1,
                "gpu_err": (gpu + prefill) / p.measured_s - 1,
                "v1_err": v1 / p.measured_s - 1,
                "loso_err": loso.get(p.name, np.nan),
            }
        )
    return pd.DataFrame(out)


def eagle_arch(model: str):
    """An EAGLE-1/-2 drafter pass: one decoder layer of the target and the target's full head
    (EAGLE-3's 32k head is `round_fit.drafter_arch`)."""
    arch = zoo.load_arch(model)
    return replace(arch, name=arch.name + "-eagle", layers=1)


@dataclass(frozen=True)
class Spec:
    """A speculative row: its `SpecRow`, drafter shape, preset, noise and how it is read."""

    name: str
    row: SpecRow
    drafter: object
    preset: str
    noise: float
    reading: str  # "ratio" (AL / S x plain), "absolute" (TPOT x AL), "implied" (no AL)
    flag: str = ""


def spec_rows(ev: list[dict]) -> list[Spec]:
    """P18-P20 as `round_fit.spec_rows`; E3-E7 against E0; E126 (K unstated); E8-E9 (no AL)."""
    out = [
        Spec(
            f"P{r.row}",
            r,
            round_fit.drafter_arch(r),
            "sglang",
            0.05,
            "ratio",
            "tree (64 verify tokens)" if r.row == 18 else "DP-attention/EP run priced as TP 8",
        )
        for r in round_fit.spec_rows()
    ]
    for i in (3, 4, 5, 6, 7):
        r = ev[i]
        steps = int(re.search(r"num_spec_tokens: (\d+) steps", r["notes"]).group(1))
        eagle3 = r["spec_method"] == "EAGLE-3"
        row = SpecRow(
            i,
            f"SGLang {r['spec_method']} {steps} steps, 8B, 1x H100",
            LLAMA8B,
            "h100",
            1,
            "bf16",
            1,
            float(engine_fit.MTBENCH_CONTEXT),
            steps + 1,
            steps,
            1,
            float(r["mean_accept_len"]),
            float(r["output_tok_s"]) / E0_TOK_S,
        )
        drafter = round_fit.drafter_arch(row) if eagle3 else eagle_arch(LLAMA8B)
        flag = "chain assumed, batch 1 assumed; against E0"
        if i >= 6:
            flag = "graphs off: evaluation only (v1 has no no-graph path)"
        out.append(Spec(f"E{i}", row, drafter, "sglang", 0.10, "ratio", flag))
    r = ev[126]
    seqs = float(r["output_tok_s"]) * float(r["mean_tpot_ms"]) / 1e3
    context = 9568 / 100 + 21269 / 100 / 2
    for k in (1, 3, 5):
        row = SpecRow(
            126,
            f"vLLM EAGLE, 8B, 1x H100, AL 1, K={k}",
            LLAMA8B,
            "h100",
            1,
            "bf16",
            seqs,
            context,
            1 + k,
            k,
            1,
            1.0,
            float("nan"),
        )
        out.append(
            Spec(
                f"E126 K={k}",
                row,
                eagle_arch(LLAMA8B),
                "vllm",
                0.05,
                "absolute",
                "K not stated: K = 1, 3, 5 shown",
            )
        )
    for i, batch in ((8, 1), (9, 32)):
        row = SpecRow(
            i,
            f"SGLang DeepSeek-V3 MTP, 8x H200, batch {batch}",
            "deepseek-v3",
            "h200",
            8,
            "fp8",
            batch,
            float(engine_fit.MTBENCH_CONTEXT),
            2,
            1,
            1,
            float("nan"),
            float(ev[i]["speedup"]),
        )
        out.append(
            Spec(
                f"E{i}",
                row,
                round_fit.drafter_arch(row),
                "sglang",
                0.10,
                "implied",
                "no AL: the AL v1 needs for the published S (1 step, 2 draft tokens: "
                "the page's usage example; AL <= 2)",
            )
        )
    return out


def round_parts(s: Spec, terms: StepOverhead) -> dict:
    """The modelled plain step, verify pass and drafter passes, as `round_fit.round_table`."""
    arch = zoo.load_arch(s.row.model)
    tokens = s.row.seqs * s.row.pass_per_seq
    return {
        "plain_s": round_fit._seconds(arch, s.row, s.row.seqs, terms),
        "verify_s": round_fit._seconds(arch, s.row, s.row.seqs * s.row.verify_per_seq, terms),
        "draft_s": s.row.passes * round_fit._seconds(s.drafter, s.row, tokens, terms),
        "passes": s.row.passes,
        "accept_len": s.row.accept_len,
    }


def spec_eval(s: Spec, terms: StepOverhead, rnd: SpecRound, tpot_s: float) -> dict:
    """Speed-up and round (TPOT x AL) predicted and measured under `terms` and `rnd`."""
    parts = round_parts(s, terms)
    frame = pd.DataFrame([parts])
    pred_round = parts["verify_s"] + parts["draft_s"] + rnd.seconds(s.row.passes)
    if s.reading == "absolute":
        meas_round = tpot_s * s.row.accept_len
        return parts | {
            "meas_round_s": meas_round,
            "pred_round_s": pred_round,
            "round_err": pred_round / meas_round - 1,
        }
    if s.reading == "implied":
        return parts | {
            "pred_round_s": pred_round,
            "implied_al": s.row.speedup * pred_round / parts["plain_s"],
        }
    pred_s = float(round_fit.predict_speedup(frame, rnd)[0])
    meas_round = s.row.accept_len / s.row.speedup * parts["plain_s"]
    return parts | {
        "meas_round_s": meas_round,
        "pred_round_s": pred_round,
        "pred_speedup": pred_s,
        "speedup_err": pred_s / s.row.speedup - 1,
        "round_err": pred_round / meas_round - 1,
    }


def spec_table(specs: list[Spec], ev: list[dict]) -> list[dict]:
    loo = {f"P{r['row']}": r["error"] for r in round_fit.leave_one_out()["rows"]}
    tpot = float(ev[126]["mean_tpot_ms"]) / 1e3
    out = []
    for s in specs:
        eng = get_engine(s.preset)
        out.append(
            {
                "spec": s,
                "loo": loo.get(s.name, np.nan),
                "gpu": spec_eval(s, GPU_ONLY, SpecRound(), tpot),
                "v1": spec_eval(s, eng.terms, eng.spec_round, tpot),
            }
        )
    return out


def perr(x: float) -> str:
    return "-" if np.isnan(x) else pct(x)


def run_facts() -> list[str]:
    """Command, machine, date, load and commit of this run."""
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if "Model name" in ln), "?"
    )
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    state = " plus uncommitted files (this script and its report)" if dirty.strip() else ""
    return [
        "Command: `PYTHONPATH=. .venv/bin/python experiments/engines/v2_baseline.py` from the"
        f" repository root. Machine: {model} (`lscpu`). Run {when}, load average {load}.",
        f"Commit: {commit.stdout.strip()}{state}. Deterministic: no figure depends on the load.",
        "",
    ]


def plain_lines(table: pd.DataFrame) -> list[str]:
    out = ["## Plain rows: one decode step (TPOT/ITL)", ""]
    out += ["Error = predicted / measured - 1. `v1` is the row's engine preset as shipped (in"]
    out += ["sample for the P rows it was fitted on); `v1 LOSO` the v1 fit's leave-one-source-out"]
    out += ["error (`engine_fit.loso`, as report.py prints it). NIM's GPU work includes the other"]
    out += ["requests' prefills (v1 rule). R: decode batch, C: mean context. Noise (the rule's"]
    out += ["5% / 10%): 5% where the step and the batch are the source's own measurements (the"]
    out += ["client's concurrency, NIM's closed loop); 10% where the step or the batch is derived"]
    out += [
        "(TPOT = 1 / tok/s with the batch inferred, Little's-law concurrency, borrowed lengths)."
    ]
    out += ["Context where lengths are not stated: 1000 (v1's MT-Bench convention).", ""]
    out += header(
        "row",
        "setup",
        "preset",
        "reading",
        "R",
        "C",
        "measured ms",
        "noise",
        "GPU-only ms (err)",
        "v1 ms (err)",
        "v1 LOSO",
        "flag",
    )
    for _, r in table.iterrows():
        out.append(
            f"| {r['name']} | {r['setup']} | {r['preset']} | {r['metric']} | {r['seqs']:.1f} | "
            f"{r['context']:.0f} | {r['measured_s'] * 1e3:.2f} | {r['noise']:.0%} | "
            f"{r['gpu_s'] * 1e3:.2f} ({pct(r['gpu_err'])}) | {r['v1_s'] * 1e3:.2f} "
            f"({pct(r['v1_err'])}) | {perr(r['loso_err'])} | {r['flag']} |"
        )
    return out + [""]


def summary_lines(table: pd.DataFrame, spec: list[dict]) -> list[str]:
    out = ["## Summary: what the rule's targets are judged against", ""]
    out += header(
        "plain rows",
        "n",
        "v1 median abs",
        "v1 worst",
        "GPU-only median abs",
        "GPU-only worst",
        "within noise (v1)",
    )
    sets = {
        "in scope (rule's table, P3/P7 out)": table[table["in_summary"]],
        "rule's table as written (with P3, P7)": table[
            table["in_summary"] | table["name"].isin(["P3", "P7"])
        ],
        "P rows v1 fitted (16)": table[~table["loso_err"].isna()],
        "E rows in scope (8)": table[table["in_summary"] & table["name"].str.startswith("E")],
    }
    for label, part in sets.items():
        v, g = (
            gpu_fit.error_summary(part["v1_err"].to_numpy()),
            gpu_fit.error_summary(part["gpu_err"].to_numpy()),
        )
        within = int((part["v1_err"].abs() <= part["noise"]).sum())
        out.append(
            f"| {label} | {v['n']} | {v['median_abs_error']:.1%} | {v['max_abs_error']:.1%} | "
            f"{g['median_abs_error']:.1%} | {g['max_abs_error']:.1%} | {within} |"
        )
    fitted = table[~table["loso_err"].isna()]["loso_err"].to_numpy()
    lo = gpu_fit.error_summary(fitted)
    out += ["", "v1 leave-one-source-out over the 16 P rows it fitted: median |error| "]
    out[-1] += f"{lo['median_abs_error']:.1%}, worst {lo['max_abs_error']:.1%}."
    worst = table[table["in_summary"]].iloc[table[table["in_summary"]]["v1_err"].abs().argmax()]
    out[-1] += f" Worst in-scope v1 row: {worst['name']} ({pct(worst['v1_err'])})."
    out += ["", "The rule's plain table lists P0-P3 and P4-P7, but its exclusions do not name v1's"]
    out += ["long-input rule, under which P3 and P7 (30000/100) are prefill-carrying gaps, not"]
    out += [
        "steps: the first line leaves them out, the second keeps them (for the lead to settle)."
    ]
    out += ["E133-E134 (overload, exclusion 1) are in neither."]
    out += ["", "Speculative rows (speed-up error; the rows the rule's 12% target reads):", ""]
    out += header("row", "v1 speed-up err", "v1 LOO err", "GPU-only speed-up err", "noise")
    for e in spec:
        s = e["spec"]
        if s.reading == "ratio":
            out.append(
                f"| {s.name} | {pct(e['v1']['speedup_err'])} | {perr(e['loo'])} | "
                f"{pct(e['gpu']['speedup_err'])} | {s.noise:.0%} |"
            )
        elif s.reading == "absolute":
            out.append(
                f"| {s.name} (round = TPOT, AL 1) | {pct(e['v1']['round_err'])} (TPOT) | - | "
                f"{pct(e['gpu']['round_err'])} (TPOT) | {s.noise:.0%} |"
            )
    return out + [""]


def spec_lines(spec: list[dict]) -> list[str]:
    out = ["## Speculative rows: the round (ratio reading)", ""]
    out += ["Measured round = (AL / S) x the modelled plain step (the same preset); predicted ="]
    out += ["verify pass + drafter passes (v1: K passes, each over R tokens) + per_round +"]
    out += ["per_pass x passes; predicted S = AL x plain / round. E126 has no plain run: its"]
    out += ["round is its TPOT x AL (AL 1). E8-E9 have no AL: the AL the model needs is shown.", ""]
    out += header(
        "row",
        "setup",
        "preset",
        "AL",
        "S",
        "noise",
        "v1 plain / measured round ms",
        "v1 round ms",
        "v1 S (err)",
        "v1 round err",
        "GPU-only S (err)",
        "v1 LOO",
        "flag",
    )
    for e in spec:
        s, v, g = e["spec"], e["v1"], e["gpu"]
        if s.reading == "implied":
            out.append(
                f"| {s.name} | {s.row.label} | {s.preset} | needs {v['implied_al']:.2f} (GPU-only "
                f"{g['implied_al']:.2f}) | {s.row.speedup:.2f} | {s.noise:.0%} | "
                f"{v['plain_s'] * 1e3:.2f} / - | {v['pred_round_s'] * 1e3:.2f} | - | - | - | - | "
                f"{s.flag} |"
            )
            continue
        sp = "-" if s.reading == "absolute" else f"{s.row.speedup:.3f}"
        v_s = (
            "-" if s.reading == "absolute" else f"{v['pred_speedup']:.3f} ({pct(v['speedup_err'])})"
        )
        g_s = (
            "-" if s.reading == "absolute" else f"{g['pred_speedup']:.3f} ({pct(g['speedup_err'])})"
        )
        if s.reading == "absolute":
            g_s = f"round {g['pred_round_s'] * 1e3:.2f} ms ({pct(g['round_err'])})"
        out.append(
            f"| {s.name} | {s.row.label} | {s.preset} | {s.row.accept_len:.2f} | {sp} | "
            f"{s.noise:.0%} | {v['plain_s'] * 1e3:.2f} / {v['meas_round_s'] * 1e3:.2f} | "
            f"{v['pred_round_s'] * 1e3:.2f} | {v_s} | {pct(v['round_err'])} | {g_s} | "
            f"{perr(e['loo'])} | {s.flag} |"
        )
    check = round_fit.round_table().set_index("row")
    same = all(
        np.isclose(
            e["v1"]["meas_round_s"],
            check.loc[e["spec"].row.row, "measured_round_s"],
            rtol=1e-12,
            atol=0,
        )
        for e in spec
        if e["spec"].name in ("P18", "P19", "P20")
    )
    out += ["", f"P18-P20 under `sglang` reproduce `round_fit.round_table()`: {same}.", ""]
    return out


def spec_residual_lines(spec: list[dict]) -> list[str]:
    """E126, Llama-3.1-8B's one absolute speculative row: GPU work alone against its round."""
    cells = [
        f"K={e['spec'].row.passes} {e['gpu']['pred_round_s'] * 1e3:.2f} ms "
        f"({pct(-e['gpu']['round_err'])})"
        for e in spec
        if e["spec"].reading == "absolute"
    ]
    out = ["", "Llama-3.1-8B speculative, E126 (AL 1, 12.47 ms round, vLLM): GPU work of the"]
    out += ["round alone (verify + K drafter passes), residual in brackets: " + ", ".join(cells)]
    return [*out[:-1], out[-1] + ".", ""]


def residual_lines(table: pd.DataFrame) -> list[str]:
    """GPU work alone against the measured step, per model and setup (in-scope steps only)."""
    out = ["## GPU-only residual per model (before any engine term)", ""]
    out += ["Residual = (measured - GPU work) / measured: the share an engine's terms must carry;"]
    out += ["negative where GPU work alone already exceeds the measured step. Llama-3.1-8B is"]
    out += ["priced as the zoo's `llama3-8b` (the same architecture); Llama-3.1-70B as"]
    out += ["`llama3.3-70b`. DeepSeek-R1 as `deepseek-v3` (its architecture), fp8, experts"]
    out += ["TP-sharded, as the v1 rules model it.", ""]
    out += header("model", "GPUs, TP, dtype", "rows", "residual median", "range", "ms median")
    steps = table[table["in_summary"]]
    for (model, gpu, tp, dtype), part in steps.groupby(["model", "gpu", "tp", "dtype"], sort=False):
        res = 1 - part["gpu_s"] / part["measured_s"]
        ms = (part["measured_s"] - part["gpu_s"]) * 1e3
        out.append(
            f"| {model} | {tp}x {gpu}, TP {tp}, {dtype} | {', '.join(part['name'])} | "
            f"{pct(res.median())} | {pct(res.min())} .. {pct(res.max())} | {ms.median():.2f} |"
        )
    return out


NOT_PRICED = (  # (rows, why dsim cannot price them today, or why the rule does not compute them)
    (
        "E1-E2",
        "SGLang docs EAGLE-2/-3 speed-ups: no accepted length, draft settings not stated "
        "(tree or chain unknown); the ratio reading needs AL (rule: evaluation only)",
    ),
    (
        "E123",
        "vLLM plain baseline of E124-E125: published in requests/s of an offline max-load "
        "run; no TPOT/ITL, batch or lengths, so no step to price",
    ),
    (
        "E124-E125",
        "vLLM n-gram K=3 speed-ups: no accepted length and no batch (offline max load); "
        "the rule assigns them to vLLM's per_round, which needs an AL and batch assumption first",
    ),
    (
        "E75-E77",
        "DeepSeek-V3 on 16 / 128 H200 with DP attention and EP over nodes: a deployment "
        "dsim does not price (rule's exclusion 2; E75/E76 are an overlap-share check, not a step)",
    ),
    ("E127-E129", "GPU not stated (context)"),
    (
        "E10-E45, E50-E74, E143-E147",
        "B200, GB200, GB10: GPUs dsim lacks (dsim: a100, h100, h200); context (engine v2 part 2)",
    ),
    ("E46-E49", "vLLM V0 (context)"),
    ("E139-E142", "vLLM nightly pages of unknown version (context)"),
    ("E78-E122", "acceptance only, no timing (context for the adaptive-verification issue)"),
)


def not_priced_lines(ev: list[dict]) -> list[str]:
    """The rows not computed, and a check that every context-tagged row is among them."""
    covered: set[int] = set()
    for rows, _ in NOT_PRICED:
        for part in rows.split(", "):
            lo, _, hi = part[1:].partition("-")
            covered |= set(range(int(lo), int(hi.lstrip("E") or lo) + 1))
    tagged = {i for i, r in enumerate(ev) if re.match(r"\[scope:(context|acceptance)", r["notes"])}
    missing = sorted(tagged - covered)
    out = ["## Rows not computed, and why", ""]
    out += header("rows", "why")
    out += [f"| {rows} | {why} |" for rows, why in NOT_PRICED]
    out += ["", "Every row whose `[scope:...]` tag says context or acceptance-only is listed: "]
    out[-1] += "yes." if not missing else f"no, missing {missing}."
    return out + [""]


def main() -> None:
    ev = eval_rows()
    table = plain_table(p_rows() + e_rows(ev))
    spec = spec_table(spec_rows(ev), ev)
    lines = ["# Engine v2 baseline: v1 presets and GPU work alone on the rule's rows", ""]
    lines += ["Made by `experiments/engines/v2_baseline.py` under `docs/engine-v2-rules.md`"]
    lines += ["(committed before any engine-v2 fit). No preset is refitted; the product is"]
    lines += ["unchanged. P<i>: row i of `published_benchmarks.csv`; E<i>: row i of"]
    lines += ["`evaluation_rows.csv` (0-based).", ""]
    lines += run_facts()
    lines += summary_lines(table, spec) + residual_lines(table) + spec_residual_lines(spec)
    lines += plain_lines(table) + spec_lines(spec) + not_priced_lines(ev)
    text = "\n".join(lines)
    write_with(DIR / "v2_baseline.md", lambda tmp: Path(tmp).write_text(text))
    print(text)


if __name__ == "__main__":
    main()

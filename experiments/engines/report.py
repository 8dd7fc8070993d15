"""The engine fit's report: terms, leave-one-source-out error per fold and setup, each row, and
the priors' brackets on the shipped default estimate (writes fit.md beside this file).

    .venv/bin/python experiments/engines/report.py
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dsim.fileio import write_with
from dsim.hardware import engine_fit, gpu_fit, zoo
from dsim.hardware.arch import Parallel
from dsim.hardware.engine_fit import FITTED as FITTED_PRESETS
from dsim.hardware.engines import get_engine
from dsim.hardware.gpu_model import GPUS, StepOverhead, sampled_tokens, step_parts

DIR = Path(__file__).resolve().parent
POINTS = (  # (label, tokens, sequences, context)
    ("decode R=1", 1, 1, 2048),
    ("decode R=32", 32, 32, 2048),
    ("verify B=128 R=32", 128, 32, 2048),
    ("verify B=2048 R=512", 2048, 512, 2048),
)
TARGETS = (("Qwen3-8B, 1x H200", "qwen3-8b", 1, 1, "bf16"),
           ("Qwen3-30B-A3B, 1x H200", "qwen3-30b-a3b", 1, 1, "bf16"),
           ("DeepSeek-V3 fp8, 8x H200 TP/EP 8", "deepseek-v3", 8, 8, "fp8"))  # fmt: skip


def pct(x: float) -> str:
    return f"{x:+.1%}"


def step_ms(model: str, tp: int, ep: int, dtype: str, terms: StepOverhead) -> list[float]:
    arch, spec = zoo.load_arch(model), GPUS["h200"]
    cal = gpu_fit.calibration(spec)
    n, r, c = (np.array([p[i] for p in POINTS], np.float64) for i in (1, 2, 3))
    pre = np.zeros(len(POINTS), bool)
    par = Parallel(tp=tp, ep=ep, dtype=dtype)
    parts = step_parts(arch, par, spec, cal.kernels, cal.allreduce, n, r, c, pre)
    total = sum(parts.values()) + terms.seconds(arch, r, sampled_tokens(n, r, pre))
    return [float(v) * 1e3 for v in total]


def brackets(name: str) -> list[tuple[str, StepOverhead]]:
    """The preset and each prior moved to the end of its range (docs/engine-fit-rules.md)."""
    t = get_engine(name).terms
    rows = engine_fit.fit_rows()
    out = [("fitted", t)]
    if name == "vllm":
        deepseek = rows[rows["preset"] == "vllm"]["moe_layers"].iloc[0]
        fixed = t.per_step_s + t.per_moe_layer_s * deepseek
        out.append(("per_step = all of DeepSeek's fixed cost", replace(t, per_step_s=fixed)))
    if name == "trtllm":
        vllm = get_engine("vllm").terms.per_moe_layer_s
        out.append(("per_moe_layer = 0", replace(t, per_moe_layer_s=0.0)))
        out.append(("per_moe_layer = vLLM's", replace(t, per_moe_layer_s=vllm)))
    if t.per_step_s > 0:
        per_layer = t.per_step_s / 80  # every dense row has 80 layers
        out.append(("per_step as per_layer", replace(t, per_step_s=0.0, per_layer_s=per_layer)))
    if t.per_seq_s > 0:
        out.append(("slope per sampled token", replace(t, per_seq_s=0.0, per_token_s=t.per_seq_s)))
    if t.per_moe_layer_s > 0 and name != "trtllm":
        out.append(("per_moe_layer = 0", replace(t, per_moe_layer_s=0.0)))
    return out


def main() -> None:
    res = engine_fit.loso()
    lines = ["# Engine fit: terms, leave-one-source-out error, brackets", ""]
    lines += ["Made by `experiments/engines/report.py` from `dsim/hardware/engine_fit.py` under"]
    lines += ["the rules in `docs/engine-fit-rules.md` (committed before this fit)."]
    lines += ["Errors are predicted / measured - 1 of the row's TPOT or ITL.", ""]
    lines += ["## Terms (fitted on every row)", ""]
    lines += [
        "| preset | per_step ms | per_moe_layer ms | per_seq ms | per_layer ms | per_token ms |"
    ]
    lines += ["| --- | --- | --- | --- | --- | --- |"]
    for name in (*FITTED_PRESETS, "vllm-2023"):
        t = get_engine(name).terms
        vals = (t.per_step_s, t.per_moe_layer_s, t.per_seq_s, t.per_layer_s, t.per_token_s)
        lines.append(f"| {name} | " + " | ".join(f"{v * 1e3:.4f}" for v in vals) + " |")
    lines += ["", "## Leave one source out, per fold", ""]
    lines += ["| fold | n | median abs err | worst | mean signed | predicted from |"]
    lines += ["| --- | --- | --- | --- | --- | --- |"]
    for fold, f in res["folds"].items():
        if f["n"] == 0:
            lines.append(f"| {fold} | 0 | - | - | - | {f['note']} |")
            continue
        lines.append(
            f"| {fold} | {f['n']} | {f['median_abs_error']:.1%} | {f['max_abs_error']:.1%} | "
            f"{pct(f['mean_signed_error'])} | {f['predicted_from']} |"
        )
    lines += ["", "## Leave one source out, per setup (target: median |error| < 15%)", ""]
    lines += ["| setup | n | median abs err | worst | mean signed | GPU work only: median abs, "]
    lines[-1] += "mean signed | target |"
    lines += ["| --- | --- | --- | --- | --- | --- | --- |"]
    for setup, s in res["setups"].items():
        g = s["gpu_only"]
        met = "met" if s["median_abs_error"] < 0.15 else "**missed**"
        lines.append(
            f"| {setup} | {s['n']} | {s['median_abs_error']:.1%} | {s['max_abs_error']:.1%} | "
            f"{pct(s['mean_signed_error'])} | {g['median_abs_error']:.1%}, "
            f"{pct(g['mean_signed_error'])} | {met} |"
        )
    a = res["all"]
    lines += [
        "",
        f"All {a['n']} held-out predictions: median |error| {a['median_abs_error']:.1%}, ",
    ]
    lines[-1] += f"worst {a['max_abs_error']:.1%}."
    lines += ["", "## Each row (held out)", ""]
    lines += ["| row | setup | metric | R | C | measured ms | GPU work ms | prefill share ms | "]
    lines[-1] += "predicted ms | error |"
    lines += ["| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(res["rows"], key=lambda r: r["row"]):
        lines.append(
            f"| {r['row']} | {r['setup']} | {r['metric']} | {r['seqs']:.1f} | {r['context']:.0f} "
            f"| {r['measured_s'] * 1e3:.2f} | {r['gpu_s'] * 1e3:.2f} | {r['prefill_s'] * 1e3:.2f} "
            f"| {r['predicted_s'] * 1e3:.2f} | {pct(r['error'])} |"
        )
    lines += ["", "## Priors' brackets on shipped estimates (step ms at context 2048)", ""]
    head = " | ".join(p[0] for p in POINTS)
    lines += [f"| target | preset | terms | {head} |", "| --- | --- | --- |" + " --- |" * 4]
    for label, model, tp, ep, dtype in TARGETS:
        for name in FITTED_PRESETS:
            for what, terms in brackets(name):
                ms = step_ms(model, tp, ep, dtype, terms)
                cells = " | ".join(f"{v:.2f}" for v in ms)
                lines.append(f"| {label} | {name} | {what} | {cells} |")
        for name in ("vllm-2023", "gpu-only"):
            ms = step_ms(model, tp, ep, dtype, get_engine(name).terms)
            cells = " | ".join(f"{v:.2f}" for v in ms)
            lines.append(f"| {label} | {name} | fitted | {cells} |")
    write_with(DIR / "fit.md", lambda p: p.write_text("\n".join(lines) + "\n"))


if __name__ == "__main__":
    main()

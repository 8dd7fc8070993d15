"""Write the per-engine sweep TOMLs of production_v2's brackets (README.md, "Brackets over
engines: rule") from one template, into engines/.

Per model and engine: MODEL-ENGINE.toml (mtp1, fixed:1..5, dspark on DSpark's drafter cost,
baseline best-fixed) and MODEL-ENGINE-mtp1.toml (MTP-1 on its own drafter cost); on the engines
whose ragged verify penalty is not 0 by default, MODEL-ENGINE-ragged0.toml and
MODEL-ENGINE-ragged2x.toml (dspark alone at penalty 0 and twice the default). Anchors come
from engines/anchors-MODEL-ENGINE.json once anchors.py has computed them (empty before).

Run: .venv/bin/python experiments/production_v2/brackets.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_with  # noqa: E402

OUT = HERE / "engines"

WINDOW = "0:120"  # of the rate-scaled timeline, replayed past the trace's end
LOADS = [1, 2, 4, 8, 16, 32, 48]
SEEDS = [0, 1, 2]
FIXED = [f"fixed:{k}" for k in range(1, 6)]
DEFAULT_RAGGED = 0.1905  # dsim/hardware/engines.py RAGGED_PRIOR: vllm's, borrowed by sglang
RAGGED = {"ragged0": 0.0, "ragged2x": 2 * DEFAULT_RAGGED}


@dataclass(frozen=True)
class Model:
    name: str
    what: str
    profile: str  # with {engine} where the engine's infix goes
    kv_tokens: int
    disagg: str
    mtp1_ratio: str  # one layer of the target, rounded up to 0.01


MODELS = (
    Model(
        "dense8b",
        "dense 8B (Qwen3-8B, bf16) on one H200 per replica",
        "profiles/h200-qwen3-8b-{engine}roofline.csv",
        750000,
        "12:1",
        "ratio:0.03",
    ),
    Model(
        "moe",
        "MoE (DeepSeek-V3, fp8, TP/EP 8 on eight H200s) per replica",
        "profiles/h200x8-deepseek-v3-fp8-{engine}roofline.csv",
        610000,
        "4:1",
        "ratio:0.02",
    ),
)
# engine -> (file infix of its profile, whether its default ragged penalty is non-zero)
ENGINES = {
    "vllm": ("", True),
    "gpuonly": ("gpuonly-", False),
    "sglang": ("sglang-", True),
    "vllm2023": ("vllm2023-", False),
}

TEMPLATE = '''description = """{description}"""
policies = {policies}
baseline = "{baseline}"
seeds = {seeds}

[run]
trace = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
window = "{window}"  # of the rate-scaled timeline (docs/pareto.md)
window_wrap = true  # the higher loads read past the trace: replay it
acceptance = "mix:preset:dspark:chat=0.7,preset:dspark:code=0.2,preset:dspark:math=0.1"
gamma = 5
profile = "{profile}"
draft_cost = "{draft_cost}"
max_seqs = 1024
kv_tokens = {kv_tokens}
disagg = "{disagg}"
router = "least-loaded"
kv_link_gbps = 400.0{extra}

[load]
rate_scale = {loads}

[sla]
anchors = {anchors}
'''


def anchors(stem: str) -> list[float]:
    """The anchors anchors.py computed for this model and engine ([] before it has run)."""
    path = OUT / f"anchors-{stem}.json"
    return json.loads(path.read_text())["anchors"] if path.is_file() else []


def configs(model: Model, engine: str) -> dict[str, str]:
    """File name -> TOML text for one model on one engine."""
    infix, ragged = ENGINES[engine]
    stem = f"{model.name}-{engine}"
    common = dict(
        seeds=json.dumps(SEEDS),
        window=WINDOW,
        profile=model.profile.format(engine=infix),
        kv_tokens=model.kv_tokens,
        disagg=model.disagg,
        loads=json.dumps(LOADS),
        anchors=json.dumps(anchors(stem)),
    )
    where = f"production_v2 brackets, {model.what}, engine {engine}"
    main = dict(
        description=f"{where}: DSpark's drafter cost for every policy.",
        policies=json.dumps(["mtp1", *FIXED, "dspark"]),
        baseline="best-fixed",
        draft_cost="ratio:0.1",
        extra="",
    )
    own = dict(
        description=f"{where}: MTP-1 on its own drafter's cost (one target layer).",
        policies=json.dumps(["mtp1"]),
        baseline="mtp1",
        draft_cost=model.mtp1_ratio,
        extra="",
    )
    out = {f"{stem}.toml": main, f"{stem}-mtp1.toml": own}
    for suffix, penalty in RAGGED.items() if ragged else ():
        out[f"{stem}-{suffix}.toml"] = dict(
            description=f"{where}: dspark at ragged verify penalty {penalty:g}.",
            policies=json.dumps(["dspark"]),
            baseline="dspark",
            draft_cost="ratio:0.1",
            extra=f"\nragged_penalty = {penalty:g}",
        )
    return {name: TEMPLATE.format(**common, **fields) for name, fields in out.items()}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for model in MODELS:
        for engine in ENGINES:
            for name, text in configs(model, engine).items():
                write_with(OUT / name, lambda tmp, text=text: tmp.write_text(text))
                print(OUT.relative_to(HERE) / name)


if __name__ == "__main__":
    main()

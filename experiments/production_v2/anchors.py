"""SLA anchors for one model of production_v2, by the rule in README.md (fixed before any
sweep result exists): S = median per-user speed of MTP-1, on its own drafter cost and the
sweep's topology, serving the window's first 50 requests one at a time (arrivals 1,000 s apart),
seed 100 (not a sweep seed); strict = 0.9 S, moderate = 2/3 strict, loose = 1/3 strict, each
rounded down to a multiple of 5 tok/s/user. NAME is a config's path under this folder without
`.toml` (`dense8b`, `engines/dense8b-vllm`): S is read on NAME-mtp1.toml, and the anchors are
written into the `anchors = [...]` line of every one of NAME's TOMLs that exists (NAME,
NAME-mtp1, -replicas, -ragged0, -ragged2x) and into anchors-STEM.json beside them (S and the
anchors; STEM is NAME's last part).

Run: .venv/bin/python experiments/production_v2/anchors.py dense8b   (or moe, engines/moe-sglang)
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_json, write_with  # noqa: E402
from dsim.pareto.config import load_config  # noqa: E402
from dsim.run import RunSpec, simulate  # noqa: E402
from dsim.run_inputs import load_spec_workload  # noqa: E402

PILOT_REQUESTS, GAP_S, PILOT_SEED = 50, 1000.0, 100
SIBLINGS = ("", "-mtp1", "-replicas", "-ragged0", "-ragged2x")  # the configs of one NAME


def lone_mtp1_speed(base: RunSpec) -> float:
    work = load_spec_workload(base).head(PILOT_REQUESTS)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "pilot.jsonl"
        rows = [
            {"timestamp": i * GAP_S * 1e3, "input_length": int(p), "output_length": int(o)}
            for i, (p, o) in enumerate(zip(work.prompt_tokens, work.output_tokens, strict=True))
        ]
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        spec = replace(base, trace=str(trace), window=None, rate_scale=1.0, seed=PILOT_SEED)
        return float(simulate(replace(spec, policy="mtp1")).summary["tps_p50"])


def main() -> None:
    name = HERE / sys.argv[1]
    base = load_config(f"{name}-mtp1.toml").base
    speed = lone_mtp1_speed(base)
    strict = 0.9 * speed
    anchors = [5 * math.floor(a / 5) for a in (strict / 3, 2 * strict / 3, strict)]
    for path in (Path(f"{name}{suffix}.toml") for suffix in SIBLINGS):
        if path.is_file():
            text = re.sub(r"(?m)^anchors = .*$", f"anchors = {anchors}", path.read_text())
            write_with(path, lambda tmp, text=text: tmp.write_text(text))
    out = name.parent / f"anchors-{name.name}.json"
    write_json(out, {"mtp1_lone_tps_p50": speed, "anchors": anchors})
    print(f"{sys.argv[1]}: MTP-1 alone {speed:.1f} tok/s/user -> anchors {anchors}")


if __name__ == "__main__":
    main()

"""Write engines/*.toml, the sweeps of the engine brackets, from template.toml (README.md).

One config per engine (the policies against the best fixed length), and for dspark on the
engines that charge a ragged verify penalty, one per bracketing penalty. Run from the repo root:

    python experiments/sla_tiers/configs.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from string import Template

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from experiments.closed_loop import ENGINES, client  # noqa: E402

POLICIES = ["ar", "mtp1", "fixed:2", "fixed:3", "fixed:4", "fixed:5", "dspark"]
CAPS = [1, 4, 8, 16, 32, 64, 128]
# The ragged verify penalty's bracket for dspark: none, and twice the prior (0.1905) that the
# vllm preset has and sglang borrows; the prior itself is the engine's own sweep.
RAGGED = {"vllm": (0.0, 0.381), "sglang": (0.0, 0.381)}


def render(engine: str, ragged: float | None) -> str:
    """One sweep's TOML: every engine's own policies, or dspark alone at a given penalty."""
    return Template((HERE / "template.toml").read_text()).substitute(
        engine=engine,
        ragged_text="" if ragged is None else f", dspark at ragged verify penalty {ragged:g}",
        policies=json.dumps(POLICIES if ragged is None else ["dspark"]),
        baseline="best-fixed" if ragged is None else "dspark",
        trace=client(max(CAPS)),
        profile=ENGINES[engine],
        ragged_key="" if ragged is None else f"ragged_penalty = {ragged:g}\n",
        caps=json.dumps(CAPS),
    )


def sweeps() -> dict[str, str]:
    """File stem -> TOML text, in the order the sweeps are run."""
    out = {engine: render(engine, None) for engine in ENGINES}
    for engine, penalties in RAGGED.items():
        out |= {f"{engine}-ragged{p:g}": render(engine, p) for p in penalties}
    return out


def main() -> None:
    target = HERE / "engines"
    target.mkdir(exist_ok=True)
    for stem, text in sweeps().items():
        (target / f"{stem}.toml").write_text(text)
        print(target / f"{stem}.toml")


if __name__ == "__main__":
    main()

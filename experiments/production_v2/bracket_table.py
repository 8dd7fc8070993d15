"""The brackets of production_v2's headlines over engines, and dspark's over the ragged verify
penalty, for one model: read engines/results-MODEL-ENGINE.json (analyze.py's headline tables)
for every engine that has one, write engines/brackets-MODEL.md.

Each cell is a mean over seeds with its [min..max]; "(called)" marks a difference whose whole
min..max is on one side of zero (README.md, "Brackets over engines: rule").

Run: .venv/bin/python experiments/production_v2/bracket_table.py dense8b   (or moe)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from dsim.fileio import write_with  # noqa: E402

OUT = HERE / "engines"
ENGINES = ("gpuonly", "sglang", "vllm", "vllm2023")
DSPARK = "dspark"


def pct(row: dict) -> str:
    """A gain row as +12.3% [+10.1..+14.0] (called)."""
    if row["gain"] is None:
        return "n/a"
    mark = " (called)" if row["called"] in ("gain", "loss") else ""
    return f"{row['gain']:+.1%} [{row['gain_min']:+.1%}..{row['gain_max']:+.1%}]{mark}"


def at(rows: list[dict], policy: str) -> list[dict]:
    """The policy's per-load rows with a gain, by load."""
    return sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["load"])


def gain_cells(rows: list[dict], policy: str) -> dict[str, str]:
    """Lightest and heaviest load with a gain, the largest called gain and loss."""
    mine = [r for r in at(rows, policy) if r["gain"] is not None]
    if not mine:
        return dict.fromkeys(("lightest", "heaviest", "largest gain", "largest loss"), "n/a")
    cells = {
        "lightest": f"load {mine[0]['load']:g}: {pct(mine[0])}",
        "heaviest": f"load {mine[-1]['load']:g}: {pct(mine[-1])}",
    }
    for key, kind, pick in (("largest gain", "gain", max), ("largest loss", "loss", min)):
        hits = [r for r in mine if r["called"] == kind]
        best = pick(hits, key=lambda r: r["gain"]) if hits else None
        cells[key] = f"load {best['load']:g}: {pct(best)}" if best else "none called"
    return cells


def budget_cell(rows: list[dict], policy: str) -> str:
    """Verify budget at the lightest and the heaviest load that counts, with concurrency."""
    mine = sorted(
        (r for r in rows if r["policy"] == policy and not r["excluded"]), key=lambda r: r["load"]
    )
    if not mine:
        return "n/a"
    ends = (mine[0], mine[-1])
    return " -> ".join(f"{r['mean_verify_budget']:.2f} @ {r['mean_batch_size']:.0f}" for r in ends)


def sla_cells(rows: list[dict], policy: str) -> str:
    """Max throughput at each anchor and its ratio over MTP-1 (own cost)."""
    cells = []
    for r in (r for r in rows if r["policy"] == policy):
        best, ratio, low, high = (
            r[k] for k in ("max_throughput_tok_s", "ratio", "ratio_min", "ratio_max")
        )
        if best is None:
            shown = "cannot meet"
        elif ratio is None:  # NaN or inf in the json: MTP-1 cannot meet it
            shown = f"{best:.0f} (MTP-1 cannot meet)"
        elif low is None or high is None:
            shown = f"{best:.0f} (x{ratio:.2f}; a seed cannot meet)"
        else:
            shown = f"{best:.0f} (x{ratio:.2f} [{low:.2f}..{high:.2f}])"
        cells.append(f"{r['sla_tps']:g}: {shown}")
    return "; ".join(cells) or "n/a"


def engine_column(res: dict, policy: str) -> dict[str, str]:
    """Every headline of one engine for one dspark variant."""
    col = {f"(a) vs best fixed, {k}": v for k, v in gain_cells(res["a"], policy).items()}
    col |= {f"(b) vs MTP-1 own cost, {k}": v for k, v in gain_cells(res["b"], policy).items()}
    col["(c) verify budget @ concurrency, lightest -> heaviest"] = budget_cell(res["c"], policy)
    col["(d) throughput over MTP-1 at anchor"] = sla_cells(res["d"], policy)
    excluded = sum(r["excluded"] for r in res["excluded"])
    col["points excluded / swept"] = f"{excluded} / {sum(r['points'] for r in res['excluded'])}"
    return col


def table(columns: dict[str, dict[str, str]]) -> str:
    names = list(columns)
    rows = list(next(iter(columns.values())))
    lines = ["| headline | " + " | ".join(names) + " |", "|" + " --- |" * (len(names) + 1)]
    lines += [f"| {r} | " + " | ".join(columns[n][r] for n in names) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    model = sys.argv[1]
    results = {}
    for engine in ENGINES:
        path = OUT / f"results-{model}-{engine}.json"
        if path.is_file():
            results[engine] = json.loads(path.read_text())
    out = [f"# production_v2 brackets over engines: {model}\n"]
    out += ["Profiles: " + ", ".join(f"{e} `{r['profile']}`" for e, r in results.items()) + "\n"]
    missing = [e for e in ENGINES if e not in results]
    if missing:
        out += [f"Not analysed (not swept): {', '.join(missing)}.\n"]
    out += ["## dspark, per engine (default ragged penalty)\n"]
    out += [table({e: engine_column(r, DSPARK) for e, r in results.items()})]
    ragged = {}
    for engine, res in results.items():
        variants = sorted({row["policy"] for row in res["a"] if row["policy"].startswith(DSPARK)})
        if len(variants) > 1:  # the ragged sweeps ran beside the default
            ragged |= {f"{engine}, {p}": engine_column(res, p) for p in variants}
    if ragged:
        out += ["## dspark over the ragged verify penalty\n", table(ragged)]
    text = "\n".join(out)
    write_with(OUT / f"brackets-{model}.md", lambda tmp: tmp.write_text(text))
    print(text)


if __name__ == "__main__":
    main()

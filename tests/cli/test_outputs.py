"""Output contracts and command-line structure: schema versions on every table dsim writes,
one way of registering commands, `dsim serve` as its own command, no import cycles."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import ROOT
from samples import META, make_df

from dsim.acceptance.trace import read_acceptance_trace, write_acceptance_trace
from dsim.cli import app, main
from dsim.errors import InputError
from dsim.fileio import SCHEMA_KEY, SCHEMA_VERSION, write_parquet
from dsim.tables import read_table


def stamp(path: Path) -> int:
    return int((pq.read_schema(path).metadata or {})[SCHEMA_KEY])


def run_cli(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["dsim", *argv])
    main()


def test_run_outputs_carry_the_schema_version(monkeypatch, tmp_path):
    out = tmp_path / "o"
    run_cli(monkeypatch, "run", "--trace", "synthetic:n=10", "--out", str(out), "--no-progress")
    assert json.loads((out / "summary.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert stamp(out / "requests.parquet") == SCHEMA_VERSION
    assert len(pd.read_parquet(out / "requests.parquet")) == 10  # still a plain table


def test_acceptance_traces_carry_the_schema_version(tmp_path):
    path = tmp_path / "t.parquet"
    write_acceptance_trace(make_df(), path, META)
    assert stamp(path) == SCHEMA_VERSION
    back, _ = read_acceptance_trace(path)
    assert len(back) == len(make_df())


def test_a_newer_schema_is_refused_and_an_unstamped_file_read(tmp_path):
    df = pd.DataFrame({"a": [1, 2]})
    newer = tmp_path / "newer.parquet"
    write_parquet(df, newer)
    table = pq.read_table(newer)
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, SCHEMA_KEY: b"99"}), newer
    )
    with pytest.raises(InputError, match="schema version 99 is newer than this dsim reads"):
        read_table(newer)
    plain = tmp_path / "plain.parquet"
    df.to_parquet(plain, index=False)
    assert read_table(plain)["a"].tolist() == [1, 2]


def test_every_command_registers_the_same_way():
    """cli.py defines no command itself; each lives in a module with `register(app)`."""
    tree = ast.parse((ROOT / "dsim" / "cli.py").read_text())
    decorated = [
        d
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for d in node.decorator_list
    ]
    assert decorated == []
    names = {c.name for c in app.registered_commands}
    assert {"run", "serve", "validate", "pareto", "calibrate", "synth-acceptance"} <= names


def test_run_has_no_real_mode_and_serve_refuses_what_it_cannot_do(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        run_cli(monkeypatch, "run", "--real")
    assert exc.value.code == 2 and "--real" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # checked before any model is loaded
        run_cli(monkeypatch, "serve", "--policy", "oracle", "--target", "no-such-model")
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "cannot be served for real" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exc:
        run_cli(monkeypatch, "serve", "--acceptance", "iid:0.8")  # not an option of serve
    assert exc.value.code == 2


def _dsim_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }


def test_calibration_and_reliability_do_not_import_each_other():
    acc = ROOT / "dsim" / "acceptance"
    assert "dsim.acceptance.calibration" in _dsim_imports(acc / "reliability.py")
    assert not {"dsim.acceptance.reliability", "dsim.acceptance.calibrate"} & _dsim_imports(
        acc / "calibration.py"
    )
    code = "import dsim.acceptance.calibration, sys; print('matplotlib' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"  # the method loads without the plotting stack


def test_summary_table_shows_pooled_itl_and_gpus_when_the_profile_says():
    """The console table carries the benchmark's ITL and, for an estimate, GPUs per replica x
    replicas and throughput per GPU; a measured profile (no GPU count) shows no GPU rows."""
    from rich.console import Console

    from dsim.report import summary_table

    base = {k: 1.0 for k in ("throughput_tok_s", "tps_p10", "tps_p50", "tps_p90")}
    base |= {k: 0.5 for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")}
    base |= {"itl_p50_s": 0.0123, "itl_p99_s": 0.0456, "accepted_length_mean": 2.0}
    base |= {"verification_waste": 0.1, "mean_verify_budget": 3.0, "mean_batch_size": 4.0}
    base |= {"requests": 10, "duration_s": 5.0}

    def text(summary: dict) -> str:
        console = Console(width=200, record=True)
        console.print(summary_table(summary, "t"))
        return console.export_text()

    gpus = {"gpus_per_replica": 2, "gpus_total": 6, "throughput_tok_s_per_gpu": 1 / 6}
    shown = text(base | gpus)
    assert "12.30  45.60" in shown and "ms: p50 p99" in shown  # ITL in ms, as the benchmark
    assert "2 x 3" in shown and "0.1667" in shown
    measured = text(base | dict.fromkeys(gpus))
    assert "GPUs" not in measured and "per GPU" not in measured

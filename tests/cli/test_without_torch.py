"""The simulator without the lab extra: with torch, transformers, gguf and accelerate
unimportable, `dsim run`, `dsim pareto` and `dsim profile --roofline` work from a folder outside
the checkout, and a command that needs them says which extra to install in one line (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT
from samples import TINY as SWEEP

from dsim.hardware.latency import read_profile
from dsim.lab import INSTALL, LAB

# A finder ahead of every other that refuses the lab's modules, as an install without them
# would (ModuleNotFoundError, nothing left in sys.modules); then the dsim command line.
WRAPPER = f"""
import importlib.abc, sys
sys.path.insert(0, {str(ROOT)!r})
BLOCKED = {set(LAB)!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}")

sys.meta_path.insert(0, Block())
sys.argv = ["dsim", *sys.argv[1:]]
from dsim.cli import main
try:
    main()
finally:
    assert not BLOCKED & set(sys.modules), "a lab module was imported"
"""


def dsim(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`dsim ARGS` in `cwd`, the lab's modules unimportable."""
    cmd = [sys.executable, "-c", WRAPPER, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_wrapper_blocks_torch(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER.replace("from dsim.cli import main", "import torch")],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


def test_run_needs_no_torch(tmp_path):
    done = dsim(tmp_path, "run", "--window", "0:30", "--out", "out")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text())
    assert len(pd.read_parquet(tmp_path / "out" / "requests.parquet")) > 0


def test_pareto_needs_no_torch(tmp_path):
    (tmp_path / "sweep.toml").write_text(SWEEP)
    done = dsim(tmp_path, "pareto", "--config", "sweep.toml", "--out", "sweep", "--jobs", "1",
                "--no-progress")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sweep" / "points.parquet").exists()
    assert (tmp_path / "sweep" / "report.md").exists()


def test_roofline_needs_no_torch(tmp_path):
    done = dsim(tmp_path, "profile", "--roofline", "h100", "--model", "qwen3-8b", "--out", "x.csv")
    assert done.returncode == 0, done.stderr
    assert len(read_profile(tmp_path / "x.csv")) > 0


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--policy", "ar", "--out", "o"),
        ("validate", "--out", "o"),
        ("train", "--drafter", "markov", "--out", "d.pt"),
        ("profile", "--out", "p.csv"),
        ("check-policy", "dspark", "--trials", "1"),
    ],
)
def test_a_lab_command_names_the_extra(tmp_path, args):
    done = dsim(tmp_path, *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert INSTALL in done.stderr and "torch" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_check_policy_property_runs_without_torch(tmp_path):
    done = dsim(tmp_path, "check-policy", "dspark", "--trials", "2", "--sequences", "0")
    assert done.returncode == 0, done.stderr
    assert "PASS: dspark" in done.stdout

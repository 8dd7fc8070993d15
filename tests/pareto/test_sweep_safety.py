"""`dsim pareto` never loses or stales a user's data: a plug-in's source is part of each point's
key, the output folder is checked like `dsim run`'s before any work, a worker that dies ends
the sweep with one line, and Ctrl-C is one line however early it comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_cli

from dsim.pareto import sweep
from dsim.pareto.config import load_config

PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")
CONFIG = f"""
policies = [POLICIES]
[run]
trace = "synthetic:rate=4,duration=4,prompt=100,output=24"
profile = "{PROFILE}"
gamma = 6
[load]
rate_scale = [1]
[sla]
anchors = [100]
"""

POLICY = """
import numpy as np

from {helper} import K_DRAFTS


class K:
    drafts = True

    def lengths(self, conf, sps, truth):
        return np.full(conf.shape[0], {k}, dtype=np.int64)


class FromHelper(K):
    def lengths(self, conf, sps, truth):
        return np.full(conf.shape[0], K_DRAFTS, dtype=np.int64)
"""


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """my_policy.py beside the user's helper module (importable: its folder is on sys.path)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    helper = tmp_path / "trust_helper.py"
    helper.write_text("K_DRAFTS = 2\n")
    policy = tmp_path / "my_policy.py"
    policy.write_text(POLICY.format(helper="trust_helper", k=2))
    return policy, helper


def _config(tmp_path: Path, policies: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(CONFIG.replace("POLICIES", policies))
    return path


def _pareto(monkeypatch, capsys, config: Path, out: Path, *extra: str) -> tuple[int, str]:
    args = ("pareto", "--config", str(config), "--out", str(out), "--no-progress", *extra)
    code, _, err = run_cli(monkeypatch, capsys, *args)
    return code, err


def _keys(config: Path) -> list[str]:
    return [p.key for p in sweep.make_points(load_config(config).specs())]


def test_key_follows_the_plugin_file_and_the_helper_it_imports(tmp_path, user_code):
    policy, helper = user_code
    config = _config(tmp_path, f'"{policy}:FromHelper", "fixed:3"')
    before = _keys(config)
    helper.write_text("K_DRAFTS = 5\n")
    after_helper = _keys(config)
    assert after_helper[0] != before[0] and after_helper[1] == before[1]
    policy.write_text(policy.read_text() + "\n# a comment is an edit too\n")
    assert _keys(config)[0] not in (before[0], after_helper[0])


def test_key_follows_a_module_plugin_and_its_package(tmp_path, monkeypatch):
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shared.py").write_text("K_DRAFTS = 2\n")
    (package / "policy.py").write_text(POLICY.format(helper=".shared", k=1))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _config(tmp_path, '"userpkg.policy:FromHelper"')
    before = _keys(config)
    (package / "shared.py").write_text("K_DRAFTS = 4\n")
    assert _keys(config) != before
    from dsim.codehash import user_sources

    sources = {Path(p).name for p in user_sources("userpkg.policy")}
    assert sources == {"policy.py", "shared.py", "__init__.py"}  # numpy and dsim are not read


def test_an_edited_policy_reruns_its_points(monkeypatch, capsys, tmp_path, user_code):
    policy, _ = user_code
    config = _config(tmp_path, f'"{policy}:K", "fixed:3"')
    out = tmp_path / "out"
    budgets = []
    for k in (2, 5):
        policy.write_text(POLICY.format(helper="trust_helper", k=k))
        code, err = _pareto(monkeypatch, capsys, config, out, "--jobs", "1")
        assert code == 0, err
        table = pd.read_parquet(out / "points.parquet")
        budgets.append(table.set_index("policy")["mean_verify_budget"].to_dict())
    assert budgets[0][f"{policy}:K"] == 3.0 and budgets[1][f"{policy}:K"] == 6.0
    assert budgets[0]["fixed:3"] == budgets[1]["fixed:3"] == 4.0
    assert len(list((out / "points").iterdir())) == 3  # fixed:3's point was reused


def test_out_must_be_a_sweeps_folder_or_new(monkeypatch, capsys, tmp_path):
    config = _config(tmp_path, '"fixed:1"')
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "report.md").write_text("my report")
    code, err = _pareto(monkeypatch, capsys, config, out)
    assert code == 2 and err.count("\n") == 1 and "not a dsim output" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.md"]
    assert (out / "report.md").read_text() == "my report"


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a folder no one can write")
def test_an_unwritable_out_is_refused_before_any_point(monkeypatch, capsys, tmp_path):
    calls = []
    monkeypatch.setattr(sweep, "run_point", lambda *a: calls.append(a))
    code, err = _pareto(monkeypatch, capsys, _config(tmp_path, '"fixed:1"'), Path("/sys/dsim-out"))
    assert code == 2 and err.count("\n") == 1 and "/sys/dsim-out" in err and not calls


DIES = """
import numpy as np


class Dies:
    drafts = True

    def lengths(self, conf, sps, truth):
        BODY
"""


@pytest.mark.parametrize(("body", "code", "message"), [
    ("import os; os._exit(3)", 2, "lengths called os._exit(3)"),
    ("import posix; posix._exit(3)", 1, "a sweep worker exited with code 3 running a point of"),
    ("raise ValueError('bad')", 2, "lengths raised ValueError: bad"),
    ("import sys; sys.exit(0)", 2, "lengths called sys.exit(0)"),
    ("import time; time.sleep(60)", 2, "lengths did not return within 0.5 s"),
])  # fmt: skip
def test_a_failing_plugin_in_a_worker_ends_the_sweep_in_one_line(
    monkeypatch, capsys, tmp_path, body, code, message
):
    out = tmp_path / "out"
    earlier = _config(tmp_path, '"fixed:1"')
    assert _pareto(monkeypatch, capsys, earlier, out, "--jobs", "1")[0] == 0
    kept = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    dies = tmp_path / "dies.py"
    dies.write_text(DIES.replace("BODY", body))
    config = _config(tmp_path, f'"fixed:1", "{dies}:Dies", "fixed:2"')
    args = ("--jobs", "2", "--plugin-timeout", "0.5")
    got, err = _pareto(monkeypatch, capsys, config, out, *args)
    assert got == code and err.count("\n") == 1 and message in err
    assert all(p.read_bytes() == b for p, b in kept.items())  # earlier outputs kept
    assert (out / "points.parquet").is_file()


def test_the_worker_pool_gives_the_in_process_numbers(monkeypatch, capsys, tmp_path):
    config = _config(tmp_path, '"fixed:1", "fixed:3", "dspark"')
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        assert _pareto(monkeypatch, capsys, config, out, "--jobs", jobs)[0] == 0
        tables.append(pd.read_parquet(out / "points.parquet"))
    pd.testing.assert_frame_equal(*tables)


def test_a_trace_note_is_said_once_by_the_parent(tmp_path):
    """Spawned workers read the trace again; only the parent, which read it first, says its
    note (once, as a `dsim: note:` line, not as a worker's raw warning)."""
    trace = tmp_path / "log.csv"
    trace.write_text("arrival_ms,p,o\n0,10,5\n1000,10,5\n2000,10,5\n")
    config = _config(tmp_path, '"fixed:1", "fixed:2", "fixed:3"')
    mapped = f"{trace}[timestamp=arrival_ms:s,prompt=p,output=o]"
    config.write_text(config.read_text().replace(CONFIG.split('"')[1], mapped))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["-m", "dsim", "pareto", "--config", str(config), "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, *args, "--jobs", "2", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("dsim: note: ") == 1 and "but its name says ms" in done.stderr
    assert "Notice" not in done.stderr  # no worker's own warning line


def _children(pid: int) -> list[str]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return path.read_text().split() if path.exists() else []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_ctrl_c_while_workers_start_is_one_line(tmp_path):
    config = _config(tmp_path, '"fixed:1", "fixed:2", "fixed:3"')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["-m", "dsim", "pareto", "--config", str(config), "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(
        [sys.executable, *args, "--jobs", "2", "--no-progress"],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the workers are importing dsim now
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to every process of the group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode() == "dsim: interrupted by SIGINT\n"

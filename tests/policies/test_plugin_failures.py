"""A plug-in policy cannot crash the tool, hang it, exit it, or change what the engine does but
through the lengths it returns: each failure is one line naming the policy, the call and the
exception, exit 2, in `run`, `check-policy` and `pareto`."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from conftest import run_cli, write_flat_profile, write_trace

from dsim.policies.plugin import TRACEBACK_ENV

HEADER = """
import numpy as np


class Two:
    drafts = True

    def __init__(self, sla_tps=None):
        pass

    def lengths(self, conf, sps, truth):
        return np.full(conf.shape[0], min(2, conf.shape[1]), dtype=np.int64)
"""

# class name -> (its body, what the one-line error must say: the call and the exception)
FAILURES = {
    "Raises": (
        "def lengths(self, conf, sps, truth):\n        return 1 / 0",
        "lengths raised ZeroDivisionError: division by zero",
    ),
    "ObserveRaises": (
        "def observe(self, lengths, accepted):\n        raise KeyError('x')",
        "observe raised KeyError",
    ),
    "Ragged": (
        "def lengths(self, conf, sps, truth):\n        return [[1], [1, 2]] * conf.shape[0]",
        "lengths raised ValueError",
    ),
    "DraftsRaises": (
        "@property\n    def drafts(self):\n        raise RuntimeError('no')",
        "reading its lengths and drafts raised RuntimeError: no",
    ),
    "SyncRaises": (
        "@property\n    def synchronous(self):\n        raise RuntimeError('no')",
        "reading its drafts, synchronous and observe attributes raised RuntimeError",
    ),
    "Exit0": (
        "def lengths(self, conf, sps, truth):\n        import sys; sys.exit(0)",
        "lengths called sys.exit(0)",
    ),
    "Exit5": (
        "def lengths(self, conf, sps, truth):\n        raise SystemExit(5)",
        "lengths called sys.exit(5)",
    ),
    "OsExit": (
        "def lengths(self, conf, sps, truth):\n        import os; os._exit(3)",
        "lengths called os._exit(3)",
    ),
    "CtrlC": (
        "def lengths(self, conf, sps, truth):\n        raise KeyboardInterrupt",
        "lengths raised KeyboardInterrupt",
    ),
    "Base": (
        "def lengths(self, conf, sps, truth):\n        raise BaseException('odd')",
        "lengths raised BaseException: odd",
    ),
    "InitExits": (
        "def __init__(self, sla_tps=None):\n        raise SystemExit(0)",
        "InitExits() called sys.exit(0)",
    ),
    "WritesTruth": (
        "def lengths(self, conf, sps, truth):\n"
        "        truth[:] = conf.shape[1]\n        return truth",
        "lengths raised ValueError: assignment destination is read-only",
    ),
    "WritesConf": (
        "def lengths(self, conf, sps, truth):\n        conf[:] = 1.0\n        return truth",
        "assignment destination is read-only",
    ),
    "WritesAccepted": (
        "def observe(self, lengths, accepted):\n        accepted += 1",
        "observe raised ValueError",
    ),
}


def _source() -> str:
    classes = [f"\n\nclass {name}(Two):\n    {body}\n" for name, (body, _) in FAILURES.items()]
    return HEADER + "".join(classes)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugins")
    plugin = root / "bad_policies.py"
    plugin.write_text(_source())
    trace = write_trace(root / "t.jsonl", [0.0, 0.01, 0.02], [10, 12, 14], [20, 25, 30])
    profile = write_flat_profile(root / "flat.csv", 10.0)
    return {"plugin": str(plugin), "trace": str(trace), "profile": str(profile), "root": root}


def _run(monkeypatch, capsys, files, policy: str, *extra: str) -> tuple[int, str]:
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", files["trace"], "--profile", files["profile"],
        "--acceptance", "iid:0.7", "--policy", policy, "--no-progress", *extra,
    )  # fmt: skip
    return code, err


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("name", list(FAILURES))
def test_run_reports_a_failing_plugin_in_one_line_exit_2(
    monkeypatch, capsys, files, tmp_path, name
):
    out = tmp_path / "out"
    policy = f"{files['plugin']}:{name}"
    code, err = _run(monkeypatch, capsys, files, policy, "--out", str(out))
    assert code == 2
    assert f"policy '{policy}'" in _one_line(err) and FAILURES[name][1] in err
    assert not out.exists()


@pytest.mark.parametrize(
    "name", ["Raises", "Exit0", "OsExit", "CtrlC", "SyncRaises", "WritesTruth"]
)
def test_check_policy_reports_a_failing_plugin_as_exit_2_not_a_verdict(
    monkeypatch, capsys, files, name
):
    policy = f"{files['plugin']}:{name}"
    code, out, err = run_cli(monkeypatch, capsys, "check-policy", policy, "--sequences", "0")
    assert code == 2 and FAILURES[name][1] in _one_line(err)
    assert "PASS" not in out and "FAIL" not in out


def test_exits_at_import_and_builtins_exit(monkeypatch, capsys, files, tmp_path):
    exits = tmp_path / "exits_at_import.py"
    exits.write_text("import sys\nsys.exit(0)\n")
    code, err = _run(monkeypatch, capsys, files, f"{exits}:K")
    assert code == 2 and "cannot import" in _one_line(err) and "sys.exit(0)" in err
    code, err = _run(monkeypatch, capsys, files, "builtins:exit")
    assert code == 2 and "policy 'builtins:exit': exit() called sys.exit(None)" in _one_line(err)


def test_traceback_on_request(monkeypatch, capsys, files):
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    code, err = _run(monkeypatch, capsys, files, f"{files['plugin']}:Raises")
    assert code == 2 and "Traceback" in err and "ZeroDivisionError" in err
    assert err.splitlines()[-1].startswith("dsim: error: policy")


SLOW = """
import time

from bad_policies import Two


class Sleeps(Two):
    def lengths(self, conf, sps, truth):
        time.sleep(60)


class Spins(Two):
    def lengths(self, conf, sps, truth):
        while True:
            pass
"""


@pytest.mark.parametrize("name", ["Sleeps", "Spins"])
def test_a_call_past_the_time_limit_is_one_line(monkeypatch, capsys, files, name):
    slow = files["root"] / "slow.py"
    slow.write_text(SLOW)
    monkeypatch.syspath_prepend(str(files["root"]))
    policy = f"{slow}:{name}"
    code, err = _run(monkeypatch, capsys, files, policy, "--plugin-timeout", "0.3")
    assert code == 2 and "lengths did not return within 0.3 s (--plugin-timeout)" in _one_line(err)
    code, _, err = run_cli(
        monkeypatch, capsys, "check-policy", policy, "--sequences", "0", "--plugin-timeout", "0.3"
    )
    assert code == 2 and "did not return within 0.3 s" in _one_line(err)


def test_ctrl_c_in_a_plugin_call_is_130_and_one_line(monkeypatch, capsys, files):
    slow = files["root"] / "slow.py"
    slow.write_text(SLOW)
    monkeypatch.syspath_prepend(str(files["root"]))
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        code, err = _run(monkeypatch, capsys, files, f"{slow}:Sleeps")
    finally:
        timer.cancel()
    assert code == 130 and _one_line(err) == "dsim: interrupted by SIGINT\n"


SABOTEUR = """
import numpy as np

from bad_policies import Two


class Saboteur(Two):
    def lengths(self, conf, sps, truth):
        for a in (conf, truth):
            a.flags.writeable = True  # its own copy: allowed, and changes nothing of the engine's
            a[...] = 0
        sps.span = None
        sps.extra = 1
        return super().lengths(conf, sps, truth)

    def observe(self, lengths, accepted):
        for a in (lengths, accepted):
            a.flags.writeable = True
            a[...] = 0
"""


def test_a_policy_changes_the_run_only_through_its_lengths(monkeypatch, capsys, files, tmp_path):
    saboteur = files["root"] / "saboteur.py"
    saboteur.write_text(SABOTEUR)
    monkeypatch.syspath_prepend(str(files["root"]))
    summaries = []
    for policy in (f"{files['plugin']}:Two", f"{saboteur}:Saboteur"):
        out = tmp_path / policy.rpartition(":")[2]
        code, err = _run(monkeypatch, capsys, files, policy, "--out", str(out))
        assert code == 0, err
        summary = json.loads((out / "summary.json").read_text())
        summaries.append({k: v for k, v in summary.items() if k not in ("spec", "policy")})
        requests = (out / "requests.parquet").read_bytes()
        summaries[-1]["requests"] = requests
    assert summaries[0] == summaries[1]
    assert summaries[0]["mean_verify_budget"] == 3.0  # 2 drafts + the bonus token


COUNTED = """
from pathlib import Path

import numpy as np

Path(__file__).with_suffix(".log").open("a").write("imported\\n")


class Counted:
    drafts = True

    def lengths(self, conf, sps, truth):
        return np.full(conf.shape[0], 1, dtype=np.int64)
"""


def test_a_plugin_module_is_imported_once_per_process(monkeypatch, capsys, files, tmp_path):
    counted = tmp_path / "counted.py"
    counted.write_text(COUNTED)
    log = counted.with_suffix(".log")
    code, err = _run(monkeypatch, capsys, files, f"{counted}:Counted", "--replicas", "3")
    assert code == 0, err
    code, err = _run(monkeypatch, capsys, files, f"{counted}:Counted")
    assert code == 0 and log.read_text() == "imported\n"
    counted.write_text(COUNTED + "\n# edited\n")  # new bytes: imported again, once
    for _ in range(2):
        assert _run(monkeypatch, capsys, files, f"{counted}:Counted")[0] == 0
    assert log.read_text() == "imported\n" * 2


def test_check_policy_refuses_to_check_nothing(monkeypatch, capsys):
    code, out, err = run_cli(
        monkeypatch, capsys, "check-policy", "fixed:1", "--trials", "0", "--sequences", "0"
    )
    assert code == 2 and "checks nothing" in _one_line(err) and "PASS" not in out
    code, _, err = run_cli(monkeypatch, capsys, "check-policy", "fixed:1", "--sequences", "1")
    assert code == 2 and "--sequences" in _one_line(err)


def test_a_folder_named_like_a_policy_file(monkeypatch, capsys, files, tmp_path):
    folder = tmp_path / "mine.py"
    folder.mkdir()
    code, err = _run(monkeypatch, capsys, files, f"{folder}:K")
    assert code == 2 and "is a folder, not a policy file" in _one_line(err)


def test_plugin_errors_survive_a_worker_process():
    import pickle

    from dsim.errors import PluginError

    err = PluginError(None, None, "policy 'x': lengths raised E", "Traceback ...")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, PluginError) and str(back) == str(err) and back.detail == err.detail

"""Policies in the engine: the synchronous scheduling cost, the observe hook, plug-in policies
and `dsim check-policy`."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import ROOT, write_flat_profile, write_trace

from dsim.cli import main
from dsim.engine.config import (
    HOST_SYNC_S,
    SCHED_BASE_S,
    SCHED_PER_REQUEST_S,
    parse_sched_cost,
)
from dsim.errors import InputError
from dsim.policies import parse_policy
from dsim.policies.registry import plugin_ref

BIASED = str(ROOT / "docs" / "examples" / "biased_policy.py")

RECORDER = '''
import numpy as np

SEEN = []


class Recorder:
    """fixed:2 that records what the engine tells it."""

    drafts = True
    synchronous = False

    def __init__(self, sla_tps=None):
        pass

    def lengths(self, conf, sps, truth):
        return np.full(conf.shape[0], min(2, conf.shape[1]), dtype=np.int64)

    def observe(self, lengths, accepted):
        SEEN.append((lengths.copy(), accepted.copy()))


class WrongShape(Recorder):
    def lengths(self, conf, sps, truth):
        return np.zeros(conf.shape[0] + 1, dtype=np.int64)
'''


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "recorder.py"
    path.write_text(RECORDER)
    return str(path)


@pytest.mark.parametrize(
    ("policy", "charged"),
    [("dspark", True), ("threshold:0.5", True), ("dspark-async", False), ("goodput", False)],
)
def test_sched_cost_is_charged_to_synchronous_policies_only(sim, tmp_path, policy, charged):
    flat = str(write_flat_profile(tmp_path / "flat.csv", 10.0))
    trace = str(write_trace(tmp_path / "t.jsonl", [0.0, 0.001], [10, 10], [21, 30]))
    runs = [
        sim(trace=trace, profile=flat, acceptance="iid:0.0", policy=policy, sched_cost=cost)
        for cost in ("0", "0.002")
    ]
    base, paid = (r.steps for r in runs)
    np.testing.assert_array_equal(base.num_running, paid.num_running)
    extra = np.where(base.num_running > 0, 0.002 if charged else 0.0, 0.0)
    np.testing.assert_allclose(paid.latency_s - base.latency_s, extra, atol=1e-12)


def test_sched_cost_spellings():
    auto = parse_sched_cost("auto")
    assert auto.seconds(100) == pytest.approx(
        HOST_SYNC_S + SCHED_BASE_S + 100 * SCHED_PER_REQUEST_S
    )
    assert parse_sched_cost("auto:3").seconds(100) == pytest.approx(3 * auto.seconds(100))
    assert parse_sched_cost("0").seconds(256) == 0.0
    assert parse_sched_cost("1e-4").seconds(7) == pytest.approx(1e-4)
    for bad in ("fast", "-1", "auto:-2", "0:3"):
        with pytest.raises(InputError, match="--sched-cost"):
            parse_sched_cost(bad)


def test_engine_tells_the_policy_each_rounds_outcome(sim, plugin):
    res = sim(trace="synthetic:n=30", policy=f"{plugin}:Recorder", acceptance="iid:0.6")
    seen = sys.modules["dsim_policy_recorder"].SEEN
    lengths = np.concatenate([s[0] for s in seen])
    accepted = np.concatenate([s[1] for s in seen])
    assert (lengths == 2).all() and (accepted <= lengths).all()
    assert accepted.sum() == res.requests["accepted_drafts"].sum()
    assert lengths.sum() == res.requests["verified_drafts"].sum()


def test_plugin_policy_by_module_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    policy = parse_policy("biased_policy:GlobalSearch", sla_tps=2.0)
    assert policy.drafts and policy.synchronous and policy.inner.sla_tps == 2.0
    conf = np.array([[0.8, 0.9]])
    assert policy.lengths(conf, lambda b: np.array([np.nan, 1.0, 0.5, 0.45])[b], None).tolist() == [
        2
    ]


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ("plugins/x/my_policy.py:GreedyLen", ("plugins/x/my_policy.py", "GreedyLen")),
        ("mypkg.policies:Tuned", ("mypkg.policies", "Tuned")),
        ("C:/p/a.py:Tuned", ("C:/p/a.py", "Tuned")),  # the last colon splits
        ("ar:Tuned", ("ar", "Tuned")),  # `ar` takes no argument: a module named ar
        ("fixed:3", None),
        ("fixed:Tuned", None),  # a kind that claims its colon is never a plug-in
        ("threshold:Tuned", None),  # ... nor is it built to find out
        ("dspark", None),
        ("mod:", None),
        (":Tuned", None),
        ("mod:not-a-name", None),
    ],
)
def test_a_plugin_spec_is_read_into_its_module_and_class(spec, parts):
    ref = plugin_ref(spec)
    assert (None if ref is None else (ref.target, ref.class_name)) == parts
    assert ref is None or ref.spec == spec


@pytest.fixture
def cli(monkeypatch, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["dsim", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_plugin_returning_a_wrong_shape_is_one_line_exit_2(cli, plugin, tmp_path):
    out = tmp_path / "o"
    code, _, err = cli(
        "run", "--trace", "synthetic:n=5", "--policy", f"{plugin}:WrongShape", "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "expected" in err and "0..7" in err
    assert not out.exists()


def test_check_policy_catches_the_biased_example(cli):
    code, out, _ = cli("check-policy", f"{BIASED}:GlobalSearch", "--sequences", "0")
    assert code == 1
    assert "property: FAIL" in out and "requests 1, gamma" in out and "FAIL:" in out


def test_check_policy_passes_a_built_in(cli):
    code, out, _ = cli("check-policy", "dspark-async", "--trials", "3", "--sequences", "4000")
    assert code == 0
    assert "property: pass" in out and out.count("chi-square") == 4 and "PASS: dspark-async" in out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nosuch.module:Policy", "cannot import 'nosuch.module'"),
        (f"{BIASED}:Nope", "has no 'Nope'"),
        ("missing_file.py:Policy", "policy file not found"),
        ("oracle", "clairvoyant"),
    ],
)
def test_check_policy_bad_spec_is_one_line_exit_2(cli, spec, expected):
    code, _, err = cli("check-policy", spec)
    assert code == 2 and err.count("\n") == 1 and expected in err

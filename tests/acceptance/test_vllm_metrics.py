"""`--acceptance vllm:SCRAPE`: vLLM's speculative-decoding counters from a Prometheus scrape.

The expositions are written by hand in the format vLLM's v1 engine emits through
prometheus_client (HELP/TYPE lines, `_total` and `_created` samples, `model_name` and `engine`
labels, 0-based `position`), with the per-position figures vLLM's tests report for EAGLE-3 on
Llama-3.1-8B-Instruct (MT-Bench, k = 3): 0.7296, 0.5208, 0.3545 of drafts.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import write_flat_profile
from samples import ENGINES, MODEL, exposition, scrape

from dsim.acceptance.parametric import ParametricAcceptance
from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.trace import read_acceptance_trace
from dsim.acceptance.vllm_metrics import read_vllm_acceptance
from dsim.cli import main
from dsim.errors import InputError
from dsim.pareto.sweep import point_key
from dsim.run_inputs import input_files
from dsim.run_spec import RunSpec

UNCONDITIONAL = np.array([0.7296, 0.5208, 0.3545])  # of drafts, per position


@pytest.mark.parametrize(("suffix", "created"), [("_total", True), ("", False)])
def test_counts_are_summed_over_engines(tmp_path, suffix, created):
    acc = read_vllm_acceptance(scrape(tmp_path, exposition(suffix=suffix, created=created)))
    assert acc.drafts == 10000 and acc.draft_tokens == 30000
    np.testing.assert_allclose(acc.unconditional, UNCONDITIONAL)
    np.testing.assert_allclose(
        acc.conditional, [0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208], rtol=1e-12
    )
    assert acc.tau == pytest.approx(1 + UNCONDITIONAL.sum())  # 2.60, as vLLM reports


def test_model_selection_and_label_escapes(tmp_path):
    other = exposition(engines={"0": (100, 300, (90, 80, 70))}, model='odd "name", v2')
    path = scrape(tmp_path, exposition() + other.split("\n", 3)[3])
    with pytest.raises(InputError, match="several models"):
        read_vllm_acceptance(path)
    assert read_vllm_acceptance(path, model=MODEL).drafts == 10000
    odd = read_vllm_acceptance(path, model='odd "name", v2')  # escaped quote and comma
    np.testing.assert_allclose(odd.unconditional, [0.9, 0.8, 0.7])
    with pytest.raises(InputError, match="'qwen' matches no model_name label"):
        read_vllm_acceptance(path, model="qwen")


def test_two_scrapes_measure_the_window_between_them(tmp_path):
    before = scrape(tmp_path, exposition(), "before.prom")
    later = {e: (2 * d, 2 * t, tuple(2 * c for c in p)) for e, (d, t, p) in ENGINES.items()}
    later["0"] = (later["0"][0], later["0"][1], (4378 + 1000, 3125 + 500, 2127 + 100))
    after = scrape(tmp_path, exposition(engines=later), "after.prom")
    acc = read_vllm_acceptance(after, since=before)
    assert acc.drafts == 10000  # the drafts between the scrapes
    np.testing.assert_allclose(acc.per_position, [1000 + 2918, 500 + 2083, 100 + 1418])
    restarted = {**ENGINES, "1": (10, 30, (5, 2, 1))}
    after = scrape(tmp_path, exposition(engines=restarted), "restarted.prom")
    with pytest.raises(InputError, match="went down since .*before.prom .*restarted") as err:
        read_vllm_acceptance(after, since=before)
    assert err.value.path.endswith("restarted.prom") and err.value.row is not None


def test_a_scrape_drives_the_parametric_model(tmp_path):
    path = scrape(tmp_path, exposition())
    exact = parse_acceptance(f"vllm:{path}[spread=0,spread_req=0]", 3)
    rng = np.random.default_rng(0)
    exact.bind(200_000, rng)
    conf, accepted = exact.draw(np.arange(200_000), rng)
    survival = (accepted[:, None] >= np.arange(1, 4)).mean(axis=0)
    # no spread: the model's prefix survival is the scrape's; 5 standard errors < 0.006
    np.testing.assert_allclose(survival, UNCONDITIONAL, atol=0.006)
    np.testing.assert_allclose(conf[0], [0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208], rtol=1e-6)
    default = parse_acceptance(f"vllm:{path}", 2)
    assert isinstance(default, ParametricAcceptance)
    assert (default.spread, default.spread_req, default.overconf) == (1.0, 0.5, 1.0)


def test_default_spreads_keep_the_scrapes_tokens_per_round(sim, tmp_path):
    path = scrape(tmp_path, exposition())
    flat = str(write_flat_profile(tmp_path / "flat.csv", 10.0))
    res = sim(
        trace="synthetic:rate=5,n=400,prompt=64,output=300,sigma=0",
        profile=flat,
        acceptance=f"vllm:{path}",
        policy="fixed:3",
        gamma=3,
        seed=1,
    )
    assert res.summary["accepted_length_mean"] == pytest.approx(1 + UNCONDITIONAL.sum(), rel=0.03)


def test_mix_and_sweep_cache_see_the_scrape_files(tmp_path):
    path = scrape(tmp_path, exposition())
    before = scrape(tmp_path, exposition(engines={"0": (0, 0, (0, 0, 0))}), "b.prom")
    spec = f"mix:vllm:{path}[model={MODEL},since={before}]=0.5,preset:dspark:chat=0.5"
    source = parse_acceptance(spec, 3)
    assert [d.name for d in source.domains] == [MODEL, "chat"]
    assert {str(path.resolve()), str(before.resolve())} <= set(
        input_files(RunSpec(acceptance=spec, gamma=3))
    )
    key = point_key(RunSpec(acceptance=spec, gamma=3))
    before.write_text(exposition(engines={"0": (10, 30, (1, 0, 0))}))
    assert (
        point_key(RunSpec(acceptance=spec, gamma=3)) != key
    )  # editing a scrape invalidates points


def _bad(tmp_path, monkeypatch, capsys, text: str, *, gamma: int = 3, opts: str = "") -> str:
    path = scrape(tmp_path, text)
    out = tmp_path / "o"
    argv = ["dsim", "run", "--trace", "synthetic:n=5", "--acceptance", f"vllm:{path}{opts}"]
    monkeypatch.setattr(
        sys, "argv", [*argv, "--gamma", str(gamma), "--out", str(out), "--no-progress"]
    )
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and not out.exists()
    assert str(path) in err
    return err


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("edit", "expected", "needle"),
    [
        (lambda t: "# HELP x y\nx 1\n", "no speculative-decoding metrics", None),
        (
            lambda t: exposition(engines={"0": (0, 0, (0, 0, 0))}),
            "zero drafts",
            None,
        ),
        (
            lambda t: exposition(engines={"0": (100, 300, (50, 60, 10))}),
            "position 1: 60 accepted, more than position 0's 50",
            'position="1"',
        ),
        (
            lambda t: exposition(engines={"0": (100, 300, (150, 60, 10))}),
            "position 0: 150 accepted exceeds 100 drafts",
            'position="0"',
        ),
        (
            lambda t: t.replace('engine="1",model_name="' + MODEL + '"} 4000.0', "} abc"),
            "non-numeric sample 'abc'",
            "} abc",
        ),
        (
            lambda t: "\n".join(x for x in t.splitlines() if "num_drafts" not in x),
            "missing vllm:spec_decode_num_drafts",
            None,
        ),
    ],
)
def test_bad_scrapes(tmp_path, monkeypatch, capsys, edit, expected, needle):
    text = edit(exposition())
    err = _bad(tmp_path, monkeypatch, capsys, text)
    assert expected in err
    if needle is not None:
        assert f"row {_line_of(text, needle)}:" in err


def test_bad_selection_and_gamma(tmp_path, monkeypatch, capsys):
    err = _bad(tmp_path, monkeypatch, capsys, exposition(), opts="[model=qwen]")
    assert "'qwen' matches no model_name label" in err and MODEL in err
    err = _bad(tmp_path, monkeypatch, capsys, exposition(), gamma=5)
    assert "the scrape has 3 draft positions: use --gamma 3 or less" in err
    err = _bad(tmp_path, monkeypatch, capsys, exposition(), opts="[model=]")
    assert "option 'model' needs a value" in err


def test_synth_acceptance_samples_a_scrape(tmp_path, monkeypatch):
    path = scrape(tmp_path, exposition())
    out = tmp_path / "synth.parquet"
    argv = ["dsim", "synth-acceptance", "--acceptance", f"vllm:{path}[spread=0,spread_req=0]"]
    argv += ["--gamma", "3", "--sequences", "400", "--rounds", "50", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    main()
    df, meta = read_acceptance_trace(out)
    assert set(df["domain"]) == {"vllm"} and meta["gamma"] == 3
    survival = (df["accepted"].to_numpy()[:, None] >= np.arange(1, 4)).mean(axis=0)
    np.testing.assert_allclose(survival, UNCONDITIONAL, atol=0.02)  # 20,000 rounds: > 5 s.e.

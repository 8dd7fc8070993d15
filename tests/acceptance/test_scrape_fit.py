"""`vllm:SCRAPE` serves the scrape's own conditional curve, and `dsim acceptance show` says so.

A scrape is written from a known curve (vLLM's counters: drafts and accepted prefixes per
position), read by dsim, simulated, and the simulated rounds are counted the way vLLM counts
them; the counts read back must give the curve again.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli, write_flat_profile
from samples import exposition, scrape
from scipy.special import expit, logit

from dsim.acceptance.parametric import DomainModel, ParametricAcceptance, fit_shift, serving_curve
from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.synth import write_synthetic_trace
from dsim.acceptance.trace import read_acceptance_trace
from dsim.acceptance.vllm_metrics import read_vllm_acceptance
from dsim.engine.backend import Simulated
from dsim.errors import Notice
from dsim.run import run_engine
from dsim.run_inputs import resolve
from dsim.run_spec import RunSpec

CURVE = np.array([0.80, 0.70, 0.60, 0.50])  # conditional acceptance per position
DRAFTS = 200_000


def known_scrape(tmp_path, curve=CURVE, name="known.prom"):
    """vLLM's counters of DRAFTS rounds that accept exactly `curve`, on one engine."""
    counts = tuple(int(c) for c in np.round(DRAFTS * np.cumprod(curve)))
    text = exposition(engines={"0": (DRAFTS, DRAFTS * len(curve), counts)})
    return scrape(tmp_path, text, name)


class Counting:
    """An acceptance source that counts its rounds as vLLM's spec-decode counters do."""

    def __init__(self, source) -> None:
        self.source, self.gamma = source, source.gamma
        self.drafts, self.per_position = 0, np.zeros(source.gamma, dtype=np.int64)

    def bind(self, n: int, rng: np.random.Generator) -> None:
        self.source.bind(n, rng)

    def draw(self, idx: np.ndarray, rng: np.random.Generator):
        conf, accepted = self.source.draw(idx, rng)
        self.drafts += len(idx)
        self.per_position += (accepted[:, None] > np.arange(self.gamma)).sum(axis=0)
        return conf, accepted


def fixed_run(tmp_path, acceptance: str, source=None, n: int = 3000) -> Counting:
    """A `fixed:gamma` dsim run (every draft verified, as vLLM verifies), its rounds counted."""
    gamma = len(CURVE)
    spec = RunSpec(
        trace=f"synthetic:rate=50,n={n},prompt=64,output=100,sigma=0",
        profile=str(write_flat_profile(tmp_path / "flat.csv", 10.0)),
        acceptance=acceptance,
        policy=f"fixed:{gamma}",
        gamma=gamma,
        seed=1,
    )
    inputs = resolve(spec)
    counting = Counting(source or inputs.acceptance)
    run_engine(inputs.engine, inputs.workload, Simulated(counting))
    return counting


def conditional(counts: Counting) -> tuple[np.ndarray, np.ndarray]:
    """The conditional curve of the counted rounds and each figure's binomial standard error."""
    reached = np.concatenate([[counts.drafts], counts.per_position[:-1]])
    curve = counts.per_position / reached
    return curve, np.sqrt(curve * (1 - curve) / reached)


def test_round_trip_through_a_fixed_run(tmp_path):
    """Known curve -> scrape -> dsim -> a `fixed:4` run -> its counters as a scrape -> the curve.

    3,000 requests of 100 tokens, seed 1: ~105k rounds reach position 1 and ~35k position 4
    (binomial standard errors 0.0012 to 0.0027; this run lands within 0.0035 of the curve). The
    fit's own expectation is within 0.003 of the curve (next test), and the per-request spread
    makes the real standard error 1.4-1.5x the binomial one (30 seeds of `served_curve` at this
    size: mean gaps within 0.002, sd 0.0018 to 0.0037), so the bound 0.01 + 3 s.e.
    (0.014 to 0.018) is over 4.5 real standard errors away: a chance failure has probability
    below 1e-4. Power: the model the fit replaced (the scrape's curve as latent means, one
    logit shift for tau) serves 0.777 / 0.699 / 0.628 / 0.567 in the same run, 0.023 below at
    position 1 and 0.028 / 0.067 above at positions 3-4, beyond the bound: asserted below.
    """
    path = known_scrape(tmp_path)
    counts = fixed_run(tmp_path, f"vllm:{path}")
    text = exposition(engines={"0": (counts.drafts, counts.drafts * 4, counts.per_position)})
    back = read_vllm_acceptance(scrape(tmp_path, text, "back.prom"))
    np.testing.assert_allclose(back.conditional, CURVE, atol=0.01)
    curve, se = conditional(counts)
    assert np.all(np.abs(curve - CURVE) <= 0.01 + 3 * se), (curve, se)

    acc = read_vllm_acceptance(path)
    q = tuple(acc.conditional.tolist())
    old = ParametricAcceptance(4, [DomainModel("old", q, fit_shift(q, acc.tau, 1.0, 0.5))], [1.0])
    old_curve, old_se = conditional(fixed_run(tmp_path, f"vllm:{path}", source=old))
    outside = np.abs(old_curve - CURVE) > 0.01 + 3 * old_se
    assert outside[[0, 2, 3]].all(), old_curve


@pytest.mark.parametrize(
    ("options", "spread", "spread_req"),
    [
        ("", 1.0, 0.5),
        ("[spread=2,spread_req=1]", 2.0, 1.0),
        ("[spread=0.5,spread_req=1.5]", 0.5, 1.5),
    ],
)
def test_expected_curve_is_the_scrapes_under_any_spreads(tmp_path, options, spread, spread_req):
    """The fitted latent means, served at full verification over 40x the fit's requests with
    other draws, give the scrape's conditional curve within 0.01 (in fact within 0.003)."""
    source = parse_acceptance(f"vllm:{known_scrape(tmp_path)}{options}", len(CURVE))
    assert (source.spread, source.spread_req) == (spread, spread_req)
    expected, _ = serving_curve(source.latent[0], spread, spread_req, n_req=40_000, seed=99)
    np.testing.assert_allclose(expected, CURVE, atol=0.003)
    assert np.abs(source.latent[0] - logit(CURVE)).max() > 0.1  # selection undone: not the curve


def test_positions_never_reached_are_said_not_invented(tmp_path, monkeypatch, capsys):
    """Position 3 was reached but never accepted: 4 was never reached. dsim accepts neither."""
    path = known_scrape(tmp_path, np.array([0.8, 0.6, 0.0, 0.0]))
    with pytest.warns(Notice, match="no round reached draft position 4"):
        source = parse_acceptance(f"vllm:{path}", 4)
    curve = serving_curve(source.latent[0], 1.0, 0.5, n_req=4000, seed=7)[0]
    np.testing.assert_allclose(curve[:3], [0.8, 0.6, 0.0], atol=0.003)
    out = tmp_path / "run"
    flat = str(write_flat_profile(tmp_path / "flat.csv", 10.0))
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=20", "--profile", flat,
        "--acceptance", f"vllm:{path}", "--gamma", "4", "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 0
    assert f"dsim: note: {path}: no round reached draft position 4" in err
    assert err.count("dsim: note:") == 1
    code, text, _ = run_cli(monkeypatch, capsys, "acceptance", "show", f"vllm:{path}")
    assert code == 0 and "no round of the scrape reached position 4" in text
    row4 = next(line for line in text.splitlines() if line.strip("│┃ ").startswith("4 "))
    assert row4.split("│")[2].strip() == "-"  # no conditional figure read at position 4


def test_show_prints_read_and_simulated_curves(tmp_path, monkeypatch, capsys):
    path = known_scrape(tmp_path)
    code, text, err = run_cli(monkeypatch, capsys, "acceptance", "show", f"vllm:{path}", "--json")
    assert code == 0 and err == ""
    report = json.loads(text)
    read, sim = report["read"], report["simulated"]
    assert report["gamma"] == 4 and read["positions"] == 4 and read["drafts"] == DRAFTS
    np.testing.assert_allclose(read["conditional"], CURVE, atol=1e-5)
    np.testing.assert_allclose(read["unconditional"], np.cumprod(CURVE), atol=1e-5)
    np.testing.assert_allclose(read["tau"], 1 + np.cumsum(np.cumprod(CURVE)), atol=1e-4)
    # 2,000 requests x 300 tokens: ~10^5 rounds at position 1, s.e. below 0.004 everywhere
    gap = np.abs(np.array(sim["conditional"]) - CURVE)
    assert np.all(gap <= 0.01 + 3 * np.array(sim["se"])), sim
    np.testing.assert_allclose(sim["tau"], read["tau"], rtol=0.01)
    model = report["model"]
    assert (model["spread"], model["spread_req"]) == (1.0, 0.5)
    np.testing.assert_allclose(
        model["latent"], expit(parse_acceptance(f"vllm:{path}", 4).latent[0])
    )

    code, table, _ = run_cli(monkeypatch, capsys, "acceptance", "show", f"vllm:{path}")
    assert code == 0
    for name in ("read cond", "read uncond", "latent mean", "simulated", "tau at each gamma"):
        assert name in table
    assert "sim AUC" in table and "spreads and noise: assumed" in table
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == 4 + 4 + 4  # one per position, one per gamma, one per position
    cells = [c.strip() for c in rows[1].split("│")[1:-1]]
    assert cells[:3] == ["2", "0.7000", f"{0.56:.4f}"]
    tau_row = [c.strip() for c in rows[7].split("│")[1:-1]]
    assert tau_row[:2] == ["4", f"{1 + np.cumprod(CURVE).sum():.3f}"]


def test_show_without_a_scrape(monkeypatch, capsys):
    """Any spec shows what it serves; `positions:` means are served as given at spreads 0."""
    code, text, _ = run_cli(
        monkeypatch, capsys, "acceptance", "show", "positions:0.9,0.5", "--gamma", "2", "--json"
    )
    assert code == 0
    report = json.loads(text)
    assert report["read"] is None and report["model"]["latent"] == pytest.approx([0.9, 0.5])
    np.testing.assert_allclose(report["simulated"]["conditional"], [0.9, 0.5], atol=0.01)


def test_show_reads_a_trace_as_its_rounds(tmp_path, monkeypatch, capsys):
    """A trace's recorded rounds are read as vLLM would count them; gamma defaults to its own."""
    out = tmp_path / "iid.parquet"
    write_synthetic_trace("iid:0.7", 3, 200, 40, seed=2, out=out, command="x")
    accepted = read_acceptance_trace(out)[0]["accepted"].to_numpy()
    code, text, _ = run_cli(monkeypatch, capsys, "acceptance", "show", str(out), "--json")
    assert code == 0
    report = json.loads(text)
    read = report["read"]
    assert report["gamma"] == 3 and read["kind"] == "trace" and read["drafts"] == 8000
    survival = [(accepted >= k).mean() for k in (1, 2, 3)]
    np.testing.assert_allclose(read["unconditional"], survival, rtol=1e-12)
    assert report["model"] is None  # a replayed trace has no latent means or spreads


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["vllm:{path}", "--gamma", "7"],
            "the scrape has 4 draft positions: use --gamma 4 or less",
        ),
        (["bogus:1"], "acceptance 'bogus:1': not a known acceptance spec and no such file"),
        (["vllm:{path}[spread=x]"], "spread"),
        (["vllm:{tmp}/missing.prom"], "missing.prom"),
        (
            ["preset:dspark:chat", "--gamma", "0"],
            "--gamma must be an integer >= 1 and <= 64, got 0",
        ),
        (["preset:dspark:chat", "--requests", "0"], "--requests must be at least 1, got 0"),
    ],
)
def test_show_bad_input_is_one_line(tmp_path, monkeypatch, capsys, args, expected):
    path = known_scrape(tmp_path)
    argv = [a.format(path=path, tmp=tmp_path) for a in args]
    code, out, err = run_cli(monkeypatch, capsys, "acceptance", "show", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("dsim: error:")
    assert expected in err


def test_run_past_the_scrapes_positions_names_the_fix(tmp_path, monkeypatch, capsys):
    path = known_scrape(tmp_path)
    out = tmp_path / "run"
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:n=5", "--acceptance", f"vllm:{path}",
        "--gamma", "7", "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    assert f"{path}: the scrape has 4 draft positions: use --gamma 4 or less" in err


def test_synth_acceptance_with_tokens_weighs_rounds_as_serving(tmp_path, monkeypatch, capsys):
    """`--tokens`: each sequence runs until it has emitted that many tokens, so the trace's
    conditional curve is the scrape's (~130k rounds at position 1, s.e. <= 0.003); `--rounds`
    alone weighs requests equally and reads higher under the per-request spread."""
    path, out = known_scrape(tmp_path), tmp_path / "t.parquet"
    code, _, err = run_cli(
        monkeypatch, capsys, "synth-acceptance", "--acceptance", f"vllm:{path}", "--gamma", "4",
        "--sequences", "1500", "--tokens", "300", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    df, _ = read_acceptance_trace(out)
    per_seq = df.groupby("seq_id")["accepted"]
    emitted = per_seq.sum() + per_seq.size()
    last = df.groupby("seq_id").tail(1).set_index("seq_id")["accepted"] + 1
    assert (emitted >= 300).all() and (emitted - last < 300).all()  # stops on crossing 300
    assert list(df["round"]) == list(df.groupby("seq_id").cumcount())
    a = df["accepted"].to_numpy()
    reached = np.array([(a >= k).sum() for k in range(5)])
    curve = reached[1:] / reached[:-1]
    se = np.sqrt(curve * (1 - curve) / reached[:-1])
    assert np.all(np.abs(curve - CURVE) <= 0.01 + 3 * se), curve

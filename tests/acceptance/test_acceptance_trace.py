"""Acceptance-trace format, its replay as an AcceptanceSource, and synthetic traces."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from samples import GAMMA, META, ROUNDS, make_df
from scipy.special import expit, logit

from dsim.acceptance.replay import TraceAcceptance
from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.synth import synthesize_trace, write_synthetic_trace
from dsim.acceptance.trace import (
    read_acceptance_trace,
    read_trace_metadata,
    update_trace_metadata,
    write_acceptance_trace,
)
from dsim.errors import InputError


def write_raw(tmp_path, df: pd.DataFrame, meta: object = None) -> str:
    """Write a trace without validation, to test what the reader rejects."""
    path = tmp_path / "bad.parquet"
    df.to_parquet(path, index=False)
    side = {**META, "date": "2025-01-01", "gamma": GAMMA} if meta is None else meta
    (tmp_path / "bad.json").write_text(side if isinstance(side, str) else json.dumps(side))
    return str(path)


def test_round_trip_sorts_rows_and_fills_metadata(tmp_path):
    df = make_df()
    df["tv_1"], df["tv_2"], df["tv_3"] = 0.5, 0.25, 1.0
    path = tmp_path / "t.parquet"
    write_acceptance_trace(df.sample(frac=1.0, random_state=3), path, META)
    back, meta = read_acceptance_trace(path)
    assert list(back["seq_id"]) == list(df["seq_id"]) and list(back["round"]) == list(df["round"])
    assert back["seq_id"].dtype == np.int64 and back["round"].dtype == np.int32
    cols = ["conf_1", "conf_2", "conf_3", "tv_1", "tv_2", "tv_3", "accepted", "domain"]
    for col in cols:
        assert list(back[col]) == list(df[col]), col
    assert meta["gamma"] == GAMMA and meta["date"] and meta["drafter"] == "d"


@pytest.mark.parametrize(
    ("mutate", "row", "text"),
    [
        (lambda d: d.drop(columns="conf_2"), None, "'conf_2'"),
        (lambda d: d.drop(columns="accepted"), None, "'accepted'"),
        (lambda d: d.assign(conf_1=d.conf_1.where(d.index != 6)), 7, "NaN"),
        (lambda d: d.assign(conf_3=d.conf_3.where(d.index != 3, 1.5)), 4, "1.5 is outside [0, 1]"),
        (
            lambda d: d.assign(conf_2=d.conf_2.where(d.index != 0, -0.1)),
            1,
            "'conf_2': -0.1 is outside",
        ),
        (lambda d: d.assign(accepted=d.accepted.where(d.index != 2, 4)), 3, "exceeds gamma"),
        (lambda d: d.assign(accepted=d.accepted.where(d.index != 9, -1)), 10, "negative"),
        (lambda d: d.assign(accepted=d.accepted.where(d.index != 4, 1.5)), 5, "integer"),
        (lambda d: d.assign(gamma=d.gamma.where(d.index != 5, 4)), 6, "differs"),
        (lambda d: d.assign(seq_id=d.seq_id.where(d.index != 11, 2.5)), 12, "integer"),
        (lambda d: d.assign(round=d["round"].where(d.index != 7, 1)), 8, "without gaps"),
        (lambda d: d.assign(round=d["round"].where(d.index != 9, 6)), 10, "without gaps"),
        (lambda d: d.assign(domain=d.domain.where(d.index != 6, "math")), 7, "domain changes"),
        (lambda d: d.assign(domain=d.domain.where(d.index != 2, None)), 3, "domain"),
        (lambda d: d.assign(tv_1=0.5), None, "'tv_2'"),
    ],
)
def test_reader_names_row_and_problem(tmp_path, mutate, row, text):
    path = write_raw(tmp_path, mutate(make_df()))
    with pytest.raises(InputError) as err:
        read_acceptance_trace(path)
    assert err.value.path == path and err.value.row == row
    assert text in err.value.problem


@pytest.mark.parametrize(
    ("sidecar", "text"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "JSON object"),
        ({**META, "gamma": GAMMA}, "'date'"),
        ({**META, "date": "x", "gamma": 5}, "gamma 5 != trace gamma 3"),
    ],
)
def test_reader_rejects_bad_sidecar(tmp_path, sidecar, text):
    path = write_raw(tmp_path, make_df(), sidecar)
    with pytest.raises(InputError, match="bad.json") as err:
        read_acceptance_trace(path)
    assert text in err.value.problem


def test_reader_requires_sidecar(tmp_path):
    path = write_raw(tmp_path, make_df())
    (tmp_path / "bad.json").unlink()
    with pytest.raises(InputError, match="bad.json: missing sidecar"):
        read_acceptance_trace(path)


def test_writer_validates_and_leaves_nothing_behind(tmp_path):
    df = make_df()
    df.loc[3, "conf_1"] = 1.5
    path = tmp_path / "t.parquet"
    with pytest.raises(InputError, match="row 4"):
        write_acceptance_trace(df, path, META)
    with pytest.raises(InputError, match="'drafter'"):
        write_acceptance_trace(make_df(), path, {k: v for k, v in META.items() if k != "drafter"})
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def trace_path(tmp_path):
    path = tmp_path / "t.parquet"
    write_acceptance_trace(make_df(), path, META)
    return path


def identify(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sequence index, round) of replayed rows, decoded from conf_1 (see make_df)."""
    code = np.rint(conf[:, 0] * 1000).astype(int) - 1
    return code // ROUNDS, code % ROUNDS


def test_replay_walks_recorded_rounds_in_order(trace_path):
    src = TraceAcceptance(trace_path, GAMMA)
    rng = np.random.default_rng(0)
    src.bind(6, rng)
    first_seq = None
    for r in range(ROUNDS):
        conf, accepted = src.draw(np.arange(6), rng)
        seq, rnd = identify(conf)
        first_seq = seq if first_seq is None else first_seq
        assert (rnd == r).all() and (seq == first_seq).all()
        assert (accepted == (seq + rnd) % (GAMMA + 1)).all()  # recorded, not yet min()'d
    assert list(src.domain_names) == list(np.where(first_seq % 2 == 0, "chat", "code"))


def test_replay_advances_only_drawn_requests_and_continues_in_domain(trace_path):
    src = TraceAcceptance(trace_path, GAMMA)
    rng = np.random.default_rng(1)
    src.bind(40, rng)
    src.draw(np.arange(0, 40, 2), rng)
    _, rnd = identify(src.draw(np.arange(40), rng)[0])
    assert list(rnd[::2]) == [1] * 20 and list(rnd[1::2]) == [0] * 20
    domains = src.domain_names.copy()
    for _ in range(2 * ROUNDS):
        seq, rnd = identify(src.draw(np.arange(40), rng)[0])
    assert (np.where(seq % 2 == 0, "chat", "code") == domains).all()  # same domain after wrap
    assert list(rnd[::2]) == [1] * 20 and list(rnd[1::2]) == [0] * 20  # 12 and 11 rounds drawn


def test_replay_is_deterministic(trace_path):
    outs = []
    for _ in range(2):
        src, rng = TraceAcceptance(trace_path, GAMMA), np.random.default_rng(7)
        src.bind(9, rng)
        outs.append([src.draw(np.arange(9), rng)[0] for _ in range(12)])
    assert all((a == b).all() for a, b in zip(*outs, strict=True))


def test_replay_gamma_truncates_and_caps(trace_path):
    src = TraceAcceptance(trace_path, 2)
    rng = np.random.default_rng(0)
    src.bind(8, rng)
    conf, accepted = src.draw(np.arange(8), rng)
    seq, rnd = identify(conf)
    assert conf.shape == (8, 2)
    assert (accepted == np.minimum((seq + rnd) % (GAMMA + 1), 2)).all()
    with pytest.raises(InputError, match="recorded with gamma 3, cannot replay 4"):
        TraceAcceptance(trace_path, 4)


def test_replay_calibration_precedence(trace_path, tmp_path):
    def first_round(**kw):
        src = TraceAcceptance(trace_path, GAMMA, **kw)
        rng = np.random.default_rng(0)
        src.bind(3, rng)
        return src.draw(np.arange(3), rng)[0], src.calibration_source

    raw, source = first_round()
    assert source == "raw"
    scaled = expit(logit(raw) / np.array([2.0, 0.5, 1.0]))
    given, _ = first_round(calibration={"temperatures": [2.0, 0.5, 1.0, 9.0]})
    np.testing.assert_allclose(given, scaled, rtol=1e-12)

    update_trace_metadata(trace_path, {"calibration": {"temperatures": [2.0, 0.5, 1.0]}})
    assert read_trace_metadata(trace_path)["calibration"]["temperatures"][0] == 2.0
    from_sidecar, source = first_round()
    np.testing.assert_allclose(from_sidecar, scaled, rtol=1e-12)
    assert source == "sidecar"
    forced_raw, _ = first_round(calibration="raw")
    np.testing.assert_array_equal(forced_raw, raw)

    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"temperatures": [1.0, 1.0, 4.0]}))
    from_file, source = first_round(calibration=cal)
    np.testing.assert_allclose(from_file, expit(logit(raw) / [1.0, 1.0, 4.0]), rtol=1e-12)
    assert source == str(cal)
    cal.write_text(json.dumps({"temperatures": [1.0, 1.0]}))
    with pytest.raises(InputError, match="cal.json: calibration has 2 temperatures, gamma is 3"):
        first_round(calibration=cal)
    cal.write_text(json.dumps({"temperatures": [1.0, 0.0, 1.0]}))
    with pytest.raises(InputError, match="temperature 2 must be positive"):
        first_round(calibration=cal)


def test_parse_acceptance_dispatches_trace_files(trace_path):
    src = parse_acceptance(str(trace_path), 2, calibration={"temperatures": [1.0, 1.0]})
    assert isinstance(src, TraceAcceptance) and src.gamma == 2


class CountingSource:
    """Stand-in AcceptanceSource: conf encodes (request, call), accepted = call mod (gamma+1)."""

    gamma = 2

    def bind(self, n_requests: int, rng: np.random.Generator) -> None:
        self.calls = 0

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        conf = np.repeat(((idx + 1) * 0.01 + self.calls * 0.1)[:, None], self.gamma, axis=1)
        accepted = np.full(len(idx), self.calls % (self.gamma + 1))
        self.calls += 1
        return conf, accepted


def test_synthesize_trace_lays_requests_out_as_sequences():
    df = synthesize_trace(CountingSource(), 3, 4, np.random.default_rng(0), domain="stand-in")
    assert len(df) == 12 and set(df["domain"]) == {"stand-in"}
    np.testing.assert_allclose(df["conf_1"], (df["seq_id"] + 1) * 0.01 + df["round"] * 0.1)
    assert list(df["accepted"]) == list(df["round"] % 3)


def test_write_synthetic_trace_from_a_mix(tmp_path):
    out = tmp_path / "mix.parquet"
    spec = "mix:iid:0.9=1,iid:0.2=1"
    write_synthetic_trace(spec, 3, 40, 6, seed=5, out=out, command="dsim synth-acceptance ...")
    df, meta = read_acceptance_trace(out)
    assert meta["source"] == spec and meta["seed"] == 5 and meta["gamma"] == 3
    by_domain = df.groupby("domain")["accepted"].mean()
    assert set(by_domain.index) == {"iid:0.9", "iid:0.2"}
    assert by_domain["iid:0.9"] > 2.0 > 0.5 > by_domain["iid:0.2"]
    again = tmp_path / "again.parquet"
    write_synthetic_trace(spec, 3, 40, 6, seed=5, out=again, command="x")
    assert read_acceptance_trace(again)[0].equals(df)


# --- the replay approximation (docs/acceptance-trace.md): its direction of bias -------------


def _token_acceptance(streams: int, length: int, stay: float, rng) -> np.ndarray:
    """Per-token acceptance probability of a text whose easy/hard stretches persist."""
    state = np.empty((streams, length), dtype=np.int64)
    state[:, 0] = rng.integers(0, 2, streams)
    for t in range(1, length):
        flip = rng.random(streams) > stay
        state[:, t] = np.where(flip, 1 - state[:, t - 1], state[:, t - 1])
    return np.array([0.3, 0.95])[state]


def _decode(q: np.ndarray, verify: int, rng) -> np.ndarray:
    """Accepted prefix per round when every round verifies `verify` drafts, to the text's end."""
    rows = np.arange(len(q))[:, None]
    t = np.zeros(len(q), dtype=np.int64)
    out = []
    while (t + verify + 1 < q.shape[1]).all():
        ok = rng.random((len(q), verify)) < q[rows, t[:, None] + np.arange(verify)]
        accepted = np.cumprod(ok, axis=1).sum(axis=1)
        out.append(accepted)
        t += 1 + accepted
    return np.concatenate(out)


@pytest.mark.parametrize(("stay", "low", "high"), [(0.5, -0.02, 0.02), (0.95, 0.04, 0.2)])
def test_min_replay_is_exact_without_clustering_and_pessimistic_with_it(stay, low, high):
    """Replaying full-gamma rounds with min(accepted, l) under-counts easy rounds for l < gamma."""
    rng = np.random.default_rng(0)
    q = _token_acceptance(200, 1500, stay, rng)
    recorded = _decode(q, 7, rng)
    truth = (1 + _decode(q, 2, rng)).mean()
    replay = (1 + np.minimum(recorded, 2)).mean()
    assert low < (truth - replay) / truth < high

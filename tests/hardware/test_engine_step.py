"""The engine's step: graph padding (a staircase up to the largest captured size), launches
where graphs do not cover a step, host time overlapped with the GPU or serialised after it, and
the presets' graph rules and ragged-verify modes (docs/design.md, The step-time model)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import given
from hypothesis import strategies as st

from dsim.errors import InputError
from dsim.hardware.arch import Parallel
from dsim.hardware.engines import get_engine
from dsim.hardware.gpu_model import Graphs, StepOverhead
from dsim.hardware.graph_priors import VLLM_SIZES, graphs
from dsim.hardware.pricing import pricing
from dsim.hardware.roofline import roofline_profile

TOKENS = Graphs("tokens", (1, 2, 4, 8, 16), "full", "piecewise", 60e-6, 15e-6, "test")
REQUESTS = Graphs("requests", (1, 2, 4, 8), "full", "eager", 60e-6, 15e-6, "test")
NO = np.array([False])


def test_a_decode_step_pads_to_the_next_captured_size_and_no_further():
    n = np.array([1.0, 3.0, 5.0, 9.0, 16.0, 17.0, 40.0])
    padded = TOKENS.padded(n, n, np.zeros(7, bool))
    np.testing.assert_array_equal(padded, [1, 4, 8, 16, 16, 17, 40])  # past 16: unpadded


def test_requests_keyed_graphs_pad_requests_and_keep_tokens_per_request():
    tokens, seqs = np.array([3.0 * 4, 5.0 * 4, 9.0 * 4]), np.array([3.0, 5.0, 9.0])
    padded = REQUESTS.padded(tokens, seqs, np.zeros(3, bool))
    np.testing.assert_array_equal(padded, [4 * 4, 8 * 4, 9 * 4])


def test_a_prefill_step_is_never_padded():
    assert TOKENS.padded(np.array([3.0]), np.array([1.0]), np.array([True]))[0] == 3.0


@given(st.integers(1, 600), st.integers(1, 600))
def test_padding_is_a_monotone_staircase(a, b):
    lo, hi = sorted((a, b))
    g = graphs("vllm", "h200")
    pad = g.padded(np.array([float(lo), float(hi)]), np.ones(2), np.zeros(2, bool))
    assert pad[0] <= pad[1] and (pad >= [lo, hi]).all()
    if hi <= VLLM_SIZES[-1]:
        assert pad[1] in VLLM_SIZES


def test_launches_by_graph_mode():
    """Full decode graphs: no launches within the sizes; eager past them (every layer's kernels);
    prefill piecewise where the engine has piecewise graphs, eager where it has not."""
    layers = 10
    pre = np.array([False, False, True, True])
    n = np.array([8.0, 32.0, 8.0, 32.0])
    got = TOKENS.launches(n, n, pre, layers)
    np.testing.assert_allclose(got, [0.0, 10 * 60e-6, 10 * 15e-6, 10 * 60e-6])
    got = REQUESTS.launches(n, n, pre, layers)
    np.testing.assert_allclose(got, [0.0, 10 * 60e-6, 10 * 60e-6, 10 * 60e-6])
    piecewise = graphs("vllm-0.8", "h200")
    assert piecewise.launches(np.array([8.0]), np.array([8.0]), NO, 36)[0] == pytest.approx(
        36 * piecewise.piecewise_layer_s
    )


@pytest.mark.parametrize(
    "sizes", [(), (4, 2), (1, 1, 2), (0, 1), (1.5, 2)], ids=["empty", "down", "dup", "zero", "f"]
)
def test_capture_sizes_not_increasing_are_refused_in_one_line(sizes):
    with pytest.raises(InputError, match="capture sizes must be positive integers in increasing"):
        Graphs("tokens", sizes, "full", "piecewise", 0.0, 0.0, "test")


def test_graphs_keyed_by_anything_else_or_an_unknown_mode_are_refused():
    with pytest.raises(InputError, match="tokens or requests"):
        Graphs("batches", (1, 2), "full", "piecewise", 0.0, 0.0, "test")
    with pytest.raises(InputError, match="unknown decode graph mode 'partial'; known: full"):
        Graphs("tokens", (1, 2), "partial", "piecewise", 0.0, 0.0, "test")


def test_an_eager_engine_pads_nothing_and_launches_every_step():
    eager = Graphs("tokens", (1, 2, 4), "eager", "eager", 60e-6, 15e-6, "test")
    n = np.array([3.0, 9.0])
    np.testing.assert_array_equal(eager.padded(n, n, np.zeros(2, bool)), n)
    np.testing.assert_allclose(eager.launches(n, n, np.zeros(2, bool), 10), [6e-4, 6e-4])


def test_a_step_is_max_of_gpu_and_overlapped_host_plus_serialised_host():
    price = pricing("qwen3-8b", "h200", Parallel(), True, None)
    one = [np.array([v]) for v in (8.0, 8.0, 2048.0)]
    gpu = float(price.step(StepOverhead(0.0, 0.0), *one, NO)[0])
    hidden = StepOverhead(0.0, 0.0, overlap_step_s=gpu / 2)
    outlasts = StepOverhead(0.0, 0.0, overlap_step_s=2 * gpu)
    serial = StepOverhead(0.0, 0.0, per_step_s=1e-3)
    assert float(price.step(hidden, *one, NO)[0]) == gpu
    assert float(price.step(outlasts, *one, NO)[0]) == pytest.approx(2 * gpu)
    assert float(price.step(serial, *one, NO)[0]) == pytest.approx(gpu + 1e-3)


def test_padding_costs_what_the_padded_tokens_cost():
    g = graphs("sglang", "h200")
    padded = pricing("qwen3-8b", "h200", Parallel(), True, g)
    bare = pricing("qwen3-8b", "h200", Parallel(), True, None)
    r = np.array([17.0])  # pads to 24 requests
    c = np.array([2048.0])
    costs = padded.costs(StepOverhead(0.0, 0.0), r, r, c, NO)
    run_24 = bare.costs(StepOverhead(0.0, 0.0), np.array([24.0]), r, c, NO)["gpu"]
    assert costs["gpu"][0] == pytest.approx(run_24[0]) and costs["padding"][0] > 0


@pytest.mark.parametrize(
    ("engine", "mode"), [("vllm", "piecewise"), ("vllm-0.8", "same"), ("sglang", "eager")]
)
def test_ragged_penalty_is_paid_only_in_a_worse_graph_mode_and_is_hoppers_prior(engine, mode):
    ragged = get_engine(engine, "h200").ragged
    assert ragged.mode == mode and ragged.penalty == 0.0
    assert ragged.high == (0.0 if mode == "same" else pytest.approx(1 / 0.84 - 1, abs=1e-4))


def test_sglang_captures_more_on_a_bigger_gpu():
    assert graphs("sglang", "h200").sizes[-1] == 256 and graphs("sglang", "h100").sizes[-1] == 160
    assert graphs("trtllm", "h100") is None  # not modelled: NIM's graph settings unpublished


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capture-sizes", "1,4,2"], "--capture-sizes must be positive integers in increasing"),
        (["--capture-sizes", "1,0"], "--capture-sizes: '0' is not a positive integer"),
        (["--graph-mode", "partial"], "--graph-mode: unknown 'partial'; known: full, piecewise"),
        (["--engine", "vllm-0.9"], "unknown engine 'vllm-0.9'; known: vllm, vllm-0.8"),
        (["--engine", "trtllm", "--capture-sizes", "1,2"], "engine trtllm does not model"),
        (["--capture-sizes", "1,2,100000000"], "above engine vllm's step token budget (8192)"),
        (["--capture-sizes", "1,2", "--graph-mode", "eager"], "no effect with --graph-mode eager"),
    ],
)
def test_bad_graph_input_is_one_line_exit_2_and_writes_nothing(
    monkeypatch, capsys, tmp_path, args, message
):
    out = tmp_path / "p.csv"
    code, _, err = run_cli(monkeypatch, capsys, "profile", "--roofline", "h200", "--model",
                           "qwen3-8b", *args, "--out", str(out))  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["p.parquet", "p.png", "p"])
def test_a_profile_is_written_as_a_csv_only(monkeypatch, capsys, tmp_path, name):
    """A CSV under another name would be read as that format (a .parquet of CSV text)."""
    code, _, err = run_cli(monkeypatch, capsys, "profile", "--roofline", "h200", "--model",
                           "qwen3-8b", "--out", str(tmp_path / name))  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "end --out in .csv" in err, err
    assert list(tmp_path.iterdir()) == []


def test_user_capture_sizes_and_mode_price_the_step_and_are_recorded():
    """Sizes 1,64: a 3-token decode step pads to 64; eager decode pads nothing and pays launches."""
    small, _ = roofline_profile("h200", "qwen3-8b", [2048], engine="gpu-only")
    padded, meta = roofline_profile("h200", "qwen3-8b", [2048], capture_sizes=(1, 64))
    assert list(meta["engine"]["graphs"]["sizes"]) == [1, 64]
    pick = (padded["phase"] == "verify") & (padded["num_seqs"] == 1)
    at = dict(zip(padded.loc[pick, "batch_tokens"], padded.loc[pick, "latency_ms"], strict=True))
    assert at[3] == at[8]  # both run as 64 tokens
    eager, meta = roofline_profile("h200", "qwen3-8b", [2048], graph_mode="eager")
    assert meta["engine"]["graphs"]["decode"] == "eager"
    assert (eager["latency_ms"] >= small["latency_ms"] - 1e-9).all()

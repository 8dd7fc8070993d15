"""The overload rule and the steady-state figures (docs/pareto.md) on closed forms and on
simulated traces that saturate and that do not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsim.metrics import per_user, queue_length, stability, steady_window
from dsim.run import simulate
from dsim.run_spec import RunSpec


def _requests(arrival, first, finish, output) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": np.asarray(arrival, float),
            "first_token_s": np.asarray(first, float),
            "finish_s": np.asarray(finish, float),
            "output_tokens": np.asarray(output, np.int64),
        }
    )


def _verdict(requests: pd.DataFrame) -> dict:
    u = per_user(requests)
    return stability(requests, u["ttft_s"], u["tps"])


def test_steady_window_and_queue_length_closed_form() -> None:
    assert steady_window(np.array([10.0, 20.0, 110.0])) == (20.0, 100.0)
    arrival, finish = np.array([0.0, 1.0, 2.0, 3.0]), np.array([5.0, 1.5, 9.0, 3.0])
    # at t=3: all four arrived; those finished by 3 are 1.5 and 3.0
    assert queue_length(arrival, finish, 3.0) == 2
    assert queue_length(arrival, finish, 0.5) == 1
    assert queue_length(arrival, finish, 9.0) == 0


def test_a_queue_that_grows_is_unstable_and_one_that_does_not_is_stable() -> None:
    n = 400
    arrival = np.arange(n, dtype=float)  # one a second, span 399 s, window [39.9, 359.1]
    served = np.arange(n, dtype=float) * 1.2  # served at 1/1.2 per second: the queue grows
    out = _verdict(_requests(arrival, served + 0.1, served + 1.0, np.full(n, 10)))
    # Q(359.1) - Q(39.9): arrivals 360 - 40 = 320, finishes floor((t-1)/1.2)+1: 299 - 33 = 266
    assert out["queue_growth"] == 320 - 266
    assert out["queue_growth_limit"] == 20.0  # 5% of 400 > 10
    assert out["unstable"]
    ok = _verdict(_requests(arrival, arrival + 0.1, arrival + 1.0, np.full(n, 10)))
    assert ok["queue_growth"] == 0 and not ok["unstable"]
    assert ok["ttft_growth"] == pytest.approx(1.0)


def test_ttft_growth_needs_3x_and_one_second() -> None:
    n = 100
    arrival = np.arange(n, dtype=float) * 10.0  # the queue never grows: each done in < 10 s
    small = np.where(np.arange(n) >= 80, 0.09, 0.02)  # x4.5 but only 70 ms: stable
    out = _verdict(_requests(arrival, arrival + small, arrival + small + 1, np.full(n, 5)))
    assert out["ttft_growth"] == pytest.approx(4.5) and not out["unstable"]
    large = np.where(np.arange(n) >= 80, 3.5, 1.0)  # x3.5 and 2.5 s: unstable
    out = _verdict(_requests(arrival, arrival + large, arrival + large + 1, np.full(n, 5)))
    assert out["queue_growth"] < out["queue_growth_limit"] and out["unstable"]
    large = np.where(np.arange(n) >= 80, 2.9, 1.0)  # 1.9 s more but only x2.9: stable
    assert not _verdict(_requests(arrival, arrival + large, arrival + large + 1, [5] * n))[
        "unstable"
    ]


def test_steady_throughput_spreads_tokens_over_the_decode() -> None:
    # one request at 0 (first token at 0, 11 tokens, finish at 10) and one at 10 (no decode)
    requests = _requests([0.0, 10.0], [0.0, 10.0], [10.0, 10.0], [11, 1])
    out = _verdict(requests)
    assert (out["steady_start_s"], out["steady_end_s"]) == (1.0, 9.0)
    # in [1, 9]: 8 of request 0's 10 later tokens, no first token
    assert out["steady_throughput_tok_s"] == pytest.approx(8 / 8)


TRACE = "synthetic:rate=4,duration=60,prompt=200,output=48"


def test_a_simulated_trace_that_saturates_is_unstable_and_a_light_one_is_not() -> None:
    light = simulate(RunSpec(trace=TRACE, policy="mtp1", max_seqs=16)).summary
    heavy = simulate(RunSpec(trace=TRACE, policy="mtp1", max_seqs=2, rate_scale=40)).summary
    assert not light["unstable"] and light["queue_growth"] <= light["queue_growth_limit"]
    assert heavy["unstable"] and heavy["queue_growth"] > heavy["queue_growth_limit"]
    # saturated from the first arrivals to the last finish, it serves at its capacity both
    # over the steady window and over the whole run; its TTFT keeps growing
    assert heavy["steady_throughput_tok_s"] == pytest.approx(heavy["throughput_tok_s"], rel=0.05)
    assert heavy["ttft_growth"] > 3
    assert heavy["steady_ttft_p50_s"] > 10 * light["steady_ttft_p50_s"]

"""`--window` on the rate-scaled timeline: the arithmetic, the error past the trace's end,
`--window-wrap`, and unscaled runs unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from dsim.errors import InputError
from dsim.run_inputs import load_spec_workload
from dsim.run_spec import RunSpec
from dsim.workload import Workload, load_workload

TRACE = "synthetic:rate=2,duration=100,prompt=50,output=8"


def _spec(**kw) -> RunSpec:
    return RunSpec(trace=TRACE, **kw)


def test_the_window_is_cut_after_the_rate_scale() -> None:
    raw = load_workload(TRACE)
    for scale in (1.0, 2.0, 4.0):
        w = load_spec_workload(_spec(window="5:20", rate_scale=scale))
        # arrivals of trace time [5 s, 20 s) x scale, at scaled times minus 5 s
        keep = (raw.arrival_s / scale >= 5) & (raw.arrival_s / scale < 20)
        np.testing.assert_array_equal(w.arrival_s, raw.arrival_s[keep] / scale - 5)
        np.testing.assert_array_equal(w.output_tokens, raw.output_tokens[keep])
        assert w.arrival_s.max() < 15
    # four times the load in the same 15 simulated seconds: about four times the requests
    n1 = len(load_spec_workload(_spec(window="5:20")))
    n4 = len(load_spec_workload(_spec(window="5:20", rate_scale=4.0)))
    assert 3 * n1 < n4 < 5 * n1


def test_unscaled_windows_are_bit_identical_to_cutting_the_trace() -> None:
    raw = load_workload(TRACE)
    w = load_spec_workload(_spec(window="10:30", max_requests=7))
    keep = (raw.arrival_s >= 10) & (raw.arrival_s < 30)
    assert w.arrival_s.tobytes() == (raw.arrival_s[keep] - 10)[:7].tobytes()


def test_a_window_past_the_scaled_end_is_an_error_naming_the_fix() -> None:
    assert load_spec_workload(_spec(window="0:100"))  # the duration is the trace's end
    assert load_spec_workload(_spec(window="0:25", rate_scale=4.0))  # 100 s / 4
    with pytest.raises(InputError) as err:
        load_spec_workload(_spec(window="0:26", rate_scale=4.0))
    text = str(err.value)
    assert "ends past the trace's end" in text and "spans 25 s at rate scale 4" in text
    assert "--window-wrap" in text and getattr(err.value, "field", None) == "trace"


def test_window_wrap_replays_the_trace_end_to_end() -> None:
    w = Workload(np.array([0.0, 1.0, 3.0]), np.array([1, 2, 3]), np.array([4, 5, 6]), "t")
    assert w.end_s == 3.0
    long = w.wrapped(8.0)  # period: 3 s span + one mean gap (1.5 s) = 4.5 s; two copies
    np.testing.assert_allclose(long.arrival_s, [0, 1, 3, 4.5, 5.5, 7.5])
    np.testing.assert_array_equal(long.prompt_tokens, [1, 2, 3, 1, 2, 3])
    assert long.end_s == 9.0
    spec = _spec(window="0:250", window_wrap=True)
    wrapped = load_spec_workload(spec)  # 100 s of synthetic trace, replayed three times
    raw = load_workload(TRACE)
    assert len(wrapped) == np.sum(raw.arrival_s < 50) + 2 * len(raw)
    np.testing.assert_array_equal(wrapped.arrival_s[len(raw) : 2 * len(raw)], raw.arrival_s + 100)

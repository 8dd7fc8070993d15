"""Trace files read at their true rate or refused: layouts recognised only by their columns and
file kind, `FILE[mapping]` for any other CSV/JSONL, a vLLM benchmark result's lengths, and the
benchmark's arrival process and random lengths."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from conftest import refused, run_cli, write_trace

from dsim.errors import InputError, Notice
from dsim.trace_files import stated_unit
from dsim.workload import bench_arrivals, load_trace, load_workload, random_lengths

SPAN_S = 126.0
N = 200


def _user_csv(path, header="timestamp,prompt_tokens,completion_tokens", scale=1.0):
    """The issue's log: N requests over 126 s, timestamps in seconds times `scale`."""
    t = np.linspace(0.0, SPAN_S, N) * scale
    rows = [f"{x:.6f},{100 + i},{10 + i % 7}" for i, x in enumerate(t)]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_unknown_layout_is_refused_with_the_mapping_to_write(monkeypatch, capsys, tmp_path):
    trace = _user_csv(tmp_path / "user.csv")
    err = refused(monkeypatch, capsys, tmp_path, "--trace", str(trace))
    mapping = f"{trace}[timestamp=timestamp:UNIT,prompt=prompt_tokens,output=completion_tokens]"
    assert mapping in err and "Mooncake JSONL" in err and "BurstGPT CSV" in err
    assert "126 s (1.579 req/s) in s" in err  # what each unit would mean, so the right one shows


def test_a_csv_is_not_mooncake(monkeypatch, capsys, tmp_path):
    """Mooncake's columns in a CSV: its millisecond timestamps are not assumed (the issue's
    126 s log read as 0.126 s)."""
    trace = _user_csv(tmp_path / "renamed.csv", "timestamp,input_length,output_length")
    err = refused(monkeypatch, capsys, tmp_path, "--trace", str(trace))
    assert "has Mooncake JSONL's columns but is a .csv" in err


@pytest.mark.parametrize(("unit", "scale"), [("s", 1.0), ("ms", 1e3), ("us", 1e6)])
def test_mapping_reads_the_true_rate(tmp_path, unit, scale):
    trace = _user_csv(tmp_path / "user.csv", scale=scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Notice)  # the right unit: nothing to say
        w = load_trace(
            f"{trace}[timestamp=timestamp:{unit},prompt=prompt_tokens,output=completion_tokens]"
        )
    assert len(w) == N and w.end_s == pytest.approx(SPAN_S)
    assert list(w.prompt_tokens[:3]) == [100, 101, 102]
    assert f"{N} requests over 126 s, 1.579 req/s" in w.about


def test_mapping_iso_dates(tmp_path):
    trace = tmp_path / "log.csv"
    trace.write_text("when,in,out\n2024-01-01T00:00:00,5,6\n2024-01-01T00:02:06,7,8\n")
    with warnings.catch_warnings():  # one request per 126 s, but two rows tell no rate
        warnings.simplefilter("error", Notice)
        w = load_trace(f"{trace}[timestamp=when:iso,prompt=in,output=out]")
    assert list(w.arrival_s) == [0.0, SPAN_S] and list(w.output_tokens) == [6, 8]


def test_mooncake_jsonl_still_reads_ms(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", [0.0, 63.0, SPAN_S], [1, 2, 3], [4, 5, 6])
    w = load_trace(trace)
    assert w.end_s == pytest.approx(SPAN_S) and "Mooncake JSONL" in w.about


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ("timestamp=ts:s,prompt=prompt_tokens,output=completion_tokens", "missing column(s) 'ts'"),
        ("timestamp=timestamp:sec,prompt=p,output=o", "unknown timestamp unit 'sec'"),
        ("timestamp=timestamp,prompt=p,output=o", "the timestamp has no unit"),
        ("timestamp=timestamp:s,prompt=p", "no output="),
        ("timestamp=timestamp:s,prompt=p,output=o,rate=3", "unknown key(s) ['rate']"),
    ],
)
def test_bad_mapping(monkeypatch, capsys, tmp_path, mapping, expected):
    trace = _user_csv(tmp_path / "user.csv")
    assert expected in refused(monkeypatch, capsys, tmp_path, "--trace", f"{trace}[{mapping}]")


def _vllm_result(path, detailed=True, rate=4.0, concurrency=None, **changes):
    """What `vllm bench serve --save-result [--save-detailed]` writes (vllm/benchmarks/serve.py):
    the settings, the summary and, when detailed, the per-request lists in send order; then
    `changes` (a key set to ... is left out)."""
    data = {"request_rate": rate, "burstiness": 1.0, "max_concurrency": concurrency,
            "num_prompts": 5, "completed": 4, "duration": 2.5}  # fmt: skip
    if detailed:
        data |= {"input_lens": [10, 20, 30, 40, 50], "output_lens": [5, 0, 7, 8, 9],
                 "ttfts": [0.1] * 5, "errors": ["", "timeout", "", "", ""]}  # fmt: skip
    data = {k: v for k, v in (data | changes).items() if v is not ...}
    path.write_text(json.dumps(data))
    return path


def test_vllm_result_lengths_in_order_send_times_redrawn(tmp_path):
    w = load_trace(_vllm_result(tmp_path / "bench.json", concurrency=2), seed=3)
    assert list(w.prompt_tokens) == [10, 30, 40, 50]  # the failed request (0 tokens) dropped
    assert list(w.output_tokens) == [5, 7, 8, 9]
    assert w.arrival_s[-1] == pytest.approx(4 / 4.0) and w.concurrency == 2
    assert "holds no send times" in w.about and "1 failed dropped" in w.about


@pytest.mark.parametrize("rate", ["inf", "Infinity", math.inf, None, ...])
def test_vllm_result_infinite_rate_sends_all_at_once(tmp_path, rate):
    """vLLM writes an infinite rate as "inf"; JSON's Infinity, null and no key mean it too."""
    w = load_trace(_vllm_result(tmp_path / "bench.json", rate=rate))
    assert len(w) == 4 and not w.arrival_s.any()


ENTRIES = "(rows count the list's entries from 1)"
RATE = 'request_rate must be a positive number or "inf", got'
BURST = "burstiness must be a positive finite number, got"
CLIENTS = "max_concurrency must be a positive integer or null, got"
LIST = "must be a non-empty list of token counts, got"
COUNT = "not an integer from 0 to 2^40"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"request_rate": "fast"}, f"{RATE} a string"),
        ({"request_rate": True}, f"{RATE} a boolean"),
        ({"request_rate": 0}, f"{RATE} 0"),
        ({"burstiness": [1.0]}, f"{BURST} a list"),
        ({"burstiness": 0}, f"{BURST} 0"),
        ({"burstiness": math.inf}, f"{BURST} inf"),
        ({"max_concurrency": 2.5}, f"{CLIENTS} 2.5"),
        ({"max_concurrency": "4"}, f"{CLIENTS} a string"),
        ({"max_concurrency": 0}, f"{CLIENTS} 0"),
        ({"input_lens": [10, 20, 30, 40]}, "input_lens has 4 entries but output_lens 5"),
        ({"input_lens": []}, f"input_lens {LIST} an empty list"),
        ({"output_lens": "5,0,7,8,9"}, f"output_lens {LIST} a string"),
        ({"input_lens": [10, 20, "30", 40, 50]}, "row 3: input_lens: a string, not a count (rows"),
        ({"input_lens": [10, 20, 30, True, 50]}, "row 4: input_lens: a boolean, not a count"),
        ({"output_lens": [5, 0, 7, -8, 9]}, f"row 4: output_lens: {COUNT} {ENTRIES}"),
        ({"output_lens": [5, 0, 7, 8, 9.5]}, f"row 5: output_lens: {COUNT}"),
        ({"output_lens": [5, 0, 7, 8, 2**40 + 1]}, f"row 5: output_lens: {COUNT}"),
        # row 2 failed (0 output tokens, dropped): its prompt may be 0, row 3's may not
        ({"input_lens": [10, 0, 0, 40, 50]}, "row 3: input_lens: 0 tokens for a request that did"),
        ({"output_lens": [0, 0, 0, 0, 0]}, "every request of this benchmark run failed"),
    ],
)  # fmt: skip
def test_vllm_result_bad_settings_and_lengths_are_refused(
    monkeypatch, capsys, tmp_path, changes, expected
):
    trace = _vllm_result(tmp_path / "bench.json", **changes)
    err = refused(monkeypatch, capsys, tmp_path, "--trace", str(trace))
    assert err.startswith(f"dsim: error: {trace}: ") and expected in err


def test_vllm_result_settings_read_as_recorded(tmp_path):
    w = load_trace(_vllm_result(tmp_path / "b.json", rate=2, concurrency=3.0, burstiness=None))
    assert w.concurrency == 3 and isinstance(w.concurrency, int)
    assert "gamma arrivals at 2 req/s, burstiness 1" in w.about  # null: vLLM's default
    assert w.prompt_tokens.dtype == np.int64 and list(w.output_tokens) == [5, 7, 8, 9]


def test_vllm_result_without_details_isrefused(monkeypatch, capsys, tmp_path):
    trace = _vllm_result(tmp_path / "bench.json", detailed=False)
    assert "--save-detailed" in refused(monkeypatch, capsys, tmp_path, "--trace", str(trace))


def test_bench_arrivals_as_the_benchmark_draws_them():
    """Gamma gaps of shape b (cv 1/sqrt(b)), rescaled so the last send is at n / rate."""
    rng = np.random.default_rng(0)
    for b in (0.25, 1.0, 4.0):
        sends = bench_arrivals(20_000, 8.0, b, rng)
        gaps = np.diff(sends)
        assert sends[-1] == pytest.approx(20_000 / 8.0)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(b), rel=0.06)
    even = bench_arrivals(4, 2.0, math.inf, rng)
    assert list(even) == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_random_lengths_range_formula():
    """vLLM's RandomDataset: uniform integers in [floor(L(1-r)), ceil(L(1+r))], both ends."""
    rng = np.random.default_rng(0)
    x = random_lengths(101, 0.1, 5000, rng)
    assert x.min() == math.floor(101 * 0.9) and x.max() == math.ceil(101 * 1.1)
    assert set(random_lengths(128, 0.0, 50, rng)) == {128}


def test_lengths_file_rows_replayed_in_order(tmp_path):
    """A closed loop over a file's rows sends them once each, in the file's order."""
    trace = write_trace(tmp_path / "t.jsonl", [0.0, 1.0, 2.0], [11, 22, 33], [4, 5, 6])
    w = load_workload(f"synthetic:concurrency=2,lengths={trace}")
    assert list(w.prompt_tokens) == [11, 22, 33] and w.concurrency == 2
    assert not w.arrival_s.any() and "in order" in w.about


def test_token_counts_are_capped_at_2_to_the_40(tmp_path):
    trace = tmp_path / "log.csv"
    trace.write_text(f"t,p,o\n0,{2**40},6\n2,7,{2**40 + 1}\n")
    with pytest.raises(InputError, match=f"row 2: column 'o': must be at most {2**40}$"):
        load_trace(f"{trace}[timestamp=t:s,prompt=p,output=o]")
    trace.write_text(f"t,p,o\n0,{2**40},6\n2,7,8\n")
    assert load_trace(f"{trace}[timestamp=t:s,prompt=p,output=o]").prompt_tokens[0] == 2**40


@pytest.mark.parametrize(
    ("column", "unit"),
    [("arrival_ms", "ms"), ("time_s", "s"), ("Time (sec)", "s"), ("tsMs", "ms"),
     ("elapsed_microseconds", "us"), ("timestamp", None), ("TIMESTAMP", None),
     ("ms_or_s", None)],
)  # fmt: skip
def test_a_columns_name_states_its_unit(column, unit):
    assert stated_unit(column) == unit


def test_a_unit_its_name_contradicts_is_a_note(monkeypatch, capsys, tmp_path):
    """`arrival_ms` read as seconds runs (exit 0) with one note: the rate read, the unit used
    and the mapping that gives the named one."""
    trace = _user_csv(tmp_path / "user.csv", "arrival_ms,p,o", scale=1e3)
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", f"{trace}[timestamp=arrival_ms:s,prompt=p,output=o]",
        "--policy", "mtp1", "--window", "0:300", "--out", str(tmp_path / "o"), "--no-progress",
    )  # fmt: skip
    notes = [line for line in err.splitlines() if line.startswith("dsim: note: ")]
    assert code == 0 and len(notes) == 1, err
    assert f"{trace}: column 'arrival_ms' read in s (as mapped) gives 200 requests at " in notes[0]
    assert "0.001579 req/s, but its name says ms" in notes[0]
    assert f"--trace '{trace}[timestamp=arrival_ms:ms,prompt=p,output=o]'" in notes[0]


@pytest.mark.parametrize(("unit", "rate"), [("s", "0.001579 req/s"), ("us", "1.579e+06 req/s")])
def test_an_implausible_rate_is_a_note(tmp_path, unit, rate):
    trace = _user_csv(tmp_path / "user.csv", scale=1e3 if unit == "s" else 1.0)
    mapped = f"{trace}[timestamp=timestamp:{unit},prompt=prompt_tokens,output=completion_tokens]"
    with pytest.warns(Notice) as caught:
        load_trace(mapped)
    (note,) = (str(w.message) for w in caught)
    assert f"read in {unit} (as mapped) gives 200 requests at {rate}, outside the 0.01 to" in note
    assert "[timestamp=timestamp:UNIT,prompt=prompt_tokens" in note and "(UNIT: s, ms" in note


@pytest.mark.parametrize(("rows", "said"), [(9, False), (10, True)])
def test_the_rate_is_judged_on_ten_arrivals_or_more(tmp_path, rows, said):
    trace = tmp_path / "log.csv"
    trace.write_text("t,p,o\n" + "".join(f"{i * 1000},5,6\n" for i in range(rows)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", Notice)
        load_trace(f"{trace}[timestamp=t:s,prompt=p,output=o]")  # one request per 1000 s
    assert any("0.001 req/s, outside the 0.01" in str(w.message) for w in caught) == said


def test_a_lengths_file_says_nothing_of_its_timestamps(tmp_path):
    """`lengths=` uses a file's rows, not its send times: no note on their unit."""
    trace = _user_csv(tmp_path / "user.csv", "arrival_ms,p,o", scale=1e3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Notice)
        w = load_workload(f'synthetic:concurrency=2,lengths="{trace}[timestamp=arrival_ms:s,'
                          'prompt=p,output=o]"')  # fmt: skip
    assert len(w) == N


def test_negative_timestamp_in_mapping_isrefused(tmp_path):
    trace = tmp_path / "log.csv"
    trace.write_text("t,p,o\n-1,5,6\n2,7,8\n")
    with pytest.raises(InputError, match="row 1: column 't': must not be negative"):
        load_trace(f"{trace}[timestamp=t:s,prompt=p,output=o]")


def test_rate_spread_flags_bursty_windows_not_poisson(monkeypatch, capsys, tmp_path):
    """Poisson arrivals (50 a tenth) stay well within the 4x rule; a cv-8 renewal trace breaks
    it and the run says so, with the spread, on stderr and in summary.json."""
    from dsim.run_commands import BURST_RATIO, bursty

    for seed in range(5):
        lo, hi = load_workload("synthetic:rate=4,cv=1,n=2000", seed).rate_spread()
        assert hi < 2 * lo and not bursty(load_workload("synthetic:rate=4,n=2000", seed))
    lo, hi = load_workload("synthetic:rate=4,cv=8,duration=300", 0).rate_spread()
    assert hi > BURST_RATIO * lo
    assert load_workload("synthetic:n=600,concurrency=4").rate_spread() is None
    out = tmp_path / "o"
    code, _, err = run_cli(
        monkeypatch, capsys, "run", "--trace", "synthetic:rate=4,cv=8,duration=300",
        "--policy", "mtp1", "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 0 and "bursty trace: its arrival rate spans 0 to" in err
    assert "bursty trace" in json.loads((out / "summary.json").read_text())["warnings"][0]

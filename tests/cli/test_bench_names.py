"""vllm bench serve's workload names on `dsim run` and as [run] keys: each read as the trace
spec it means, run through dsim's own arrival process, random lengths and closed loop."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import ROOT, refused, run_cli, write_trace

from dsim.bench_names import trace_spec
from dsim.errors import InputError
from dsim.pareto.config import load_config
from dsim.workload import load_workload

PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")


def test_random_dataset_spec_and_lengths():
    spec, cap = trace_spec(
        "ignored.csv",
        {"dataset_name": "random", "random_input_len": 100, "random_output_len": 10,
         "random_range_ratio": 0.5, "num_prompts": 400, "request_rate": 5.0},
    )  # fmt: skip
    assert cap is None
    w = load_workload(spec, seed=1)
    assert len(w) == 400 and w.arrival_s[-1] == pytest.approx(400 / 5.0)
    assert w.prompt_tokens.min() == 50 and w.prompt_tokens.max() == 150
    assert w.output_tokens.min() == 5 and w.output_tokens.max() == 15


def test_random_dataset_defaults_send_all_at_once():
    """vLLM's defaults: 1000 prompts of 1024 -> 128 tokens, request rate inf."""
    w = load_workload(trace_spec("x", {"dataset_name": "random"})[0])
    assert len(w) == 1000 and not w.arrival_s.any()
    assert set(w.prompt_tokens) == {1024} and set(w.output_tokens) == {128}


def test_request_rate_on_a_file_keeps_its_rows_in_order(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", [0.0, 50.0, 90.0], [11, 22, 33], [4, 5, 6])
    spec, _ = trace_spec(str(trace), {"request_rate": 2.0, "burstiness": math.inf})
    w = load_workload(spec)
    assert list(w.prompt_tokens) == [11, 22, 33]
    assert list(w.arrival_s) == pytest.approx([0.5, 1.0, 1.5])  # the file's times replaced
    assert "rows of t.jsonl in order" in w.about and "2 req/s" in w.about


def test_max_concurrency_on_a_file_is_a_closed_loop_over_its_rows(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", [0.0, 1.0, 2.0], [11, 22, 33], [4, 5, 6])
    w = load_workload(trace_spec(str(trace), {"max_concurrency": 2})[0])
    assert w.concurrency == 2 and list(w.prompt_tokens) == [11, 22, 33]


def test_num_prompts_alone_keeps_the_files_times(tmp_path):
    assert trace_spec("t.csv", {"num_prompts": 7}) == ("t.csv", 7)


def test_burstiness_is_the_gamma_shape():
    """cv of the gaps = 1 / sqrt(burstiness), as the benchmark draws them."""
    spec, _ = trace_spec("synthetic:", {"request_rate": 10.0, "burstiness": 0.25,
                                         "num_prompts": 20000})  # fmt: skip
    gaps = np.diff(load_workload(spec).arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.08)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--request-rate", "-1"), "--request-rate must be a finite number > 0"),
        (("--request-rate", "nan"), "--request-rate"),
        (("--burstiness", "2"), "give both"),
        (("--request-rate", "2", "--burstiness", "0"), "--burstiness must be"),
        (("--dataset-name", "sharegpt"), "dsim draws only random"),
        (("--random-range-ratio", "1"), "--random-range-ratio must be"),
        (("--max-concurrency", "0"), "--max-concurrency must be"),
    ],
)
def test_bad_benchmark_option(monkeypatch, capsys, tmp_path, args, expected):
    assert expected in refused(monkeypatch, capsys, tmp_path, *args)


def _random_run(monkeypatch, capsys, tmp_path, *options: str) -> tuple[str, dict]:
    """`dsim run` on vLLM's random dataset of 30 requests: (stdout, summary.json)."""
    out = tmp_path / "o"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "run", "--profile", PROFILE, "--dataset-name", "random",
        "--random-input-len", "200", "--random-output-len", "20", "--num-prompts", "30",
        *options, "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    return stdout, json.loads((out / "summary.json").read_text())


def test_run_with_benchmark_names(monkeypatch, capsys, tmp_path):
    stdout, summary = _random_run(monkeypatch, capsys, tmp_path, "--max-concurrency", "4")
    assert "at most 4 in flight" in stdout
    assert summary["requests"] == 30 and "range_ratio=0" in summary["spec"]["trace"]
    assert summary["tpot_mean_s"] > 0 and summary["e2el_p99_s"] >= summary["e2el_p50_s"]


def test_run_takes_request_rate_inf_as_the_benchmark_does(monkeypatch, capsys, tmp_path):
    """`--request-rate inf` (vLLM's default) sends every request at once; the option once
    refused it as not a finite number, though its help offered it."""
    _, summary = _random_run(monkeypatch, capsys, tmp_path, "--request-rate", "inf")
    assert "rate=inf" in summary["spec"]["trace"] and summary["requests"] == 30
    assert "every request sent at 0" in summary["trace"]


def test_a_closed_loop_over_a_file_is_titled_by_the_file(monkeypatch, capsys, tmp_path):
    """`--max-concurrency` turns a file into a synthetic spec taking the file's lengths; the
    table's title names the file, not 'a synthetic trace'."""
    trace = tmp_path / "mine.csv"
    trace.write_text("t_ms,p,o\n" + "".join(f"{i * 100},{50 + i},{5 + i % 3}\n" for i in range(20)))
    code, stdout, _ = run_cli(
        monkeypatch, capsys, "run", "--profile", PROFILE, "--no-progress", "--out",
        str(tmp_path / "o"), "--trace", f"{trace}[timestamp=t_ms:ms,prompt=p,output=o]",
        "--max-concurrency", "4",
    )  # fmt: skip
    assert code == 0 and "on the lengths of mine.csv" in stdout


def test_run_table_takes_benchmark_keys(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        f'policies = ["mtp1"]\n[run]\nprofile = "{PROFILE}"\ndataset_name = "random"\n'
        "num_prompts = 20\nrequest_rate = 4\n[load]\nrate_scale = [1]\n"
    )
    assert "burstiness=1" in load_config(path).base.trace
    path.write_text(path.read_text().replace("request_rate = 4", "request_rate = -4"))
    with pytest.raises(InputError, match="run.request_rate: --request-rate must be"):
        load_config(path)


def test_vllm_tensor_parallel_name_on_profile(monkeypatch, capsys):
    """vLLM's --tensor-parallel-size is --tp's other name, so a near miss suggests it."""
    code, _, err = run_cli(monkeypatch, capsys, "profile", "--tensor-paralel-size", "2")
    assert code == 2 and "Possible options: --tensor-parallel-size" in err

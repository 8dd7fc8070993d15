"""Bad input: one line naming the file, row and problem; exit code 2; no output left behind."""

from __future__ import annotations

import sys

import pytest
from conftest import write_flat_profile

from dsim.cli import main

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW1 = "2023-11-16 18:15:46.6805900,374,44\n"
ROW2 = "2023-11-16 18:15:50.9951690,396,109\n"


@pytest.fixture
def rejected(monkeypatch, capsys, tmp_path):
    """Run `dsim run` (on a small synthetic trace unless `args` give another) and check the
    bad-input contract: exit 2, one line on stderr, no output directory. Returns the line."""

    def run(*args: str) -> str:
        out = tmp_path / "o"
        argv = [
            "dsim",
            "run",
            "--trace",
            "synthetic:n=5",
            *args,
            "--out",
            str(out),
            "--no-progress",
        ]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exc:
            main()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1
        assert not out.exists()
        return err

    return run


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,374\n",
            "missing column(s) 'GeneratedTokens'",
        ),
        (
            AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.99,-5,109\n",
            "row 2: column 'ContextTokens': must be positive",
        ),
        (
            AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.99,396,lots\n",
            "row 2: column 'GeneratedTokens': non-numeric value 'lots'",
        ),
        (AZURE_HEADER + ROW2 + ROW1, "row 2: column 'TIMESTAMP': not sorted"),
        ("", "file is empty"),
        (AZURE_HEADER, "no data rows"),
        (AZURE_HEADER + "yesterday,374,44\n", "row 1: column 'TIMESTAMP': bad timestamp"),
    ],
    ids=[
        "missing-column",
        "negative",
        "non-numeric",
        "unsorted",
        "empty",
        "header-only",
        "bad-time",
    ],
)
def test_bad_trace(rejected, tmp_path, content, expected):
    trace = tmp_path / "trace.csv"
    trace.write_text(content)
    err = rejected("--trace", str(trace))
    assert str(trace) in err and expected in err


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("1,0,5\n2,0,nan\n", "row 2: column 'latency_ms': missing or NaN value"),
        ("1,0,5\n2,0,0\n", "row 2: column 'latency_ms': must be positive"),
        ("1,0,5\n4,0,-1\n", "row 2: column 'latency_ms': must be positive"),
    ],
)
def test_bad_profile(rejected, tmp_path, rows, expected):
    profile = tmp_path / "p.csv"
    profile.write_text("batch_tokens,context_len,latency_ms\n" + rows)
    err = rejected("--profile", str(profile))
    assert str(profile) in err and expected in err


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("verify,4,4,0,5\nverify,4,8,0,6\n", "row 2: num_seqs 8 > batch_tokens 4"),
        ("verify,4,1,0,5\nverify,4,0,0,6\n", "row 2: column 'num_seqs': must be positive"),
        ("verify,4,1,0,5\nverify,4,2,-1,6\n", "row 2: column 'context_len': must not be"),
        ("verify,4,1,0,5\ndecode,4,2,0,6\n", "row 2: column 'phase': must be verify or prefill"),
        ("verify,4,1,0,5\n,4,2,0,6\n", "row 2: column 'phase': must be verify or prefill"),
        ("verify,4,1,0,5\nverify,4,1,0,6\n", "row 2: duplicate"),
        ("prefill,4,1,0,5\n", "no verify rows"),
    ],
    ids=[
        "seqs-over-tokens",
        "zero-seqs",
        "negative-context",
        "phase",
        "empty-phase",
        "dup",
        "no-verify",
    ],
)
def test_bad_profile_with_sequences_and_phase(rejected, tmp_path, rows, expected):
    profile = tmp_path / "p.csv"
    profile.write_text("phase,batch_tokens,num_seqs,context_len,latency_ms\n" + rows)
    err = rejected("--profile", str(profile))
    assert "p.csv" in err and expected in err


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--policy", "dsparkle", "unknown policy 'dsparkle'"),
        ("--policy", "fixed:x", "unknown policy 'fixed:x'"),
        ("--acceptance", "preset:medusa:chat", "unknown preset"),
        ("--acceptance", "iid:1.5", "must lie in [0, 1]"),
        ("--draft-cost", "ratio:-1", "ratio must be a number >= 0"),
        ("--trace", "synthetic:rate=0", "values must be positive"),
    ],
)
def test_bad_options(rejected, option, value, expected):
    assert expected in rejected(option, value)


def test_request_larger_than_kv_cache(rejected, tmp_path):
    profile = write_flat_profile(tmp_path / "p.csv", 5.0)
    err = rejected(
        "--trace",
        "synthetic:n=5,prompt=5000,sigma=0",
        "--profile",
        str(profile),
        "--kv-tokens",
        "1000",
    )
    assert "row 1: request needs" in err


def test_good_run_writes_outputs(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(
        sys,
        "argv",
        ["dsim", "run", "--trace", "synthetic:n=20", "--out", str(tmp_path / "o"), "--no-progress"],
    )
    main()
    assert {p.name for p in (tmp_path / "o").iterdir()} == {"requests.parquet", "summary.json"}
    assert "throughput" in capsys.readouterr().out

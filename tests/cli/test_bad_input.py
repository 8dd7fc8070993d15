"""Bad input: one line naming the file, row and problem; exit code 2; no output left behind."""

from __future__ import annotations

import errno
import json
import os
import sys
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import write_flat_profile

from dsim import run_commands
from dsim.cli import main
from dsim.errors import InputError

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
            "row 2: column 'GeneratedTokens': non-numeric value",
        ),
        (
            AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.99,396,-inf\n",
            "row 2: column 'GeneratedTokens': infinite value",
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
        "infinite",
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


BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("0,m,10,5,15,c\n1,m,10,0,10,c\n2,m,-3,5,2,c\n", "row 3: column 'Request tokens': must"),
        ("0,m,10,5,15,c\n1,m,10,0,10,c\n4,m,3,5,8,c\n2,m,3,5,8,c\n", "row 4: column 'Timestamp'"),
        ("0,m,10,0,10,c\n1,m,10,0,10,c\n", "every request failed ('Response tokens' is 0)"),
    ],
    ids=["bad-cell", "unsorted", "all-failed"],
)
def test_burstgpt_errors_name_the_files_rows_past_a_dropped_one(rejected, tmp_path, rows, expected):
    """Row 2 failed (0 response tokens) and is dropped; the rows after it keep their numbers."""
    trace = tmp_path / "burst.csv"
    trace.write_text(BURSTGPT_HEADER + rows)
    assert expected in rejected("--trace", str(trace))


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("1,0,5\n2,0,nan\n", "row 2: column 'latency_ms': missing or NaN value"),
        ("1,0,5\n2,0,0\n", "row 2: column 'latency_ms': must be positive"),
        ("1,0,5\n2,0,1e308\n", "row 2: column 'latency_ms': must be at most 3600000"),
        ("1,0,5\n2,1e9,5\n", "row 2: column 'context_len': must be at most 16777216"),
        ("1,0,5\n2,inf,6\n", "row 2: column 'context_len': infinite value"),
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
        ("--acceptance", "preset:dspark:chat:qwen3-32b", "unknown preset"),
        ("--acceptance", "preset:dspark:chat[rho=1]", "rho must lie in [0, 1)"),
        ("--acceptance", "iid:1.5", "must lie in [0, 1]"),
        ("--draft-cost", "ratio:-1", "ratio must be a finite number >= 0"),
        ("--policy", "nosuch.module:Policy", "cannot import 'nosuch.module'"),
        ("--policy", "missing_file.py:Policy", "policy file not found"),
        ("--sched-cost", "fast", "--sched-cost 'fast'"),
        ("--trace", "synthetic:rate=0", "rate must be a finite number > 0"),
    ],
)
def test_bad_options(rejected, option, value, expected):
    assert expected in rejected(option, value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("tau:1@4", "acceptance 'tau:1@4': T must exceed 1, got 1: T counts the bonus token"),
        ("tau:0.9@4", "acceptance 'tau:0.9@4': T must exceed 1, got 0.9"),
        ("tau:5.2@4", "acceptance 'tau:5.2@4': T must be at most K + 1 = 5"),
        ("tau:2.8@0", "acceptance 'tau:2.8@0': K must be an integer >= 1 and <= 64, got 0"),
        ("tau:two@4", "acceptance 'tau:two@4': T must be a number, got 'two'"),
        ("tau:nan@4", "acceptance 'tau:nan@4': T must be a finite number, got nan"),
        ("tau:2.8@four", "acceptance 'tau:2.8@four': K must be an integer, got 'four'"),
        ("tau:2.8", "acceptance 'tau:2.8': no @K; expected tau:T@K"),
        ("tau:2.8@4[spread=-1]", "acceptance 'tau:2.8@4[spread=-1]': spread must be"),
        ("tau:2.8@3", "acceptance 'tau:2.8@3': its tau is stated at 3 drafts a round"),
    ],
)
def test_bad_tau_spec(rejected, spec, expected):
    """`--gamma 4`: each bad `tau:T@K` is one line naming the spec and what is wrong."""
    assert expected in rejected("--acceptance", spec, "--gamma", "4")


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


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--rate-scale", "nan", "'--rate-scale': expected a finite number"),
        ("--sla-tps", "0", "sla_tps must be a finite number > 0"),
        ("--sla-tps", "-1", "sla_tps must be a finite number > 0"),
        ("--seed", "-1", "'--seed': expected a non-negative integer"),
        ("--max-requests", "0", "max_requests must be an integer >= 1"),
        ("--window", "nan:5", "START must be a finite number >= 0"),
        ("--window", "5:inf", "END must be a finite number > 5"),
        ("--draft-cost", "ratio:nan", "ratio must be a finite number >= 0"),
        ("--draft-cost", "ratio:inf", "ratio must be a finite number >= 0"),
        ("--trace", "synthetic:rate=inf", "rate must be a finite number > 0"),
        ("--trace", "synthetic:rate=nan", "rate must be a finite number > 0"),
        ("--trace", "synthetic:duration=1e12", "more than 20000000 requests"),
        ("--trace", "synthetic:n=100000000000", "n must be an integer >= 1 and <= 20000000"),
        ("--trace", "synthetic:n=5,prompt=1e300", "prompt must be a finite number > 0 and <= "),
        ("--acceptance", "mix:iid:0.5=nan,iid:0.7=1", "weight of 'iid:0.5' must be a finite"),
        ("--acceptance", "mix:iid:0.5=inf,iid:0.7=1", "weight of 'iid:0.5' must be a finite"),
        ("--acceptance", "preset:dspark:chat[spread=nan]", "spread must be a finite number >= 0"),
        ("--acceptance", "preset:dspark:chat[overconf=inf]", "overconf must be a finite number"),
    ],
)
def test_non_finite_and_out_of_range_numbers(rejected, option, value, expected):
    assert expected in rejected(option, value)


def test_timestamps_centuries_apart(rejected, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(AZURE_HEADER + ROW1 + "2025-11-16 18:15:50,396,109\n")
    assert "row 2: column 'TIMESTAMP': more than 366 days after" in rejected("--trace", str(trace))
    trace.write_text(AZURE_HEADER + ROW1 + "9999-11-16 18:15:50,396,109\n")
    assert "row 2: column 'TIMESTAMP'" in rejected("--trace", str(trace))


def test_a_directory_or_fifo_is_not_reported_missing(rejected, tmp_path):
    assert "is a directory, expected a file" in rejected("--trace", str(tmp_path))
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)  # opening it would block forever
    assert "is not a regular file" in rejected("--trace", str(fifo))
    assert "file not found" in rejected("--trace", str(tmp_path / "nope.csv"))


def test_non_utf8_is_reported_by_row(rejected, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_bytes((AZURE_HEADER + ROW1).encode() + b"2023-11-16 18:15:50,\xff\xfe,1\n")
    assert f"{trace}: row 2: not UTF-8 text" in rejected("--trace", str(trace))
    lines = tmp_path / "trace.jsonl"  # no header: its second line is its second row
    lines.write_bytes(b'{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"x": "\xff"}\n')
    assert f"{lines}: row 2: not UTF-8 text" in rejected("--trace", str(lines))
    trace.write_bytes(b"TIMESTAMP,\xffContextTokens\n")
    assert f"{trace}: not UTF-8 text in its header" in rejected("--trace", str(trace))


def test_a_compressed_trace_is_named_as_such(rejected, tmp_path):
    import gzip

    trace = tmp_path / "trace.csv.gz"
    trace.write_bytes(gzip.compress((AZURE_HEADER + ROW1).encode()))
    err = rejected("--trace", str(trace))
    assert f"{trace}: gzip-compressed: dsim reads plain CSV, JSON lines or Parquet" in err


def test_errors_never_echo_file_contents(rejected, tmp_path):
    secret = tmp_path / "passwd"
    secret.write_text("root:s3cret:0:0:root:/root:/bin/bash\ndaemon:x:1:1\n")
    assert "s3cret" not in rejected("--trace", str(secret))
    trace = tmp_path / "trace.csv"
    trace.write_text(AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.99,396,s3cret\n")
    assert "s3cret" not in rejected("--trace", str(trace))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes everywhere")
def test_unreadable_folder_on_the_path(rejected, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "trace.csv").write_text(AZURE_HEADER + ROW1)
    locked.chmod(0)
    try:
        assert "permission denied" in rejected("--trace", str(locked / "trace.csv"))
    finally:
        locked.chmod(0o755)


def test_profile_sidecar_must_be_an_object(monkeypatch, capsys, tmp_path):
    profile = write_flat_profile(tmp_path / "p.csv", 5.0)
    profile.with_suffix(".json").write_text("[1, 2]")
    monkeypatch.setattr(sys, "argv", ["dsim", "profile", "show", str(profile)])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert "p.json: a profile sidecar must be a JSON object, not a list" in err
    assert not profile.with_suffix(".png").exists()


@pytest.mark.parametrize(
    ("path", "value", "name"),
    [(("memory", "kv_capacity_tokens"), 0, "memory.kv_capacity_tokens"),
     (("architecture", "vocab"), -5, "vocab")],
)  # fmt: skip
def test_a_bad_sidecar_value_names_the_sidecar(monkeypatch, capsys, tmp_path, path, value, name):
    src = Path("profiles/h200-qwen3-8b-roofline.csv")
    profile = tmp_path / "p.csv"
    profile.write_bytes(src.read_bytes())
    side = json.loads(src.with_suffix(".json").read_text())
    side[path[0]][path[1]] = value
    profile.with_suffix(".json").write_text(json.dumps(side))
    out = tmp_path / "o"
    code, err = _fails(monkeypatch, capsys, out, "--profile", str(profile))
    assert code == 2 and f"p.json: {name} must be" in err and not out.exists()


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda e: e.update(graphs="full"), "engine.graphs must be an object"),
        (lambda e: e["graphs"].update(decode="bogus"), "engine.graphs.decode 'bogus' is not one"),
        (lambda e: e["graphs"].update(keyed_by="reqs"), "engine.graphs.keyed_by 'reqs' is not"),
        # the scheduling record the graphs' sizes are checked against (was an AttributeError)
        (lambda e: e.update(scheduling=5), "engine.scheduling needs mixed_prefill"),
        (
            lambda e: e["scheduling"].update(token_budget=True),
            "engine.scheduling.token_budget must be null or an integer",
        ),
    ],
)
def test_a_hand_edited_graph_record_is_one_line(monkeypatch, capsys, tmp_path, edit, words):
    src = Path("profiles/h200-qwen3-8b-roofline.csv")
    profile = tmp_path / "p.csv"
    profile.write_bytes(src.read_bytes())
    side = json.loads(src.with_suffix(".json").read_text())
    edit(side["engine"])
    profile.with_suffix(".json").write_text(json.dumps(side))
    code, err = _fails(monkeypatch, capsys, tmp_path / "o", "--profile", str(profile))
    assert code == 2 and "p.json: " + words in err and not (tmp_path / "o").exists()


# -- --out: refused when it is not a dsim run folder, replaced whole, kept on failure -----------
def _run_to(monkeypatch, out: Path, *args: str) -> None:
    argv = ["dsim", "run", "--trace", "synthetic:n=5", *args, "--out", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", argv)
    main()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _fails(monkeypatch, capsys, out: Path, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        _run_to(monkeypatch, out, *args)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    return exc.value.code, err


def test_out_naming_a_file_or_a_foreign_folder_is_refused(monkeypatch, capsys, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    code, err = _fails(monkeypatch, capsys, a_file)
    assert code == 2 and "exists and is not a folder" in err and a_file.read_text() == "keep me"
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "thesis.tex").write_text("keep me too")
    code, err = _fails(monkeypatch, capsys, folder)
    assert code == 2 and "not a dsim output: not replacing it" in err
    assert _snapshot(folder) == {"thesis.tex": b"keep me too"}


def test_a_failed_run_keeps_the_earlier_outputs(monkeypatch, capsys, tmp_path):
    out = tmp_path / "o"
    _run_to(monkeypatch, out)
    before = _snapshot(out)
    code, _ = _fails(monkeypatch, capsys, out, "--rate-scale", "nan")  # bad input
    assert code == 2 and _snapshot(out) == before

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pq, "write_table", full_disk)  # fails midway through writing
    code, err = _fails(monkeypatch, capsys, out, "--seed", "3")
    assert code == 1 and err == "dsim: error: No space left on device\n"
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # no temporary folders left


def test_a_new_run_replaces_the_folder_as_a_whole(monkeypatch, tmp_path):
    out = tmp_path / "o"
    _run_to(monkeypatch, out)
    (out / "texts.jsonl").write_text("{}\n")  # from an earlier --real run
    _run_to(monkeypatch, out, "--seed", "1")
    assert {p.name for p in out.iterdir()} == {"requests.parquet", "summary.json"}
    assert json.loads((out / "summary.json").read_text())["spec"]["seed"] == 1


def test_summary_is_strict_json(monkeypatch, tmp_path):
    out = tmp_path / "o"
    _run_to(monkeypatch, out)
    json.loads((out / "summary.json").read_text(), parse_constant=pytest.fail)


def test_warnings_never_come_before_the_error_line(monkeypatch, capsys, tmp_path):
    def warn_then(fail: bool):
        def simulate(inputs, progress=None):
            warnings.warn("torch says hello", UserWarning, stacklevel=1)
            if fail:
                raise InputError("x.csv", 3, "bad")
            return real_simulate(inputs, progress)

        return simulate

    real_simulate = run_commands.simulate_inputs
    monkeypatch.setattr(run_commands, "simulate_inputs", warn_then(True))
    code, err = _fails(monkeypatch, capsys, tmp_path / "o")
    assert code == 2 and err == "dsim: error: x.csv: row 3: bad\n"
    monkeypatch.setattr(run_commands, "simulate_inputs", warn_then(False))
    with pytest.warns(UserWarning, match="torch says hello"):  # re-emitted after a success
        _run_to(monkeypatch, tmp_path / "o")

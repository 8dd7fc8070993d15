"""Reliability: interrupts exit 128+signal with no outputs, sweeps never reuse stale points,
every numeric option refuses NaN and infinities, and the engine cannot spin without time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import typer
from conftest import ROOT

from dsim import cli
from dsim.codehash import code_digest, simulation_sources
from dsim.engine import replica
from dsim.errors import SimulationStuck
from dsim.hardware.latency import LatencyModel
from dsim.pareto import sweep
from dsim.run import simulate
from dsim.run_inputs import input_files
from dsim.run_spec import RunSpec

PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")
LONG = "synthetic:rate=20,duration=5000"  # minutes of simulation: long enough to interrupt


# -- interrupts ---------------------------------------------------------------------------------
def _start(args: list[str], **env_extra: str) -> subprocess.Popen:
    """Start `dsim ARGS` and return once its signal handlers are installed (SIGTERM caught)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsim", *args, "--no-progress"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    term_bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(x for x in status.splitlines() if x.startswith("SigCgt")).split()[1], 16)
        if caught & term_bit:
            return proc
        time.sleep(0.05)
    proc.kill()
    pytest.fail("dsim did not start in time")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_interrupted_run_exits_130_and_writes_nothing(tmp_path):
    out = tmp_path / "o"
    proc = _start(["run", "--trace", LONG, "--profile", PROFILE, "--out", str(out)])
    time.sleep(1.0)  # into the simulation
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == "dsim: interrupted by SIGINT\n"
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.parametrize("delay", [0.0, 0.4, 0.8, 1.2, 1.6, 2.0])
def test_interrupt_during_imports_or_the_first_compile_exits_130_with_one_line(tmp_path, delay):
    """At 0 the signal lands in the command line's imports (dsim.__main__); later, with a cold
    kernel cache, in numba's compiler, where a raised exception is dropped by a ctypes callback
    or wrapped in a SystemError (dsim.interrupts)."""
    out = tmp_path / "o"
    args = ["run", "--trace", LONG, "--profile", PROFILE, "--out", str(out)]
    proc = _start(args, NUMBA_CACHE_DIR=str(tmp_path / "cold-cache"))
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "dsim: interrupted by SIGINT\n")
    assert not out.exists()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_terminated_sweep_stops_its_workers_and_writes_no_final_outputs(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(
        f'policies = ["mtp1", "dspark"]\n[run]\ntrace = "{LONG}"\nprofile = "{PROFILE}"\n'
        "[load]\nrate_scale = [1, 2]\n"
    )
    out = tmp_path / "out"
    proc = _start(["pareto", "--config", str(config), "--out", str(out), "--jobs", "2"])
    deadline = time.monotonic() + 120
    workers: list[psutil.Process] = []
    while len(workers) < 2 and time.monotonic() < deadline:
        kids = psutil.Process(proc.pid).children(recursive=True)
        workers = [k for k in kids if "resource_tracker" not in " ".join(k.cmdline())]
        time.sleep(0.1)
    assert len(workers) >= 2, "the pool never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err == "dsim: interrupted by SIGTERM\n"
    deadline = time.monotonic() + 10
    while not all(_gone(w.pid) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(w.pid) for w in workers)
    finals = ["points.parquet", "frontier.parquet", "pareto.png", "load.png", "report.md"]
    assert not any((out / name).exists() for name in finals)
    points = out / "points"
    assert not points.exists() or all(p.name.startswith(".") for p in points.iterdir())


# -- every numeric option refuses NaN and infinities ---------------------------------------------
def _numeric_options() -> list[tuple[list[str], str, type]]:
    """(command path, option flag, float or int) for every numeric option of every command."""
    found = []

    def walk(command, path):
        for param in command.params:
            kind = cli._numeric_kind(param)
            if kind is not None and param.opts[0].startswith("--"):
                found.append((path, param.opts[0], kind))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    return found


OPTIONS = _numeric_options()


def test_the_walk_finds_the_options_we_know():
    flags = {(" ".join(p), f) for p, f, _ in OPTIONS}
    assert {("run", "--rate-scale"), ("run", "--sla-tps"), ("run", "--seed")} <= flags
    assert ("pareto", "--jobs") in flags and ("profile", "--repeats") in flags


@pytest.mark.parametrize(
    ("path", "flag", "kind"), OPTIONS, ids=[f"{' '.join(p)} {f}" for p, f, _ in OPTIONS]
)
def test_numeric_option_rejects_nan_and_infinities(monkeypatch, capsys, tmp_path, path, flag, kind):
    monkeypatch.chdir(tmp_path)  # nothing may be written: checked below
    bad = ["nan", "inf", "-inf"] + (["-1"] if kind is int else [])
    for value in bad:
        monkeypatch.setattr(sys, "argv", ["dsim", *path, f"{flag}={value}"])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        err = capsys.readouterr().err
        assert exc.value.code == 2, (flag, value, err)
        assert err.count("\n") == 1 and flag in err, err
    assert list(tmp_path.iterdir()) == []


# -- the engine cannot loop without advancing time ------------------------------------------------
@pytest.mark.parametrize("step", [float("nan"), 0.0, -1.0])
def test_engine_turns_a_stalled_clock_into_an_error(monkeypatch, step):
    monkeypatch.setattr(replica, "MAX_STALLED_STEPS", 5)
    # The engine prices each step through `LatencyModel.priced`: every step lasts `step`.
    monkeypatch.setattr(LatencyModel, "priced", lambda self, *args: lambda tokens: step)
    # `ar`: no drafter, so the profile engine's speculative round cost adds nothing either.
    spec = RunSpec(
        trace="synthetic:n=3,output=200,sigma=0", profile=PROFILE, policy="ar", draft_cost="0"
    )
    with pytest.raises(SimulationStuck, match=r"at t=0 s with 0/3 finished, .* decoding"):
        simulate(spec)


# -- sweep keys change with every input behind a path ---------------------------------------------
def _rewrite(path: Path, text: str) -> None:
    """Same size, same mtime: only the bytes change (the hardest edit for a cache to see)."""
    stat = path.stat()
    assert len(text.encode()) == stat.st_size
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_key_follows_a_lengths_file_named_inside_the_trace_spec(tmp_path):
    lengths = tmp_path / "lengths.jsonl"
    lengths.write_text('{"timestamp": 0, "input_length": 100, "output_length": 20}\n')
    spec = RunSpec(trace=f"synthetic:n=4,lengths={lengths}", profile=PROFILE)
    before = sweep.point_key(spec)
    assert sweep.point_key(spec) == before  # stable while nothing changes
    _rewrite(lengths, lengths.read_text().replace("100", "900"))
    assert sweep.point_key(spec) != before


def test_key_follows_an_acceptance_trace_sidecar(tmp_path):
    from samples import META, make_df

    from dsim.acceptance.trace import update_trace_metadata, write_acceptance_trace

    trace = tmp_path / "t.parquet"
    write_acceptance_trace(make_df(), trace, META)
    spec = RunSpec(trace="synthetic:n=4", acceptance=str(trace), gamma=3, profile=PROFILE)
    assert str(trace.with_suffix(".json").resolve()) in input_files(spec)
    before = sweep.point_key(spec)
    update_trace_metadata(trace, {"calibration": {"temperatures": [2.0, 2.0, 2.0]}})
    assert sweep.point_key(spec) != before


def test_key_follows_a_calibration_file(tmp_path):
    from samples import META, make_df

    from dsim.acceptance.trace import write_acceptance_trace

    trace, calibration = tmp_path / "t.parquet", tmp_path / "cal.json"
    write_acceptance_trace(make_df(), trace, META)
    calibration.write_text('{"temperatures": [1.5, 1.5, 1.5]}')
    spec = RunSpec(
        trace="synthetic:n=4",
        acceptance=str(trace),
        gamma=3,
        profile=PROFILE,
        calibration=str(calibration),
    )
    before = sweep.point_key(spec)
    _rewrite(calibration, '{"temperatures": [2.5, 2.5, 2.5]}')
    assert sweep.point_key(spec) != before


def test_key_follows_a_profile_sidecar(tmp_path):
    profile = tmp_path / "p.csv"
    profile.write_text("batch_tokens,context_len,latency_ms\n1,0,5\n64,0,9\n")
    side = profile.with_suffix(".json")
    side.write_text('{"threads": 1}')
    spec = RunSpec(trace="synthetic:n=4", profile=str(profile))
    before = sweep.point_key(spec)
    _rewrite(side, '{"threads": 2}')
    assert sweep.point_key(spec) != before


def test_key_follows_the_simulation_code(monkeypatch):
    spec = RunSpec(trace="synthetic:n=4", profile=PROFILE)
    before = sweep.point_key(spec)
    monkeypatch.setattr(sweep, "code_digest", lambda: "0" * 64)
    assert sweep.point_key(spec) != before


def test_code_digest_covers_what_a_simulation_runs_and_nothing_else():
    modules = set(simulation_sources())
    # lazy imports inside functions count; command-line and plotting code do not
    assert {"dsim.engine.replica", "dsim.acceptance.replay", "dsim.workload"} <= modules
    assert not modules & {"dsim.cli", "dsim.pareto.plots", "dsim.pareto.sweep"}
    assert len(code_digest()) == 64


def test_a_changed_input_reruns_the_point_in_a_sweep(tmp_path):
    lengths = tmp_path / "lengths.jsonl"
    lengths.write_text('{"timestamp": 0, "input_length": 100, "output_length": 20}\n')
    spec = RunSpec(trace=f"synthetic:n=6,lengths={lengths}", profile=PROFILE, gamma=3)
    out = tmp_path / "sweep"
    first = sweep.run_sweep(sweep.make_points([("mtp1", 1.0, spec)]), out, jobs=1)
    _rewrite(lengths, lengths.read_text().replace("20}", "60}"))
    second = sweep.run_sweep(sweep.make_points([("mtp1", 1.0, spec)]), out, jobs=1)
    assert first["point"][0] != second["point"][0]
    assert first["throughput_tok_s"][0] != second["throughput_tok_s"][0]
    assert len(list((out / "points").iterdir())) == 2


# -- sweep configs: NaN and infinities in TOML are refused up front ------------------------------
CONFIG = (
    f'policies = ["mtp1"]\n[run]\ntrace = "synthetic:n=5"\nprofile = "{PROFILE}"\n'
    "gamma = 4\n[load]\nrate_scale = [1, 2]\n[sla]\nanchors = [100]\n"
)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "rate_scale = [1, 2]",
            "rate_scale = [1, nan]",
            "load.rate_scale: values must be a finite",
        ),
        ("rate_scale = [1, 2]", "rate_scale = [inf]", "load.rate_scale: values must be a finite"),
        ("anchors = [100]", "anchors = [-inf]", "sla.anchors: values must be a finite"),
        ("gamma = 4", "gamma = 4\nsla_tps = nan", "run.sla_tps: sla_tps must be a finite"),
        ("gamma = 4", "gamma = 4\nseed = -1", "run.seed: seed must be an integer >= 0"),
        ("gamma = 4", 'gamma = 4\ndraft_cost = "ratio:nan"', "run.draft_cost: --draft-cost"),
    ],
)
def test_sweep_config_numbers_must_be_finite(monkeypatch, capsys, tmp_path, old, new, expected):
    config = tmp_path / "sweep.toml"
    config.write_text(CONFIG.replace(old, new))
    out = tmp_path / "out"
    argv = ["dsim", "pareto", "--config", str(config), "--out", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"{config}: {expected}" in err
    assert not out.exists()

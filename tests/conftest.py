"""Shared fixtures: small traces and profiles on disk, and a simulation wrapper that checks the
engine's invariants on every run of the suite."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import settings

from dsim.cli import main
from dsim.policies.registry import BUILT_INS
from dsim.run import RunResult, RunSpec, simulate

ROOT = Path(__file__).resolve().parent.parent

# Property tests: the same examples on every CI run (a failure reproduces from the log), fresh
# ones locally; no deadline, since a loaded machine would make timing failures of slow examples.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# A spec for each registered built-in whose usage names a parameter (`fixed:K`).
# A KV budget far below the demand of 120 requests: every admission rule meets pressure.
KV_PRESSURE = dict(
    trace="synthetic:rate=50,n=120,prompt=300,output=200,sigma=0.3",
    acceptance="iid:0.8",
    policy="fixed:4",
    kv_tokens=4000,
    prefill_chunk=256,
)
EXAMPLE_ARGS = {"fixed:K": "fixed:2", "threshold:h": "threshold:0.5"}


def example_specs() -> list[str]:
    """One parsable spec of every registered built-in, in the registry's order."""
    return [EXAMPLE_ARGS.get(entry.usage, entry.usage) for entry in BUILT_INS]


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run `dsim ARGS` through the real entry point; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["dsim", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(monkeypatch, capsys, tmp_path: Path, *args: str) -> str:
    """`dsim run ARGS --out O`: bad input's contract (exit 2, one line, nothing written);
    returns the line."""
    out = tmp_path / "o"
    code, _, err = run_cli(monkeypatch, capsys, "run", *args, "--out", str(out), "--no-progress")
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    return err


def write_trace(path: Path, arrivals_s, prompts, outputs) -> Path:
    """A Mooncake-format JSONL trace (timestamps in ms)."""
    with path.open("w") as f:
        for t, p, o in zip(arrivals_s, prompts, outputs, strict=True):
            f.write(
                json.dumps({"timestamp": t * 1e3, "input_length": p, "output_length": o}) + "\n"
            )
    return path


def write_flat_profile(path: Path, latency_ms: float) -> Path:
    """The same latency at every batch size and context."""
    b = [1, 8, 64, 512, 4096]
    pd.DataFrame({"batch_tokens": b, "context_len": 0, "latency_ms": latency_ms}).to_csv(
        path, index=False
    )
    return path


@pytest.fixture(scope="module")
def one_thread():
    """Tiny passes are dominated by thread hand-offs: one thread is 30x faster here."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def ends_often(target):
    """The tiny target, made to end answers often: its end-of-sequence embedding (tied to the
    LM head) points along the mean final state of sampled answers (p ~ 0.1 per token)."""
    import torch

    from dsim.models.decode import generate

    prompts = [target.encode_chat(f"question {i}: why is the sky {'blue ' * i}?") for i in range(5)]
    answers = generate(target, prompts, 16, torch.Generator().manual_seed(0))
    mean = torch.cat([a["hidden"] for a in answers]).mean(0)
    with torch.no_grad():
        target.embedding.weight[target.eos_id] = 1.3 * mean / mean.norm()
    target.name = "eos"
    return target


def check_invariants(result: RunResult, spec: RunSpec) -> None:
    req, steps = result.requests, result.steps
    np.testing.assert_array_equal(req["output_tokens"], result.requested)
    assert (req["accepted_drafts"] <= req["verified_drafts"]).all()
    assert (req["verified_drafts"] <= spec.gamma * req["rounds"]).all()
    assert (req["first_token_s"] >= req["arrival_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    assert (steps.kv_blocks_used <= result.summary["kv_capacity_blocks"]).all()
    for log in result.replica_steps:  # each replica's steps follow each other
        assert np.all(np.diff(log.start_s) >= 0)
        assert np.all(log.start_s[:-1] + log.latency_s[:-1] <= log.start_s[1:] + 1e-9)
    assert result.replica_work == [0] * len(result.replica_steps)  # every replica owes nothing


@pytest.fixture
def sim():
    """simulate() plus the invariant checks."""

    def run(**kwargs) -> RunResult:
        spec = RunSpec(**kwargs)
        result = simulate(spec)
        check_invariants(result, spec)
        return result

    return run

"""The profile engine's rules as a run's defaults: KV capacity, step token budget, prefill chunk
and whether prefill shares the decode step (SGLang schedules prefill first)."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
from conftest import write_flat_profile

from dsim.errors import InputError
from dsim.hardware.engines import ENGINES, get_engine
from dsim.pareto.sweep import point_key
from dsim.run import simulate
from dsim.run_inputs import resolve_engine
from dsim.run_spec import RunSpec

TRACE = "synthetic:rate=30,n=40,prompt=600,output=40"


def profile_with(tmp_path, engine: dict | None = None, memory: dict | None = None) -> str:
    """A flat 10 ms profile whose sidecar records `engine` and `memory` as an estimate's does."""
    path = write_flat_profile(tmp_path / "flat.csv", 10.0)
    sidecar = {}
    if engine is not None:
        sidecar["engine"] = engine
    if memory is not None:
        sidecar["memory"] = memory
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return str(path)


def engine_record(name: str, gpu: str = "h200") -> dict:
    return {"name": name, "scheduling": asdict(get_engine(name, gpu).scheduling)}


def config(profile: str, **kw):
    base = dict(trace=TRACE, profile=profile, acceptance="iid:0.7", draft_cost="0")
    return resolve_engine(RunSpec(**{**base, **kw})).config


def test_a_profile_without_an_engine_keeps_the_fallbacks(tmp_path):
    cfg = config(profile_with(tmp_path))
    assert (cfg.kv_tokens, cfg.token_budget, cfg.prefill_chunk) == (500_000, None, 2048)
    assert cfg.mixed_prefill


@pytest.mark.parametrize(
    ("name", "budget", "chunk", "mixed"),
    [
        ("vllm", 8192, 8192, True),
        ("vllm-0.8", 8192, 8192, True),
        ("trtllm", 8192, 8192, True),
        ("gpu-only", 8192, 8192, True),
        ("sglang", 8192, 8192, False),
        ("vllm-2023", None, 2048, True),
    ],
)
def test_each_engine_rule_becomes_the_runs_default(tmp_path, name, budget, chunk, mixed):
    profile = profile_with(tmp_path, engine_record(name), {"kv_capacity_tokens": 123_456})
    cfg = config(profile)
    assert (cfg.kv_tokens, cfg.token_budget, cfg.prefill_chunk) == (123_456, budget, chunk)
    assert cfg.mixed_prefill is mixed


def test_every_engine_has_a_rule_case():
    assert set(ENGINES) == {"vllm", "vllm-0.8", "trtllm", "gpu-only", "sglang", "vllm-2023"}


def test_vllm_budget_is_2048_on_a100():
    assert get_engine("vllm", "a100").scheduling.token_budget == 2048
    assert get_engine("vllm", "h100").scheduling.token_budget == 8192


def test_the_spec_wins_over_the_engine(tmp_path):
    profile = profile_with(tmp_path, engine_record("sglang"), {"kv_capacity_tokens": 123_456})
    cfg = config(
        profile,
        kv_tokens=50_000,
        max_num_batched_tokens=512,
        prefill_chunk=256,
        prefill_mixing="mixed",
    )
    assert (cfg.kv_tokens, cfg.token_budget, cfg.prefill_chunk) == (50_000, 512, 256)
    assert cfg.mixed_prefill
    assert not config(profile_with(tmp_path), prefill_mixing="separate").mixed_prefill


def test_a_budget_without_an_engine_bounds_the_prefill_chunk(tmp_path):
    """As vLLM's: with a step budget and no chunk given, prefill takes what the budget leaves."""
    assert config(profile_with(tmp_path), max_num_batched_tokens=4096).prefill_chunk == 4096


@pytest.mark.parametrize(
    ("engine", "memory", "text"),
    [
        ({"scheduling": {"mixed_prefill": 1, "token_budget": 8}}, None, "mixed_prefill"),
        ({"scheduling": {"mixed_prefill": True, "token_budget": 0}}, None, "token_budget"),
        ({"scheduling": {"mixed_prefill": True}}, None, "needs"),
        (None, {"kv_capacity_tokens": -5}, "kv_capacity_tokens"),
        (None, {"kv_capacity_tokens": True}, "kv_capacity_tokens"),
    ],
)
def test_a_bad_sidecar_rule_names_the_file(tmp_path, engine, memory, text):
    profile = profile_with(tmp_path, engine, memory)
    with pytest.raises(InputError) as err:
        config(profile)
    assert "flat.json" in str(err.value) and text in str(err.value)  # the value is the sidecar's


def test_prefill_first_runs_no_decode_in_a_prefill_step(tmp_path):
    """separate (SGLang): every step with prefill tokens decodes nothing; mixed (vLLM): the
    same load has steps doing both."""
    profile = profile_with(tmp_path, engine_record("sglang"))
    spec = dict(trace=TRACE, profile=profile, acceptance="iid:0.7", draft_cost="0")
    first = simulate(RunSpec(**spec, policy="fixed:3", gamma=3)).steps
    assert (first.num_running[first.prefill_tokens > 0] == 0).all()
    mixed = simulate(RunSpec(**spec, policy="fixed:3", gamma=3, prefill_mixing="mixed")).steps
    assert ((mixed.num_running > 0) & (mixed.prefill_tokens > 0)).any()


def test_prefill_first_stalls_decode_for_the_whole_prompt(tmp_path):
    """Closed form: request 0 decodes alone; request 1's 1000-token prompt arrives and, under a
    100-token budget, takes ten prefill-only steps of 100 tokens, no decode between them (mixed,
    it would take 99 a step beside request 0's verify token)."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.000,10,500\n"
        "2023-11-16 18:00:00.500,1000,2\n"
    )
    profile = profile_with(tmp_path, engine_record("sglang"))
    spec = RunSpec(
        trace=str(trace),
        profile=profile,
        acceptance="iid:0.7",
        draft_cost="0",
        policy="ar",
        max_num_batched_tokens=100,
    )
    steps = simulate(spec).steps
    late = steps.start_s >= 0.5
    prefill = late & (steps.prefill_tokens > 0)
    assert steps.prefill_tokens[prefill].tolist() == [100] * 10
    first, last = np.flatnonzero(prefill)[[0, -1]]
    assert (steps.num_running[first : last + 1] == 0).all()


def test_the_kv_capacity_is_part_of_a_sweep_points_key(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    keys = []
    for folder, capacity in ((a, 100_000), (b, 200_000)):
        profile = profile_with(folder, engine_record("vllm"), {"kv_capacity_tokens": capacity})
        spec = RunSpec(trace=TRACE, profile=profile, acceptance="iid:0.7", draft_cost="0")
        keys.append(point_key(spec))
    assert keys[0] != keys[1]


def test_the_summary_names_the_limits_it_ran_with(tmp_path):
    profile = profile_with(tmp_path, engine_record("sglang"), {"kv_capacity_tokens": 123_456})
    spec = RunSpec(trace=TRACE, profile=profile, acceptance="iid:0.7", draft_cost="0")
    limits = simulate(spec).summary["engine_limits"]
    assert limits == {
        "kv_tokens": 123_456,
        "max_num_batched_tokens": 8192,
        "prefill_chunk": 8192,
        "prefill_mixing": "separate",
        "admission": "recompute",
    }


def test_an_unknown_prefill_mixing_is_refused():
    with pytest.raises(InputError, match="--prefill-mixing must be one of engine, mixed"):
        RunSpec(prefill_mixing="sometimes")

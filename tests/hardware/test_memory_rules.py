"""Memory and admission per engine: each engine's KV capacity as a closed form, its KV dtype
for a checkpoint, TensorRT-LLM's reserving admission over a run, the warning on a profile that
mostly exceeds memory, and model names (docs/design.md, Engine presets; profiles/README.md,
Memory)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from conftest import KV_PRESSURE, run_cli, write_flat_profile, write_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsim.engine.replica import Replica
from dsim.errors import InputError
from dsim.hardware import zoo
from dsim.hardware.engines import Scheduling
from dsim.hardware.roofline import roofline_profile
from dsim.run import RunSpec, simulate
from dsim.run_inputs import resolve_engine

CTX = [2048]
MIB, GIB = 2**20, 2**30
H100, H200 = 81559 * MIB, 143771 * MIB  # bytes, as nvidia-smi reports them
W70_FP8 = 70_552_387_584  # Llama-3.3-70B's parameters, one byte each
KV70 = 80 * 2 * 8 * 128  # layers x (K, V) x KV heads x head_dim: elements per token


# -- KV capacity per engine -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "kv_budget", "kv_bytes"),
    [
        ("vllm", 0.9 * H100 - W70_FP8, 2),  # 0.9 of total, bf16 cache
        ("vllm-0.8", 0.9 * H100 - W70_FP8, 2),
        ("trtllm", 0.9 * (H100 - W70_FP8), 1),  # 0.9 of what the weights leave, fp8 cache
        # SGLang: (81559 MiB - (9.5 + 1/2) GiB) / 81559 MiB = 0.8744.. -> 0.874 of total
        ("sglang", 0.874 * H100 - W70_FP8, 2),
    ],
)
def test_kv_capacity_is_each_engines_closed_form(engine, kv_budget, kv_bytes):
    _, meta = roofline_profile("h100", "llama3.3-70b", CTX, dtype="fp8", engine=engine)
    mem = meta["memory"]
    assert mem["gpu_memory_bytes"] == H100 and mem["gpu_memory_gib"] == 79.65
    assert mem["weight_bytes_per_gpu"] == W70_FP8 and mem["weight_gib_per_gpu"] == 65.71
    assert mem["kv_cache_bytes_per_gpu"] == pytest.approx(kv_budget, rel=1e-12)
    assert mem["kv_cache_gib_per_gpu"] == round(kv_budget / GIB, 2)
    assert mem["kv_capacity_tokens"] == int(kv_budget // (KV70 * kv_bytes))


def test_the_engines_capacities_for_llama_70b_fp8_on_one_h100():
    """The issue's case: 4,417 tokens under 0.9 x 80e9; now each engine's own rule."""
    tokens = {
        e: roofline_profile("h100", "llama3.3-70b", CTX, dtype="fp8", engine=e)[1]["memory"][
            "kv_capacity_tokens"
        ]
        for e in ("vllm", "sglang", "trtllm")
    }
    assert tokens == {"vllm": 19581, "sglang": 12795, "trtllm": 82224}


def test_sglang_reserves_more_on_a_bigger_gpu_and_more_gpus():
    _, one = roofline_profile("h200", "qwen3-8b", CTX, engine="sglang")
    _, eight = roofline_profile(
        "h200", "deepseek-v3", CTX, tp=8, ep=8, dtype="fp8", engine="sglang"
    )
    # (143771 MiB - (12 + TP/2) GiB) / 143771 MiB, rounded to 3 decimals
    assert one["memory"]["fraction"] == round((143771 - 12.5 * 1024) / 143771, 3) == 0.911
    assert eight["memory"]["fraction"] == round((143771 - 16 * 1024) / 143771, 3) == 0.886
    assert one["memory"]["fraction_of"] == "total memory"


# -- the KV dtype an engine keeps --------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "dtype", "requested", "kept"),
    [
        ("vllm", "bf16", "auto", "bf16"),
        ("vllm", "fp8", "auto", "bf16"),  # the model's compute dtype
        ("sglang", "fp8", "auto", "bf16"),
        ("trtllm", "bf16", "auto", "bf16"),
        ("trtllm", "fp8", "auto", "fp8"),  # an fp8 checkpoint's cache
        ("trtllm", "fp8", "bf16", "bf16"),  # the user's choice wins
        ("vllm", "fp8", "fp8", "fp8"),
    ],
)
def test_kv_dtype_is_the_engines_default_for_the_checkpoint(engine, dtype, requested, kept):
    _, meta = roofline_profile(
        "h200", "qwen3-8b", CTX, dtype=dtype, engine=engine, kv_dtype=requested
    )
    mem = meta["memory"]
    assert mem["kv_dtype"] == kept and mem["kv_dtype_requested"] == requested
    assert mem["kv_bytes_per_token_per_gpu"] == 36 * 2 * 8 * 128 * (1 if kept == "fp8" else 2)
    assert mem["kv_dtype_default"] == ("fp8" if (engine, dtype) == ("trtllm", "fp8") else "bf16")


def test_help_says_what_auto_means(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "profile", "--help")
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", out).split())
    assert code == 0 and "auto: the engine's default for the checkpoint" in text
    assert "fp8 under trtllm" in text


# -- admission: TensorRT-LLM reserves prompt + output and never preempts ----------------------


def test_reserving_admission_never_preempts_and_stays_in_the_budget(sim):
    recompute = sim(**KV_PRESSURE, admission="recompute")
    reserve = sim(**KV_PRESSURE, admission="reserve")
    assert recompute.summary["preemptions"] > 0  # the same load does preempt under vLLM's rule
    assert reserve.summary["preemptions"] == 0
    assert reserve.requests["finish_s"].notna().sum() == 120
    assert reserve.steps.kv_blocks_used.max() <= reserve.summary["kv_capacity_blocks"]
    assert reserve.summary["engine_limits"]["admission"] == "reserve"
    # holding every request's output from admission, fewer requests run at once
    assert reserve.steps.num_running.max() < recompute.steps.num_running.max()


@pytest.mark.parametrize(("engine", "admission"), [("trtllm", "reserve"), ("vllm", "recompute")])
def test_a_profiles_engine_sets_the_admission_a_spec_can_override(
    monkeypatch, capsys, tmp_path, engine, admission
):
    out = tmp_path / "p.csv"
    args = ["--roofline", "h200", "--model", "qwen3-8b", "--contexts", "2048"]
    code, _, _ = run_cli(
        monkeypatch, capsys, "profile", *args, "--engine", engine, "--out", str(out)
    )
    assert code == 0
    cfg = resolve_engine(RunSpec(profile=str(out))).config
    assert cfg.reserve_output == (admission == "reserve")
    other = "recompute" if admission == "reserve" else "reserve"
    assert resolve_engine(RunSpec(profile=str(out), admission=other)).config.reserve_output == (
        other == "reserve"
    )


def test_a_bad_admission_is_refused():
    with pytest.raises(InputError, match="admission must be one of"):
        Scheduling.from_record(
            {"mixed_prefill": True, "token_budget": 8192, "admission": "evict"}, "p.json"
        )
    with pytest.raises(InputError, match="--admission must be one of"):
        RunSpec(admission="greedy")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompts=st.lists(st.integers(1, 400), min_size=1, max_size=25),
    outputs=st.data(),
    gamma=st.integers(1, 6),
    slack=st.integers(0, 600),
    alpha=st.sampled_from([0.0, 0.7, 1.0]),  # 0: one token a round, every context visited
)
def test_no_admitted_request_outgrows_its_reservation(
    tmp_path, prompts, outputs, gamma, slack, alpha
):
    """Property: under the reserving rule, after every step each running request's next round
    (context + 1 + gamma tokens) fits in the blocks it holds, the pool is never overdrawn, no
    request is preempted and every request finishes."""
    out = outputs.draw(st.lists(st.integers(2, 300), min_size=len(prompts), max_size=len(prompts)))
    trace = write_trace(tmp_path / "t.jsonl", [0.01 * i for i in range(len(prompts))], prompts, out)
    flat = write_flat_profile(tmp_path / "flat.csv", 5.0)
    # room for the largest request and some slack: queues form, requests share the pool
    kv_tokens = max(p + o for p, o in zip(prompts, out, strict=True)) + gamma + 16 + slack
    checked = []
    step = Replica.step

    def checked_step(self, now):
        latency = step(self, now)
        kv = self.kv
        assert 0 <= kv.used <= kv.capacity and kv.rows_total == int(kv.rows.sum())
        need = -(-(self.batch.context + self.lookahead) // kv.block_size)
        assert (need <= kv.rows).all(), (need, kv.rows)
        checked.append(self.batch.size)
        return latency

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Replica, "step", checked_step)
        res = simulate(
            RunSpec(
                trace=str(trace),
                profile=str(flat),
                acceptance=f"iid:{alpha}",
                policy=f"fixed:{gamma}",
                gamma=gamma,
                kv_tokens=kv_tokens,
                admission="reserve",
                draft_cost="0",
            )
        )
    assert res.summary["preemptions"] == 0 and res.requests["finish_s"].notna().all()
    assert sum(checked) > 0
    np.testing.assert_array_equal(res.requests["output_tokens"], out)


@pytest.mark.parametrize("admission", ["reserve", "recompute"])
def test_a_request_whose_longest_round_does_not_fit_whole_blocks_is_refused(tmp_path, admission):
    """Prompt 100 + output 100: its longest round holds 200 tokens, 13 blocks of 16 (208
    tokens). 207 KV tokens are 12 whole blocks: refused under either admission (recompute
    used to pass its token count and then preempt the request forever)."""
    trace = write_trace(tmp_path / "t.jsonl", [0.0], [100], [100])
    flat = write_flat_profile(tmp_path / "flat.csv", 5.0)
    spec = dict(trace=str(trace), profile=str(flat), policy="ar", admission=admission)
    assert simulate(RunSpec(**spec, kv_tokens=208)).requests["finish_s"].notna().all()
    with pytest.raises(InputError, match=r"needs 208 KV tokens \(13 blocks of 16\), more than"):
        simulate(RunSpec(**spec, kv_tokens=207))


# -- a profile that mostly exceeds memory -----------------------------------------------------


def test_a_profile_mostly_over_memory_is_warned_about(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p.csv"
    args = ["--roofline", "h100", "--model", "llama3.3-70b", "--dtype", "fp8"]
    code, stdout, err = run_cli(monkeypatch, capsys, "profile", *args, "--out", str(out))
    assert code == 0 and out.exists() and "wrote" in stdout
    assert err.count("\n") == 1 and "354 of 642 rows need more KV than the 19581 tokens" in err
    assert "raise --tp, --kv-dtype fp8 or give shorter --contexts" in err  # weights: fp8 already
    code, _, err = run_cli(monkeypatch, capsys, "profile", *args, "--engine", "trtllm", "--out",
                           str(tmp_path / "t.csv"))  # fmt: skip
    assert code == 0 and err == ""  # 223 of 642: the fp8 cache holds most rows


def test_points_over_memory_count_the_rows_beyond_the_kv_cache():
    df, meta = roofline_profile("h100", "llama3.3-70b", dtype="fp8")
    held = meta["memory"]["kv_capacity_tokens"]
    assert meta["points_over_memory"] == int((df.num_seqs * df.context_len > held).sum()) == 354


# -- model names --------------------------------------------------------------------------------


def test_llama_3_1_70b_is_llama_3_3_70bs_architecture():
    alias = zoo.load_arch("llama3.1-70b")
    assert replace(alias, name="llama3.3-70b") == zoo.load_arch("llama3.3-70b")
    _, meta = roofline_profile("h100", "llama3.1-70b", CTX, dtype="fp8")
    assert meta["memory"]["kv_capacity_tokens"] == 19581


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("llama-3.1-70b", "did you mean 'llama3.1-70b'?"),
        ("qwen3-8", "did you mean 'qwen3-8b'?"),
        ("gptoss-120", "did you mean 'gpt-oss-120b'?"),
        ("mixtral-8x7b", None),
    ],
)
def test_an_unknown_model_is_refused_with_the_nearest_name(
    monkeypatch, capsys, tmp_path, name, hint
):
    args = ["profile", "--roofline", "h100", "--model", name, "--out", str(tmp_path / "p.csv")]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and f"unknown model {name!r}" in err
    assert (hint in err) if hint else "did you mean" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("model", "total", "active"),
    [
        ("qwen3-32b", 32.8e9, 32.8e9),  # Qwen3's model card: 32.8B
        ("qwen3-235b-a22b", 235e9, 22e9),
        ("kimi-k2", 1.03e12, 32.9e9),  # "1T total, 32B activated" (Kimi-K2's card, rounded)
    ],
)
def test_new_models_count_their_published_parameters(model, total, active):
    got = zoo.load_arch(model).param_counts()
    assert got == pytest.approx((total, active), rel=0.01)


@pytest.mark.parametrize(
    ("args", "fits"),
    [
        (["--model", "qwen3-32b"], True),
        (["--model", "qwen3-235b-a22b", "--tp", "8", "--ep", "8", "--dtype", "fp8"], True),
        (["--model", "kimi-k2", "--tp", "8", "--ep", "8", "--dtype", "fp8"], True),
        (["--model", "qwen3-235b-a22b"], False),  # 438 GiB of bf16 weights on one GPU
        (["--model", "kimi-k2", "--tp", "4", "--ep", "4", "--dtype", "fp8"], False),
    ],
)
def test_new_models_estimate_or_are_refused_by_the_memory_rule(
    monkeypatch, capsys, tmp_path, args, fits
):
    out = tmp_path / "p.csv"
    argv = ["profile", "--roofline", "h200", *args, "--contexts", "2048", "--out", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    if fits:
        assert code == 0 and out.exists()
        return
    assert code == 2 and err.count("\n") == 1 and "leaving no KV cache" in err, err
    assert list(tmp_path.iterdir()) == []

"""The serving-grade GPU profile module on the CPU: GQA attention against a naive reference, the
step's KV-cache writes and logits against a per-sequence reference decoder, the timings table,
and the device script's config and CSV (dsim.models.gpu_profile)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT
from samples import TINY_QWEN3 as TINY

from dsim.errors import InputError
from dsim.hardware import estimate_check, zoo
from dsim.hardware.latency import LatencyModel, read_profile
from dsim.hardware.measure import latency_percentiles
from dsim.models.gpu_profile import (
    COLUMNS,
    Decoder,
    Shape,
    VerifyGrid,
    VerifyStep,
    _percentile,
    causal_mask,
    gqa_attention,
    measure,
    profile_serving,
    replayer,
)
from dsim.models.ragged import KVPool
from dsim.models.serving_profile import QWEN3_8B_CONFIG

pytestmark = pytest.mark.usefixtures("one_thread")


def naive_attention(q, k, v, context):
    """Each query head against its KV head repeated, scores materialised, token i of the block
    seeing keys 0..context + i."""
    r, n, heads, d = q.shape
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("rnhd,rhsd->rhns", q, k) / math.sqrt(d)
    keys = torch.arange(k.shape[2])
    allowed = keys[None, :] <= context + torch.arange(n)[:, None]
    scores = scores.masked_fill(~allowed, -math.inf)
    return torch.einsum("rhns,rhsd->rnhd", scores.softmax(-1), v)


@pytest.mark.parametrize(("n", "context"), [(1, 6), (3, 5), (4, 0)])
def test_gqa_attention_matches_the_naive_reference(n, context):
    gen = torch.Generator().manual_seed(n)
    r, heads, kv_heads, d = 3, 6, 2, 8
    q = torch.randn(r, n, heads, d, generator=gen, dtype=torch.float64)
    k = torch.randn(r, kv_heads, context + n, d, generator=gen, dtype=torch.float64)
    v = torch.randn(r, kv_heads, context + n, d, generator=gen, dtype=torch.float64)
    mask = causal_mask(n, context, heads // kv_heads, torch.float64, "cpu") if n > 1 else None
    got = gqa_attention(q, k, v, mask)
    torch.testing.assert_close(got, naive_attention(q, k, v, context), rtol=1e-10, atol=1e-10)


def test_causal_mask_rows_are_aligned_and_repeat_per_group():
    mask = causal_mask(3, 5, 2, torch.float32, "cpu")
    assert mask.shape == (6, 8) and mask.stride(0) % 16 == 0
    assert torch.equal(mask[:3], mask[3:])
    assert [(row == 0).sum().item() for row in mask[:3]] == [6, 7, 8]


def reference_logits(model: Decoder, cache: torch.Tensor, step: VerifyStep):
    """Per sequence and layer, the same decoder written out: the cache's first C positions as
    the context, then the block's own keys; returns logits and the block's K, V per layer."""
    s = model.shape
    heads, kv_heads, d, eps = s.num_attention_heads, s.num_key_value_heads, s.head_dim, 1e-6

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(x, pos):
        freq = 1.0 / (s.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        ang = pos[:, None].double() * freq
        cos, sin = ang.cos().repeat(1, 2)[:, None], ang.sin().repeat(1, 2)[:, None]
        half = d // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    n, c = step.tokens, step.context
    pos = c + torch.arange(n)
    logits, written = [], []
    for seq in range(step.seqs):
        x = model.embed[step.ids[seq * n : (seq + 1) * n]]
        kvs = []
        for i, w in enumerate(model.layers):
            qkv = norm(x, w["in_norm"]) @ w["qkv"].T
            q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], -1)
            q = rope(norm(q.view(n, heads, d), w["q_norm"]), pos)
            k = rope(norm(k.view(n, kv_heads, d), w["k_norm"]), pos)
            v = v.view(n, kv_heads, d)
            kvs.append((k, v))
            keys = torch.cat([cache[i, 0, seq, :, :c], k.transpose(0, 1)], 1)
            values = torch.cat([cache[i, 1, seq, :, :c], v.transpose(0, 1)], 1)
            out = naive_attention(q[None], keys[None], values[None], c)[0]
            x = x + out.reshape(n, heads * d) @ w["o"].T
            gate, up = (norm(x, w["post_norm"]) @ w["gate_up"].T).chunk(2, -1)
            x = x + (torch.nn.functional.silu(gate) * up) @ w["down"].T
        logits.append(norm(x, model.norm) @ model.lm_head.T)
        written.append(kvs)
    return torch.cat(logits), written


@pytest.mark.parametrize(("seqs", "tokens", "context"), [(2, 3, 4), (3, 1, 6)])
def test_step_writes_its_kv_into_the_reserved_cache_and_matches_the_reference(
    seqs, tokens, context
):
    shape = Shape.from_fields(TINY)
    model = Decoder(shape, torch.device("cpu"), torch.float64, seed=1)
    pool = KVPool(shape, torch.float64)
    pool.reserve(4, 16)
    storage = pool.kv.data_ptr()
    for rid in range(4):
        pool.open(rid, 16)
    assert pool.kv.data_ptr() == storage  # reserved: opening copies nothing
    pool.kv.copy_(torch.randn(pool.kv.shape, generator=torch.Generator().manual_seed(2)))
    before = pool.kv.clone()
    step = VerifyStep(model, seqs, tokens, context, seed=3)
    with torch.inference_mode():
        logits = model.forward(pool, step)
    want, written = reference_logits(model, before, step)
    torch.testing.assert_close(logits, want, rtol=1e-9, atol=1e-9)
    block = slice(context, context + tokens)
    for seq in range(seqs):
        for i, (k, v) in enumerate(written[seq]):
            torch.testing.assert_close(pool.kv[i, 0, seq, :, block], k.transpose(0, 1))
            torch.testing.assert_close(pool.kv[i, 1, seq, :, block], v.transpose(0, 1))
    untouched = before.clone()
    untouched[:, :, :seqs, :, block] = pool.kv[:, :, :seqs, :, block]
    assert torch.equal(pool.kv, untouched)  # nothing else in the cache changed


def test_cpu_replay_is_the_step_function_called_eagerly():
    calls = []
    run = replayer(lambda: calls.append(1), torch.device("cpu"), warmup=2)
    assert len(calls) == 2
    run()
    assert len(calls) == 3


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 37])
def test_the_device_percentile_is_the_other_profiles_method(n):
    """By hand (the GPU machine has no numpy), the same linear method as every other profile's
    `latency_percentiles`, to rounding."""
    ms = [float(x) for x in np.random.default_rng(n).lognormal(0.0, 1.0, n)]
    p10, p50, p90 = latency_percentiles(np.array(ms) / 1e3)
    mine = (_percentile(ms, 0.1), _percentile(ms, 0.5), _percentile(ms, 0.9))
    assert mine == pytest.approx((p10, p50, p90), rel=1e-12)


def test_timings_table_has_one_row_per_point_and_ordered_percentiles():
    model = Decoder(Shape.from_fields(TINY), torch.device("cpu"), torch.float32)
    grid = VerifyGrid(seqs=(1, 3), tokens=(1, 2, 4), contexts=(0, 5))
    rows, skipped = measure(model, grid, repeats=3, warmup=1)
    assert not skipped and len(rows) == grid.size == 12
    assert [
        (r["num_seqs"], r["batch_tokens"] // r["num_seqs"], r["context_len"]) for r in rows
    ] == [(r, q, c) for r, q, c in grid.points()]
    for row in rows:
        assert set(row) == set(COLUMNS) - {"device", "model", "dtype"}
        assert 0 < row["latency_ms_p10"] <= row["latency_ms"] <= row["latency_ms_p90"]
    rows, skipped = measure(model, grid, repeats=1, warmup=0, deadline_s=-1.0)
    assert not rows and len(skipped) == 12 and {s["why"] for s in skipped} == {"deadline"}


def test_profile_is_a_dsim_profile_with_its_sidecar(tmp_path):
    out = tmp_path / "tiny.csv"
    grid = VerifyGrid(seqs=(1, 2), tokens=(1, 2), contexts=(4, 8))
    profile_serving(
        TINY, "tiny", grid, out, device="cpu", dtype="float32", repeats=2, warmup=1,
        progress=lambda line: None,
    )  # fmt: skip
    df = read_profile(out)
    assert len(df) == 8 and (df["phase"] == "verify").all()
    assert LatencyModel.from_csv(out).latency(2, 2, 6) > 0
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["estimate"] is False and "called eagerly" in meta["method"]
    assert "not an engine preset's overhead" in meta["measures"]


def test_bad_config_and_dtype_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="model_type must be llama or qwen3"):
        Shape.from_fields({**TINY, "model_type": "qwen3_moe"})
    with pytest.raises(InputError, match="--dtype must be float32, float16 or bfloat16, got"):
        profile_serving(
            TINY, "tiny", VerifyGrid((1,), (1,), (1,)), tmp_path / "x.csv", dtype="int8"
        )
    assert not (tmp_path / "x.csv").exists()


def test_device_config_is_the_zoos_qwen3_8b():
    fields = json.loads(QWEN3_8B_CONFIG.read_text())
    assert fields == zoo.ZOO["qwen3-8b"]
    shape = Shape.from_fields(fields)
    assert (shape.num_attention_heads, shape.num_key_value_heads, shape.qk_norm) == (32, 8, True)


def test_comparison_reads_level_and_shape_point_by_point(tmp_path):
    compare = estimate_check
    rows = [(r, q, c) for c in (512, 2048) for r in (1, 16) for q in (1, 2, 4)]
    points = pd.DataFrame(rows, columns=["num_seqs", "q", "context_len"])
    points["batch_tokens"] = points["num_seqs"] * points["q"]
    est = compare.gpu_only_ms(points)
    measured = points.assign(latency_ms=est * 1.25, phase="verify")  # 25% above everywhere
    table, summary = compare.compare(measured)
    assert len(table) == len(rows)
    assert table["level_error"].to_numpy() == pytest.approx(-0.2)
    assert table["shape_error"].abs().max() < 1e-12
    assert summary["level"]["median_abs"] == pytest.approx(0.2)
    assert summary["shape"]["cells_within_tolerance"] == summary["shape"]["cells"] == 8


def test_attention_reads_the_cache_in_place_once_per_kv_head(monkeypatch):
    """What SDPA is handed: the cache's own memory (no copy), kv_heads heads (no repeat), and
    each KV head's query heads as its query rows."""
    shape = Shape.from_fields(TINY)
    model = Decoder(shape, torch.device("cpu"), torch.float32)
    pool = KVPool(shape, torch.float32)
    pool.reserve(2, 12)
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None):
        seen.append((q.shape, k.shape, k.data_ptr(), v.data_ptr()))
        return sdpa(q, k, v, attn_mask=attn_mask)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with torch.inference_mode():
        model.forward(pool, VerifyStep(model, 2, 3, 5))
    assert len(seen) == shape.num_hidden_layers
    group = shape.num_attention_heads // shape.num_key_value_heads
    for i, (q, k, k_ptr, v_ptr) in enumerate(seen):
        assert tuple(q) == (2, shape.num_key_value_heads, group * 3, shape.head_dim)
        assert tuple(k) == (2, shape.num_key_value_heads, 8, shape.head_dim)
        assert k_ptr == pool.kv[i, 0].data_ptr() and v_ptr == pool.kv[i, 1].data_ptr()


def test_device_script_needs_only_torch(tmp_path):
    """The script runs with pandas, numpy, transformers, simpy, typer and rich unimportable
    (the GPU machine has torch alone) and writes a profile; bad input exits 2 in one line."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "p.csv"
    blocked = ("pandas", "numpy", "transformers", "simpy", "typer", "rich", "scipy", "pyarrow")
    code = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        "sys.argv = ['serving_profile'] + sys.argv[1:]\n"
        "runpy.run_module('dsim.models.serving_profile', run_name='__main__')\n"
    )
    args = ["--config", str(config), "--device", "cpu", "--dtype", "float32", "--seqs", "1,2",
            "--tokens", "1,2", "--contexts", "3", "--repeats", "2", "--out", str(out)]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "4 of 4 points" in done.stdout and len(read_profile(out)) == 4
    bad = subprocess.run(
        [sys.executable, "-c", code, *args[:-2], "--tokens", "0", "--out", str(tmp_path / "b.csv")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--tokens" in bad.stderr
    assert not (tmp_path / "b.csv").exists()

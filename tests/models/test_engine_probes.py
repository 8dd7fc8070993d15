"""The engine probes on the CPU (dsim.models.engine_probes): the rejection sampler's outputs
(greedy by construction, random lossless by a chi-square test with its power shown), the op
counter, the EAGLE-3 pass, each probe's row, and the device script's bad input and imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from samples import TINY_QWEN3 as TINY
from scipy.stats import chisquare

from dsim.hardware.probe_check import compare
from dsim.models.engine_probes import (
    Eagle3Drafter,
    ProbeGrid,
    dispatched_ops,
    drafter_probe,
    graphs_probe,
    rejection_sample,
    run_probes,
)
from dsim.models.gpu_profile import Decoder, Shape, VerifyStep
from dsim.models.ragged import KVPool

pytestmark = pytest.mark.usefixtures("one_thread")
SHAPE = Shape.from_fields(TINY)
GRID = ProbeGrid((1, 3), 4, (1, 2), 4, 3, (1, 2), (1, 3))


def _one_hot_logits(best: list[list[int]], vocab: int) -> torch.Tensor:
    """Logits whose argmax at request r, position j is best[r][j]."""
    rows = torch.tensor(best).reshape(-1)
    return torch.nn.functional.one_hot(rows, vocab).float() * 5.0


def test_greedy_keeps_drafts_to_the_first_mismatch_then_the_targets_token():
    logits = _one_hot_logits([[3, 1, 4, 2], [3, 1, 4, 2], [0, 0, 0, 7]], 8)
    drafts = torch.tensor([[3, 1, 4], [3, 5, 4], [6, 0, 0]])
    out = rejection_sample(logits, drafts, "greedy")
    assert out.tolist() == [[3, 1, 4, 2], [3, 1, -1, -1], [0, -1, -1, -1]]


def _random_outputs(n: int, drafts: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.tensor([[1.0, 0.2, -0.5, 0.7, -1.2], [0.1, 1.1, 0.3, -0.4, 0.0], [0.0] * 5])
    k = len(drafts)
    out = rejection_sample(logits[: k + 1].repeat(n, 1), torch.tensor([drafts] * n), "random", gen)
    return out, torch.softmax(logits, dim=-1)


@pytest.mark.parametrize("draft", [0, 2, 4])
def test_random_first_token_is_distributed_as_the_target_whatever_the_draft(draft):
    """Lossless: the first output token ~ p, whether the draft is likely or not (20,000
    rounds, chi-square). Power: the same test rejects a sampler that keeps every draft."""
    n = 20_000
    out, p = _random_outputs(n, [draft, 1])
    counts = torch.bincount(out[:, 0], minlength=5).double()
    expected = n * p[0].double() / p[0].double().sum()
    assert chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-3
    tilted = counts.clone()
    tilted[draft] += 0.1 * n  # a sampler that also kept a tenth of its rejected drafts
    tilted *= n / tilted.sum()
    assert chisquare(tilted.numpy(), expected.numpy()).pvalue < 1e-6


def test_random_second_token_given_the_first_draft_kept_is_the_targets_next():
    n = 40_000
    out, p = _random_outputs(n, [0, 3], seed=1)
    kept = out[out[:, 0] == 0]
    counts = torch.bincount(kept[:, 1], minlength=5).double()
    assert len(kept) > 0.3 * n
    expected = counts.sum() * p[1].double() / p[1].double().sum()
    assert chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-3


def test_random_output_is_drafts_then_one_correction_then_padding():
    out, _ = _random_outputs(2_000, [0, 1], seed=2)
    drafts = torch.tensor([0, 1, -1])
    for row in out:
        taken = int((row[:2] == drafts[:2]).long().cumprod(0).sum())
        assert (row[:taken] == drafts[:taken]).all() and row[taken] >= 0
        assert (row[taken + 1 :] == -1).all()


def test_the_op_counter_counts_kernels_not_views():
    x = torch.ones(4, 4)
    assert dispatched_ops(lambda: (x + 1).view(-1) * 2) == 2
    assert dispatched_ops(lambda: x.view(2, 8).transpose(0, 1)) == 0


def _model():
    return Decoder(SHAPE, torch.device("cpu"), torch.float32)


def _pool(shape, slots: int, capacity: int) -> KVPool:
    pool = KVPool(shape, torch.float32, "cpu")
    pool.reserve(slots, capacity)
    for rid in range(slots):
        pool.open(rid, capacity)
    return pool


def test_the_graphs_row_prices_launch_time_per_layer_and_per_op():
    model = _model()
    row = graphs_probe(model, _pool(SHAPE, 3, 5), 3, 4, warmup=1, repeats=3)
    assert row["tokens"] == row["num_seqs"] == 3 and row["layers"] == 2
    assert row["aten_ops"] > 20 * row["layers"]  # unfused: norms, rotary, SwiGLU per layer
    assert row["launch_us_per_layer"] == pytest.approx(row["eager_launch_ms"] * 1e3 / 2)
    assert row["launch_us_per_op"] == pytest.approx(row["eager_launch_ms"] * 1e3 / row["aten_ops"])
    for kind in ("eager", "graph"):
        assert 0 < row[f"{kind}_ms_p10"] <= row[f"{kind}_ms"] <= row[f"{kind}_ms_p90"]


def test_the_eagle3_pass_drafts_one_token_a_request_and_writes_its_one_layer_cache():
    model = _model()
    drafter = Eagle3Drafter(model, draft_vocab=20)
    pool = _pool(drafter.shape, 2, 8)
    pool.kv.zero_()
    step = VerifyStep(model, 2, 3, 4)  # the first pass over 3 positions a request
    hidden = torch.randn(2 * 3, 3 * SHAPE.hidden_size)
    with torch.inference_mode():
        first = drafter.forward(pool.kv[0, :, :2], step, hidden, first=True)
        again = drafter.forward(pool.kv[0, :, :2], step, hidden, first=True)
        later = drafter.forward(pool.kv[0, :, :2], VerifyStep(model, 2, 1, 7),
                                torch.randn(2, SHAPE.hidden_size), first=False)  # fmt: skip
    assert first.shape == later.shape == (2,) and ((first >= 0) & (first < 20)).all()
    assert torch.equal(first, again)
    assert (
        pool.kv.shape[0] == 1 and (pool.kv[0, :, :2, :, 4:8].abs().sum(dim=(0, 1, 2, 4)) > 0).all()
    )
    assert pool.kv[0, :, :2, :, :4].abs().sum() == 0
    row = drafter_probe(drafter, pool, 2, 4, 3, warmup=1, repeats=2)
    assert row["num_seqs"] == 2 and row["first_tokens"] == 3
    assert row["first_ms"] > 0 and row["rest_ms"] > 0


def test_every_point_is_timed_or_skipped_with_its_reason():
    result = run_probes(SHAPE, GRID, device="cpu", dtype="float32", repeats=2, warmup=1,
                        progress=lambda line: None)  # fmt: skip
    assert [r["tokens"] for r in result["graphs"]] == [1, 3]
    assert [r["num_seqs"] for r in result["drafter"]] == [1, 2]
    assert len(result["sampler"]) == 2 * 2 * 2 and result["skipped"] == []
    late = run_probes(SHAPE, GRID, device="cpu", dtype="float32", repeats=2, warmup=1,
                      deadline_s=-1.0, progress=lambda line: None)  # fmt: skip
    assert late["graphs"] == [] and len(late["skipped"]) == 2 + 2 + 8
    assert {s["why"] for s in late["skipped"]} == {"deadline"}


def test_the_comparison_reads_every_probe_the_device_writes():
    """The JSON the device brings back, relabelled as an H200's, through every rule."""
    grid = ProbeGrid((3, 4), 4, (1, 2), 4, 3, (1, 2), (1, 3))
    result = run_probes(SHAPE, grid, device="cpu", dtype="float32", repeats=2, warmup=1,
                        progress=lambda line: None)  # fmt: skip
    probes = json.loads(json.dumps({**result, "device": "NVIDIA H200"}))
    tables, summary = compare(probes)
    assert summary["padding"]["points"] == 1 and summary["launch"]["points"] == 2
    assert len(tables["drafter"]) == 2 * 2 and summary["drafter"]["points"] == 4
    assert len(tables["sampler"]) == 8 and set(summary["sampler"]["median_share"]) == {
        "greedy", "random"}  # fmt: skip


def test_a_sampler_mode_must_be_known():
    with pytest.raises(ValueError, match="greedy or random"):
        ProbeGrid((1,), 4, (1,), 4, 2, (1,), (1,), ("typical",))


def test_device_script_needs_only_torch_and_refuses_bad_input_in_one_line(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    blocked = ("pandas", "numpy", "transformers", "simpy", "typer", "rich", "scipy", "pyarrow")
    code = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        "sys.argv = ['engine_probes'] + sys.argv[1:]\n"
        "runpy.run_module('dsim.models.engine_probes', run_name='__main__')\n"
    )
    args = ["--config", str(config), "--device", "cpu", "--dtype", "float32",
            "--decode-tokens", "1,2", "--decode-context", "3", "--draft-seqs", "1",
            "--sampler-seqs", "1", "--sampler-drafts", "2", "--repeats", "2"]  # fmt: skip
    out = tmp_path / "probes.json"
    done = subprocess.run([sys.executable, "-c", code, *args, "--out", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert len(result["graphs"]) == 2 and len(result["sampler"]) == 2
    assert result["command"].startswith("python3 -m dsim.models.engine_probes")
    cases = (
        (["--out", str(tmp_path / "p.txt")], ".json"),
        (["--decode-tokens", "0", "--out", str(tmp_path / "b.json")], "--decode-tokens"),
        (["--repeats", "0", "--out", str(tmp_path / "c.json")], "--repeats"),
    )
    for bad, word in cases:
        refused = subprocess.run([sys.executable, "-c", code, *args, *bad],
                                 capture_output=True, text=True)  # fmt: skip
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert word in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probes.json", "tiny.json"]

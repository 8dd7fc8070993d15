"""The engine probes' comparison (dsim.hardware.probe_check) on synthetic probes built from
dsim's own estimate: a probe equal to the estimate passes every rule, one off by a stated
factor fails the rule it breaks by exactly that factor, and the GPU comes from the device."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsim.errors import InputError
from dsim.hardware import probe_check as pc

TOKENS = [1, 3, 4, 6, 8, 20, 24, 100, 104]
CONTEXT = 512


def _estimate(tokens: list[int]) -> np.ndarray:
    points = pd.DataFrame({"batch_tokens": tokens, "num_seqs": tokens, "context_len": CONTEXT})
    return pc.gpu_only_ms(points, "qwen3-8b", "h200")


def _graphs(per_op_us: float = 3.0, scale: dict[int, float] | None = None) -> list[dict]:
    graph = _estimate(TOKENS) * [(scale or {}).get(n, 1.0) for n in TOKENS]
    return [
        {
            "tokens": n,
            "context_len": CONTEXT,
            "layers": 36,
            "aten_ops": 1000,
            "graph_ms": g,
            "eager_ms": g + 1.0,
            "launch_us_per_layer": per_op_us * 1000 / 36,
            "launch_us_per_op": per_op_us,
        }  # fmt: skip
        for n, g in zip(TOKENS, graph, strict=True)
    ]


def _drafter(factor: float) -> list[dict]:
    probe = pd.DataFrame({"num_seqs": [1, 8, 64], "context_len": 1024, "first_tokens": 4})
    rows = probe.assign(first_ms=1.0, rest_ms=1.0)
    table, _ = pc.drafter(rows, "qwen3-8b", "h200")
    est = table.set_index(["pass", "num_seqs"])["estimate_ms"]
    return [
        {
            **r,
            "first_ms": est["first", r["num_seqs"]] * factor,
            "rest_ms": est["rest", r["num_seqs"]] * factor,
        }  # fmt: skip
        for r in probe.to_dict(orient="records")
    ]


def _sampler(share: float) -> list[dict]:
    r, k = np.array([1, 16, 256]), np.array([1, 3, 7])
    points = pd.DataFrame({"batch_tokens": r * (k + 1), "num_seqs": r, "context_len": CONTEXT})
    verify = pc.gpu_only_ms(points, "qwen3-8b", "h200")
    return [
        {
            "mode": m,
            "num_seqs": int(a),
            "drafts": int(b),
            "ms": v * share * (2 if m == "random" else 1),
        }
        for m, twice in (("greedy", 1), ("random", 2))
        for a, b, v in zip(r, k, verify, strict=True)
    ]


def _probes(**kw) -> dict:
    return {
        "device": "NVIDIA H200", "grid": {"decode_context": CONTEXT}, "skipped": [],
        "graphs": _graphs(kw.get("per_op_us", 3.0), kw.get("scale")),
        "drafter": _drafter(kw.get("factor", 1.0)), "sampler": _sampler(kw.get("share", 0.01)),
    }  # fmt: skip


def test_the_gpu_is_read_from_the_device_name_and_others_are_refused():
    assert pc.gpu_key("NVIDIA H100 80GB HBM3") == "h100"
    assert pc.gpu_key("NVIDIA H200") == "h200"
    with pytest.raises(InputError, match="H100 or H200"):
        pc.gpu_key("cpu")


def test_a_step_is_padded_to_vllms_next_captured_size():
    pairs = {n: pc.next_captured(n) for n in (1, 3, 4, 6, 12, 20, 33, 100, 250, 260, 500, 512, 600)}
    assert pairs == {1: None, 3: 4, 4: None, 6: 8, 12: 16, 20: 24, 33: 40, 100: 104, 250: 256,
                     260: 272, 500: 512, 512: None, 600: None}  # fmt: skip


def test_probes_equal_to_the_estimate_pass_every_rule():
    tables, s = pc.compare(_probes())
    assert s["gpu"] == "h200"
    assert list(tables["padding"]["tokens"]) == [3, 6, 20, 100]
    assert s["padding"]["within"] == 4
    assert s["padding"]["worst_abs"] == pytest.approx(0, abs=1e-12)
    assert s["launch"]["holds"] and s["launch"][
        "median_engine_launch_us_per_layer"
    ] == pytest.approx(30)
    assert s["launch"]["points"] == 7  # n <= 64
    assert s["drafter"]["met"] and s["drafter"]["median_abs"] == pytest.approx(0, abs=1e-12)
    assert s["sampler"]["median_share"] == pytest.approx({"greedy": 0.01, "random": 0.02})
    assert not s["sampler"]["per_round_zero_contradicted"]


def test_each_rule_fails_by_the_factor_it_is_broken_by():
    _, s = pc.compare(_probes(per_op_us=20.0, scale={24: 1.25}, factor=1.5, share=0.06))
    assert s["padding"]["within"] == 3
    assert s["padding"]["worst_abs"] == pytest.approx(1 - 1 / 1.25)  # 20 -> 24 padded 1.25x
    assert not s["launch"]["holds"]  # 200 us a layer, past the prior's 150
    assert s["drafter"]["median_signed"] == pytest.approx(1 / 1.5 - 1)
    assert not s["drafter"]["met"]  # a third below: past 20%
    assert s["sampler"]["per_round_zero_contradicted"]


def test_a_drafter_pass_under_the_host_floor_is_counted():
    table, s = pc.drafter(pd.DataFrame(_drafter(1.0)), "qwen3-8b", "h200")
    assert s["passes_below_host_floor"] == int((table["measured_ms"] < 0.175).sum())
    assert s["points"] == 6

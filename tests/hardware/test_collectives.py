"""The engines' custom all-reduce: closed forms, vLLM's switch rule, the fit, the NCCL fallback."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsim.errors import InputError
from dsim.hardware.collectives import (
    MAX_BYTES,
    POINTS,
    CustomAllReduce,
    CustomArPhysics,
    custom_allreduce_table,
    fit_physics,
    one_shot,
    point_errors,
)
from dsim.hardware.gpu_model import AllReduce

KIB = 1024
PHYS = CustomArPhysics(latency_1_s=5e-6, latency_2_s=12e-6, link_bw=400e9)
NCCL = AllReduce({2: (20e-6, 200e9), 4: (30e-6, 180e9), 8: (30e-6, 150e9)}, "h100")
AR = CustomAllReduce(PHYS, NCCL)


def test_closed_forms():
    # one-shot: 5 us + (4 - 1) * 400 KB / 400 GB/s = 5 + 3 = 8 us
    assert float(PHYS.one_shot(400e3, 4)) == pytest.approx(8e-6)
    # two-shot: 12 us + 2 * 7/8 * 1.6 MB / 400 GB/s = 12 + 7 = 19 us
    assert float(PHYS.two_shot(1.6e6, 8)) == pytest.approx(19e-6)
    # NCCL above the cap: 30 us + 16 MiB / 180 GB/s
    size = 16 * 1024 * KIB
    assert float(AR.time(size, 4)) == pytest.approx(30e-6 + size / 180e9)
    assert AR.time(np.array([1e3, 1e6]), 1).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("tp", "size", "branch"),
    [
        (4, 512 * KIB - 16, "one"),
        (4, 512 * KIB + 16, "two"),
        (8, 256 * KIB - 16, "one"),
        (8, 256 * KIB, "two"),
        (6, 256 * KIB - 16, "one"),
        (6, 256 * KIB + 16, "two"),
        (2, 512 * KIB + 16, "one"),  # TP2 is always one-shot below the cap
        (2, MAX_BYTES - 16, "one"),
        (2, MAX_BYTES, "nccl"),  # inp_size < max_size: the cap itself goes to NCCL
        (8, MAX_BYTES + 16, "nccl"),
    ],
)
def test_switch_rule(tp, size, branch):
    branches = {"one": PHYS.one_shot(size, tp), "two": PHYS.two_shot(size, tp)}
    if tp in NCCL.fits:
        branches["nccl"] = NCCL.time(size, tp)
    got = float(AR.time(np.array([size]), tp)[0])
    assert got == pytest.approx(float(branches.pop(branch)), rel=1e-12)
    assert all(abs(got - float(o)) > 1e-9 for o in branches.values())  # others differ


def test_unsupported_world_size_goes_to_nccl():
    nccl3 = AllReduce({3: (25e-6, 100e9)}, "h100")
    ar = CustomAllReduce(PHYS, nccl3)
    size = np.array([16 * KIB, 1024 * KIB])
    assert np.array_equal(ar.time(size, 3), nccl3.time(size, 3))
    with pytest.raises(InputError, match="no measured all-reduce for 3 GPUs"):
        AR.time(size, 3)


def test_tp6_small_messages_need_no_nccl_table():
    size = np.array([16 * KIB, 1024 * KIB])
    assert np.allclose(AR.time(size, 6), [PHYS.one_shot(size[0], 6), PHYS.two_shot(size[1], 6)])
    with pytest.raises(InputError):
        AR.time(np.array([MAX_BYTES]), 6)


BRANCHES = {  # (tp, lowest size, size it stops below) of each branch
    "tp2 one-shot": (2, 0, MAX_BYTES),
    "tp4 one-shot": (4, 0, 512 * KIB),
    "tp4 two-shot": (4, 512 * KIB, MAX_BYTES),
    "tp8 one-shot": (8, 0, 256 * KIB),
    "tp8 two-shot": (8, 256 * KIB, MAX_BYTES),
    "tp8 nccl": (8, MAX_BYTES, 1 << 31),
}


@given(
    st.sampled_from(sorted(BRANCHES)),
    st.floats(0.0, 1.0, allow_nan=False),
    st.floats(0.0, 1.0, allow_nan=False),
)
def test_monotone_within_each_branch(branch, u, v):
    tp, lo, hi = BRANCHES[branch]
    sizes = np.sort(np.floor(lo + np.array([u, v]) * (hi - 1 - lo)))
    t = AR.time(sizes, tp)
    assert t[0] <= t[1]


def test_fit_within_25_percent_of_every_published_point():
    physics = fit_physics()
    errors = point_errors(physics)
    assert len(errors) == len(POINTS) == 8
    assert np.all(np.abs(errors) < 0.25), errors
    assert physics.latency_2_s > physics.latency_1_s > 0  # two-shot syncs twice
    assert fit_physics() == physics  # deterministic


@pytest.mark.parametrize("calibration", ["h100", "a100"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_custom_beats_nccl_at_16kib(calibration, tp):
    ar = custom_allreduce_table(calibration)
    size = np.array([16 * KIB])
    assert ar.time(size, tp)[0] < ar.nccl.time(size, tp)[0]
    assert ar.fits == ar.nccl.fits and ar.gpu == calibration


def test_record_is_a_json_sidecar():
    record = json.loads(json.dumps(custom_allreduce_table("h100").record()))
    assert record["rule"]["supported_world_sizes"] == [2, 4, 6, 8]
    assert record["rule"]["custom_below_bytes"] == MAX_BYTES
    assert [p["relative_error"] for p in record["points"]] == pytest.approx(
        point_errors(fit_physics()).tolist()
    )
    assert set(record["nccl_check"]) == {f"tp{tp}_{mib}MiB" for tp in (2, 4, 8) for mib in (8, 64)}
    for row in record["nccl_check"].values():
        assert row["custom_over_nccl"] == pytest.approx(row["custom_s"] / row["nccl_s"])


def test_unknown_calibration_is_refused():
    with pytest.raises(InputError, match="no custom all-reduce for 'mi300'"):
        custom_allreduce_table("mi300")


def test_one_shot_rule_vectorised():
    sizes = np.array([0, 256 * KIB - 16, 256 * KIB, 512 * KIB - 16, 512 * KIB])
    assert one_shot(sizes, 4).tolist() == [True, True, True, True, False]
    assert one_shot(sizes, 8).tolist() == [True, True, False, False, False]

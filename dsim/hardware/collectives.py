"""The custom all-reduce serving engines run for small messages over NVLink.

vLLM, SGLang and TensorRT-LLM do not hand a decode step's small all-reduce to NCCL: each rank
reads its peers' buffers through NVLink (CUDA IPC) and reduces them itself (docs/engine-priors.md,
c. Custom all-reduce). Two kernels, each a fixed launch/synchronisation latency plus NVLink
traffic:

- one-shot: every rank reads every peer's whole buffer, (tp - 1) * bytes over its links;
- two-shot: a reduce-scatter then an all-gather, 2 * (tp - 1) / tp * bytes over its links.

The engine picks one by vLLM's rule (below); messages at or above the 8 MiB buffer, and GPU
counts the kernel does not support, go to NCCL (`gpu_model.AllReduce`, fitted on Vidur's tables).
The three physical terms are fitted on published H100 kernel timings (`POINTS`). A100 (NVLink3)
borrows H100's figures: a stated assumption, no A100 kernel timing was found; the fitted link
bandwidth (~375 GB/s) exceeds NVLink3's 300 GB/s per direction, so A100 times are optimistic.
The rule assumes a fully NVLink-connected node (NVSwitch, as in a DGX), which vLLM requires
above 2 GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Literal

import numpy as np
from scipy.optimize import nnls

from dsim.errors import InputError
from dsim.hardware.gpu_fit import allreduce_table
from dsim.hardware.gpu_model import AllReduce

Stage = Literal["one-shot", "two-shot"]

# vLLM vllm/distributed/device_communicators/custom_all_reduce.py @ 00d618aa:
# `_SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]`, `max_size=8192 * 1024`, `return inp_size < self.max_size`
# (SGLang keeps the same list and `_MAX_CAR_SIZE = 8192 * 1024` on CUDA).
SUPPORTED_WORLD_SIZES = (2, 4, 6, 8)
MAX_BYTES = 8192 * 1024
RULE_SOURCE = (
    "vLLM custom_all_reduce.py @ 00d618aa (world sizes, max_size, inp_size < max_size); "
    "csrc/custom_all_reduce.cuh @ 036bb685 (1stage/2stage switch); SGLang keeps both"
)
# csrc/custom_all_reduce.cuh @ 036bb685: one-shot `if (world_size_ == 2)`, else on full NVLink
# `(world_size_ <= 4 && bytes < 512 * 1024) || (world_size_ <= 8 && bytes < 256 * 1024)`.
ONE_SHOT_BELOW = ((4, 512 * 1024), (8, 256 * 1024))  # (largest world size, byte limit)

# GPU calibrations (gpu_model.Gpu.calibration) whose nodes are NVLink/NVSwitch DGX boxes.
NVLINK_CALIBRATIONS = ("h100", "a100")

MB = 1024 * 1024
PR_24111 = "vLLM PR #24111 (H100, hidden 8192; the TP6 table's GPU heading is not in the excerpt)"
PR_24532 = "vLLM PR #24532 (TP4, hidden 8192; GPU not named in the excerpt)"
FLAGGEMS_773 = (
    "FlagGems-vllm PR #773 (8xH100, TRT-LLM one-shot fused all-reduce+RMSNorm, bf16 [M, 6144])"
)


@dataclass(frozen=True)
class Point:
    """One published all-reduce kernel time."""

    tp: int
    nbytes: int
    stage: Stage
    seconds: float
    source: str


POINTS = (
    Point(2, MB // 2, "one-shot", 7e-6, PR_24111),
    Point(6, MB // 2, "one-shot", 13e-6, PR_24111),
    Point(6, MB // 2, "two-shot", 15e-6, PR_24111),
    Point(4, MB // 2, "one-shot", 10e-6, PR_24532),
    Point(4, MB // 2, "two-shot", 17e-6, PR_24532),
    Point(4, 2 * MB, "one-shot", 23e-6, PR_24532),
    Point(2, 6 * 6144 * 2, "one-shot", 6.9826e-6, FLAGGEMS_773),  # M = 6
    Point(2, 138 * 6144 * 2, "one-shot", 12.9792e-6, FLAGGEMS_773),  # M = 138
)


@dataclass(frozen=True)
class CustomArPhysics:
    """The custom all-reduce's terms: each kernel's fixed latency (launch, the barrier through
    peer flags) and the NVLink bandwidth one rank reads its peers' buffers at (bytes/s)."""

    latency_1_s: float
    latency_2_s: float
    link_bw: float

    def one_shot(self, nbytes: np.ndarray, tp: int) -> np.ndarray:
        """Each rank reads all tp - 1 peers' whole buffers: linear in size and in peers."""
        return self.latency_1_s + (tp - 1) * np.asarray(nbytes, np.float64) / self.link_bw

    def two_shot(self, nbytes: np.ndarray, tp: int) -> np.ndarray:
        """Reduce-scatter then all-gather: each rank moves 2 (tp - 1) / tp of the buffer."""
        traffic = 2.0 * (tp - 1) / tp * np.asarray(nbytes, np.float64)
        return self.latency_2_s + traffic / self.link_bw

    def stage_time(self, stage: Stage, nbytes: np.ndarray, tp: int) -> np.ndarray:
        return self.one_shot(nbytes, tp) if stage == "one-shot" else self.two_shot(nbytes, tp)

    def chosen(self, nbytes: np.ndarray, tp: int) -> np.ndarray:
        """The kernel the engine's switch rule picks, ignoring the buffer cap."""
        size = np.asarray(nbytes, np.float64)
        return np.where(one_shot(size, tp), self.one_shot(size, tp), self.two_shot(size, tp))


def one_shot(nbytes: np.ndarray, tp: int) -> np.ndarray:
    """Whether the kernel runs one-shot (vLLM's switch rule, `ONE_SHOT_BELOW`)."""
    size = np.asarray(nbytes, np.float64)
    if tp == 2:
        return np.ones(size.shape, bool)
    out = np.zeros(size.shape, bool)
    for max_tp, limit in ONE_SHOT_BELOW:
        if tp <= max_tp:
            out |= size < limit
    return out


def uses_custom(nbytes: np.ndarray, tp: int) -> np.ndarray:
    """Whether the engine runs its custom kernel rather than NCCL (supported size and world)."""
    size = np.asarray(nbytes, np.float64)
    return np.full(size.shape, tp in SUPPORTED_WORLD_SIZES) & (size < MAX_BYTES)


@cache
def fit_physics() -> CustomArPhysics:
    """Non-negative least squares on relative error over `POINTS` (deterministic)."""
    secs = np.array([p.seconds for p in POINTS])
    rows = []
    for p in POINTS:
        peers = (p.tp - 1) if p.stage == "one-shot" else 2.0 * (p.tp - 1) / p.tp
        rows.append([p.stage == "one-shot", p.stage == "two-shot", peers * p.nbytes])
    design = np.array(rows, np.float64) / secs[:, None]
    (lat1, lat2, inv_bw), _ = nnls(design, np.ones_like(secs))
    return CustomArPhysics(float(lat1), float(lat2), 1.0 / max(float(inv_bw), 1e-30))


def point_errors(physics: CustomArPhysics) -> np.ndarray:
    """Relative error (model / published - 1) of each point in `POINTS`."""
    return np.array(
        [float(physics.stage_time(p.stage, p.nbytes, p.tp)) / p.seconds - 1.0 for p in POINTS]
    )


class CustomAllReduce:
    """All-reduce as an engine calls it: the custom kernel where the engine uses it, else the
    NCCL line it wraps. Duck-types `gpu_model.AllReduce` (`time`, `fits`, `gpu`)."""

    def __init__(self, physics: CustomArPhysics, nccl: AllReduce) -> None:
        self.physics = physics
        self.nccl = nccl
        self.fits = nccl.fits  # the NCCL GPU counts: what callers check a --tp against
        self.gpu = nccl.gpu

    def time(self, size_bytes: np.ndarray, workers: int) -> np.ndarray:
        size = np.asarray(size_bytes, np.float64)
        if workers == 1:
            return np.zeros_like(size)
        custom = uses_custom(size, workers)
        physics = self._at(workers)
        if custom.all():
            return physics.chosen(size, workers)
        return np.where(custom, physics.chosen(size, workers), self.nccl.time(size, workers))

    def _at(self, workers: int) -> CustomArPhysics:
        """The kernel's terms on this GPU: a borrowed table's link ratio scales its bandwidth."""
        ratio = self.nccl.scale.get(workers, 1.0)
        return (
            self.physics
            if ratio == 1.0
            else replace(self.physics, link_bw=self.physics.link_bw * ratio)
        )

    def record(self) -> dict:
        """What a profile sidecar keeps: the rule, the fit, its errors, and how the custom
        kernel (cap lifted) compares with the NCCL line at and above the cap."""
        errors = point_errors(self.physics)
        check = {}
        for tp in sorted(set(self.fits) & set(SUPPORTED_WORLD_SIZES)):
            for size in (MAX_BYTES, 64 * MB):
                custom = float(self._at(tp).chosen(size, tp))
                nccl = float(self.nccl.time(size, tp))
                check[f"tp{tp}_{size // MB}MiB"] = {
                    "custom_s": custom,
                    "nccl_s": nccl,
                    "custom_over_nccl": custom / nccl,
                }
        return {
            "gpu": self.gpu,
            "rule": {
                "supported_world_sizes": list(SUPPORTED_WORLD_SIZES),
                "custom_below_bytes": MAX_BYTES,
                "one_shot": "world size 2, or <= 4 GPUs below 512 KiB, or <= 8 GPUs below 256 KiB",
                "otherwise": "NCCL (Vidur all-reduce table)",
                "source": RULE_SOURCE,
            },
            "fit": {
                "latency_1_s": self.physics.latency_1_s,
                "latency_2_s": self.physics.latency_2_s,
                "link_bw_bytes_per_s": self.physics.link_bw,
                "method": "nnls on relative error over the published points",
                "borrowed_from": "h100" if self.gpu != "h100" or self.nccl.scale else None,
                "link_bandwidth_ratio_by_gpus": {str(k): v for k, v in self.nccl.scale.items()},
            },
            "points": [
                {
                    "tp": p.tp,
                    "bytes": p.nbytes,
                    "stage": p.stage,
                    "published_s": p.seconds,
                    "model_s": p.seconds * (1.0 + float(e)),
                    "relative_error": float(e),
                    "source": p.source,
                }
                for p, e in zip(POINTS, errors, strict=True)
            ],
            "nccl_check": check,
        }


def custom_allreduce_table(calibration: str) -> CustomAllReduce:
    """The engine all-reduce of one GPU calibration (h100, which H200 uses, or a100)."""
    if calibration not in NVLINK_CALIBRATIONS:
        raise InputError(
            None,
            None,
            f"no custom all-reduce for {calibration!r}: known NVLink calibrations are "
            f"{', '.join(NVLINK_CALIBRATIONS)}",
        )
    return CustomAllReduce(fit_physics(), allreduce_table(calibration))


def for_engine(nccl: AllReduce, custom: bool) -> AllReduce | CustomAllReduce:
    """The all-reduce an engine calls: its custom kernel below the cap where it runs one
    (every modern engine on NVLink), else the NCCL line."""
    return CustomAllReduce(fit_physics(), nccl) if custom else nccl

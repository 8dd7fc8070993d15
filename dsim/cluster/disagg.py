"""Prefill/decode disaggregation: `--disagg P:D` and the KV link between the two pools.

A prefill replica runs prompts only; when a prompt's last chunk completes it emits the first
token (the project's convention: the prefill step emits it, so TTFT ends there) and hands the
request on. At that instant the router picks a decode replica, the prompt's KV crosses the
link (prompt tokens x bytes per token at the link's bandwidth) and the request joins that
replica's queue when its KV has arrived.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from dsim.cluster.router import Router
from dsim.engine.clock import delay_to
from dsim.engine.replica import Replica
from dsim.errors import InputError
from dsim.hardware import arch
from dsim.hardware.dtypes import element_bytes


def check_positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise InputError(None, None, f"--{name} must be a finite number > 0, got {value!r}")
    return float(value)


MAX_KV_BYTES_PER_TOKEN = 2**30  # a GiB per token and GPU: beyond any model's KV cache
MAX_SECONDS_PER_TOKEN = 1.0  # a KV link this slow makes every time in the run meaningless
# model_config fields of a profile sidecar, with the largest value each may take
KV_FIELDS = {"num_hidden_layers": 4096, "num_key_value_heads": 4096, "head_dim": 65536}


def kv_bytes_per_token(profile: str | Path, sidecar: dict[str, Any], given: float | None) -> float:
    """KV-cache bytes per token that one GPU of the replica holds (and sends over its own link,
    the GPUs of a tensor-parallel replica moving their shards side by side): `given`, else the
    profile sidecar's `kv_bytes_per_token_per_gpu` or `kv_bytes_per_token`, else the estimate's
    rule (`arch.kv_bytes_per_token`: K and V x layers x KV heads x head dim x the bytes of the
    sidecar's `dtype`) on its `model_config`. A sidecar field that is not a number in range is
    blamed on the sidecar file, by name."""
    if given is not None:
        return _kv_size("--kv-bytes-per-token", given, None)
    side = Path(profile).with_suffix(".json")
    for key in ("kv_bytes_per_token_per_gpu", "kv_bytes_per_token"):
        if key in sidecar:
            return _kv_size(key, sidecar[key], side)
    cfg = sidecar.get("model_config", {})  # an object: `profile_metadata` checks it
    elem_bytes = element_bytes(sidecar.get("dtype"))
    if all(k in cfg for k in KV_FIELDS) and elem_bytes is not None:
        layers, heads, dim = (_whole(side, k, cfg[k], top) for k, top in KV_FIELDS.items())
        size = arch.kv_bytes_per_token(
            arch.Arch.kv_cache(str(side), layers, heads, dim), 1, elem_bytes
        )
        return _kv_size("model_config: the KV bytes per token it gives", size, side)
    raise InputError(
        profile,
        None,
        "no KV size in the profile's sidecar (model_config): give --kv-bytes-per-token",
    )


def _whole(side: Path, key: str, value: Any, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        problem = f"model_config.{key}: must be a whole number in 1..{top}, got {value!r}"
        raise InputError(side, None, problem)
    return value


def _kv_size(name: str, value: Any, side: Path | None) -> float:
    """KV bytes per token: a finite number in (0, MAX_KV_BYTES_PER_TOKEN]."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and 0 < value <= MAX_KV_BYTES_PER_TOKEN):
        raise InputError(
            side,
            None,
            f"{name} must be a finite number > 0 and <= {MAX_KV_BYTES_PER_TOKEN}, got {value!r}",
        )
    return float(value)


def seconds_per_token(bytes_per_token: float, gbps: float) -> float:
    """Seconds the link takes per token of KV: finite and at most MAX_SECONDS_PER_TOKEN."""
    seconds = bytes_per_token * 8 / (gbps * 1e9)
    if not (math.isfinite(seconds) and seconds <= MAX_SECONDS_PER_TOKEN):
        raise InputError(
            None,
            None,
            f"--kv-link-gbps {gbps:g} with {bytes_per_token:g} KV bytes per token moves a token "
            f"in {seconds:.3g} s, more than {MAX_SECONDS_PER_TOKEN:g} s: raise the bandwidth",
        )
    return seconds


class KvLink:
    """Moves prefilled requests to decode replicas (see the module doc)."""

    def __init__(
        self,
        env: simpy.Environment,
        decode: Sequence[Replica],
        router: Router,
        prompt_tokens: np.ndarray,
        bytes_per_token: float,
        gbps: float,
    ) -> None:
        self.env, self.decode, self.router = env, decode, router
        self.prompt_tokens = prompt_tokens
        self.seconds_per_token = seconds_per_token(
            bytes_per_token, check_positive("kv-link-gbps", gbps)
        )

    def transfer_s(self, i: int) -> float:
        return float(self.prompt_tokens[i]) * self.seconds_per_token

    def handoff(self, i: int, at: float) -> None:
        """Request i's prefill ended at `at` (a prefill replica's clock, >= env.now)."""
        self.env.timeout(delay_to(self.env.now, at)).callbacks.append(lambda _: self._send(i))

    def _send(self, i: int) -> None:
        replica = self.decode[self.router.pick(self.decode)]
        replica.expect(i)
        done = self.env.timeout(self.transfer_s(i))
        done.callbacks.append(lambda _: replica.arrive(i, kv_ready=True))

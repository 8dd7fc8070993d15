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

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "float8": 1}


def check_positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise InputError(None, None, f"--{name} must be a finite number > 0, got {value!r}")
    return float(value)


def kv_bytes_per_token(profile: str | Path, sidecar: dict[str, Any], given: float | None) -> float:
    """KV-cache bytes per token that one GPU of the replica holds (and sends over its own link,
    the GPUs of a tensor-parallel replica moving their shards side by side): `given`, else the
    profile sidecar's `kv_bytes_per_token_per_gpu` or `kv_bytes_per_token`, else 2 (K and V) x
    layers x KV heads x head dim x dtype bytes from its `model_config`."""
    if given is not None:
        return check_positive("kv-bytes-per-token", given)
    for key in ("kv_bytes_per_token_per_gpu", "kv_bytes_per_token"):
        if key in sidecar:
            return check_positive("kv-bytes-per-token", sidecar[key])
    cfg = sidecar.get("model_config", {})
    keys = ("num_hidden_layers", "num_key_value_heads", "head_dim")
    if all(k in cfg for k in keys) and sidecar.get("dtype") in DTYPE_BYTES:
        layers, heads, dim = (int(cfg[k]) for k in keys)
        return float(2 * layers * heads * dim * DTYPE_BYTES[sidecar["dtype"]])
    raise InputError(
        profile,
        None,
        "no KV size in the profile's sidecar (model_config): give --kv-bytes-per-token",
    )


def link_seconds_per_token(bytes_per_token: float, gbps: float) -> float:
    """Seconds the link takes to move one token's KV (a request's transfer: its prompt tokens
    times this; the link carries each transfer at full bandwidth)."""
    return bytes_per_token * 8 / (check_positive("kv-link-gbps", gbps) * 1e9)


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
        self.seconds_per_token = link_seconds_per_token(bytes_per_token, gbps)

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

"""Several decode rounds in one pass, while nothing can change the batch between them.

Most of a run's steps come in stretches of decode-only rounds over the same rows
(`benchmarks/burst_stretches.py`); round by round, the engine repeats the same numpy calls on
the same few rows. A burst draws k rounds of acceptance at once (`draw_rounds`), asks a row-wise
policy for all their lengths and counts their tokens and KV blocks in one set of calls, then
walks the rounds in order, pricing each at its own context exactly as `Replica.step` does, and
keeps the leading rounds that

1. grow the KV cache without running out of blocks (a round that would preempt is left to the
   round-by-round step),
2. end before the next event of any other process (an arrival, a KV transfer, another
   replica's step), so no process can see the replica between two of them, and
3. come no later than the first round in which a request reaches its output cap (the batch
   changes after it).

The engine tries a burst only where its rows cannot change before that: no prefill work, a
queue that cannot be admitted (admission only gets harder while the rows stay and their KV
grows), a row-wise policy without `observe` (`dsim.policies`), a backend that draws several
rounds at once (a memoryless simulated source) and the profile's clock. Each kept round is the
round the round-by-round engine would run on the same draws: the same lengths, step latency,
KV growth and step-log row. Only the random stream is used in another order (k rounds'
normals, then their uniforms) and the draws of rounds past the kept ones are dropped, so
results change draw by draw, not in distribution (`benchmarks/check_bursts.py`).
`--rounds-per-pass 1` turns bursts off.

Glossary: k rounds drawn, m kept, R rows (the running requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dsim.engine.replica import Replica


@dataclass
class Burst:
    """The m kept rounds of a burst, as the engine commits and logs them."""

    lengths: np.ndarray  # (m, R) verify lengths
    emitted: np.ndarray  # (m, R) tokens emitted (accepted drafts + 1), before the output cap
    log: list[tuple]  # m step-log rows (`StepRecorder.add`'s arguments)
    blocks: np.ndarray  # (R,) each row's KV blocks in the last round
    kv_used: int  # the replica's KV blocks in use in the last round
    end: float  # when the last round ends

    @property
    def rounds(self) -> int:
        return len(self.log)


def plan(rep: Replica, t: float, until: float, k: int) -> Burst | None:
    """Up to k rounds of `rep`'s batch from time t, cut as the module doc says (None: none
    kept). Reads the replica's state and draws from its random stream; changes nothing else."""
    r, gamma = rep.running, rep.cfg.gamma
    conf, truth = rep.backend.draw_rounds(rep.ids, rep.rng, k)  # (k, R, gamma), (k, R)
    lengths = rep.policy.lengths(conf.reshape(k * r, gamma), None, truth.reshape(-1))
    lengths = lengths.reshape(k, r)
    emitted, _ = rep.backend.verify(rep.ids, lengths, truth)  # (k, R)
    after = emitted.cumsum(axis=0)  # (k, R) tokens emitted by the end of each round
    before = after - emitted
    need = rep.kv_end - rep.left + before  # (k, R) blocks as `_reserve_decode_blocks` counts
    need = need >> rep.block_shift if rep.block_shift is not None else need // rep.cfg.block_size
    outside = rep.used_blocks - rep.batch_blocks  # KV blocks held by requests not in the batch
    need_total = need.sum(axis=1).tolist()
    grown = before.sum(axis=1).tolist()  # context the batch gained before each round
    verify_tokens = (lengths.sum(axis=1) + r).tolist()
    capped = (after >= rep.left).any(axis=1).tolist()
    log: list[tuple] = []
    for j in range(k):
        kv_used = outside + need_total[j]
        if kv_used > rep.kv_blocks:
            break
        ctx = (rep.batch_ctx + grown[j]) / r  # as `Replica.step` prices a round
        price = rep.latency.priced(r, ctx, 0, 0, 0.0, rep.cfg.fused_prefill)
        step_s = rep.before_verify_s(r, ctx, price) + price(verify_tokens[j])
        end = t + step_s
        if not 0 < step_s < math.inf or end >= until:
            break
        log.append((t, step_s, r, verify_tokens[j], 0, kv_used))
        t = end
        if capped[j]:
            break
    m = len(log)
    if m == 0:
        return None
    return Burst(lengths[:m], emitted[:m], log, need[m - 1], log[-1][5], t)

"""One serving replica as a simpy process: continuous batching with speculative decoding.

Each step the replica (1) admits queued requests FCFS under --max-seqs and the paged KV budget,
(2) makes room in the KV cache for this round's verify tokens, preempting the most recently
admitted request by recompute if it must, (3) asks the backend for the running requests'
confidences, the policy for their verify lengths (a synchronous policy adds its scheduling cost
to the step) and the backend again for the accepted drafts (told back to the policy's `observe`),
(4) adds a chunk of prefill work, and (5) waits one step latency before committing the tokens:
the hardware profile's latency for the step's verify and prefill work plus the drafter's passes
(clock "profile", `LatencyModel.step`, `DraftCost`), or the measured wall
time of the step's real work (clock "wall", for real-model backends).

The running batch lives in one int64 matrix (a row per request, a column per counter), so a
round is a few in-place numpy operations over the batch, whatever its size; rows leave the
matrix, and their counters go back to the per-request arrays, only when a request finishes or
is preempted.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from dsim.engine.backend import Backend
from dsim.engine.config import DraftCost, EngineConfig
from dsim.errors import InputError, SimulationStuck
from dsim.hardware.latency import LatencyModel
from dsim.workload import Workload

# Columns of the running-batch matrix.
ID, CTX, LEFT, BLOCKS, ORDER, ROUNDS, VERIFIED, ACCEPTED = range(8)
COUNTERS = (ROUNDS, VERIFIED, ACCEPTED)
MAX_STALLED_STEPS = 1000  # consecutive zero-length steps before the engine reports it is stuck


@dataclass
class StepLog:
    """Per-step engine state, for invariants and load plots."""

    start_s: np.ndarray
    latency_s: np.ndarray
    num_running: np.ndarray
    batch_tokens: np.ndarray
    prefill_tokens: np.ndarray
    kv_blocks_used: np.ndarray


class Replica:
    """Queues and per-request records as arrays; the decode batch as a matrix (see module doc)."""

    def __init__(
        self,
        workload: Workload,
        latency: LatencyModel,
        draft_cost: DraftCost,
        backend: Backend,
        policy,
        cfg: EngineConfig,
        rng: np.random.Generator,
        clock: str = "profile",
    ) -> None:
        n = len(workload)
        self.w, self.latency, self.draft_cost = workload, latency, draft_cost
        self.backend, self.policy, self.cfg, self.rng = backend, policy, cfg, rng
        self.wall_clock = clock == "wall"
        self.lookahead = 1 + (cfg.gamma if policy.drafts else 0)
        self.synchronous = getattr(policy, "synchronous", False) and not self.wall_clock
        self.generated = np.zeros(n, np.int64)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.counters = np.zeros((n, len(COUNTERS)), np.int64)
        self.preemptions = np.zeros(n, np.int64)
        self.waiting: deque[int] = deque()
        self.prefilling: list[list[int]] = []  # [request, tokens left, blocks, order]
        self.batch = np.zeros((0, 8), np.int64)
        self.next_arrival = 0
        self.admissions = 0
        self.used_blocks = 0
        self.finished = 0
        self.log: list[tuple[float, float, int, int, int, int]] = []
        self._check_fits()

    def _check_fits(self) -> None:
        need = self.w.prompt_tokens + self.w.output_tokens + self.lookahead
        too_big = np.flatnonzero(need > self.cfg.kv_tokens)
        if len(too_big):
            i = int(too_big[0])
            raise InputError(
                self.w.source,
                i + 1,
                f"request needs {int(need[i])} KV tokens, "
                f"more than --kv-tokens {self.cfg.kv_tokens}",
            )

    def _blocks_for(self, tokens):
        return -(-tokens // self.cfg.block_size)

    # -- admission, KV growth, preemption -------------------------------------------------
    def _admit(self, now: float) -> None:
        arrival = self.w.arrival_s
        if self.next_arrival < len(arrival) and arrival[self.next_arrival] <= now:
            arrived = int(np.searchsorted(arrival, now, side="right"))
            self.waiting.extend(range(self.next_arrival, arrived))
            self.next_arrival = arrived
        while self.waiting and len(self.batch) + len(self.prefilling) < self.cfg.max_seqs:
            i = self.waiting[0]
            context = int(self.w.prompt_tokens[i] + self.generated[i])
            need = self._blocks_for(context + 1)
            if self.used_blocks + need > self.cfg.kv_blocks:
                break
            self.waiting.popleft()
            self.used_blocks += need
            self.prefilling.append([i, context, need, self.admissions])
            self.admissions += 1

    def _reserve_decode_blocks(self) -> None:
        """Grow the batch's KV to hold this round's verify tokens; preempt if it cannot."""
        while len(self.batch):
            b = self.batch
            need = self._blocks_for(b[:, CTX] + self.lookahead)
            grow = int(need.sum() - b[:, BLOCKS].sum())
            if self.used_blocks + grow <= self.cfg.kv_blocks:
                b[:, BLOCKS] = need
                self.used_blocks += grow
                return
            victim = int(np.argmax(b[:, ORDER]))
            i = int(b[victim, ID])
            self.preemptions[i] += 1
            self.waiting.appendleft(i)
            self._leave(np.arange(len(b)) == victim)

    def _leave(self, rows: np.ndarray) -> None:
        """Rows (a boolean mask) leave the batch: free their KV, save their counters."""
        b = self.batch
        ids = b[rows, ID]
        self.counters[ids] = b[rows][:, COUNTERS]
        self.generated[ids] = b[rows, CTX] - self.w.prompt_tokens[ids]
        self.used_blocks -= int(b[rows, BLOCKS].sum())
        self.batch = b[~rows]
        self.backend.released(ids)

    # -- one step -----------------------------------------------------------------------------
    def _prefill_chunks(self) -> list[int]:
        budget, takes = self.cfg.prefill_chunk, []
        for entry in self.prefilling:
            take = min(entry[1], budget)
            if take == 0:
                break
            takes.append(take)
            budget -= take
        return takes

    def step(self, now: float) -> tuple[float, Callable[[float], None]] | None:
        """Plan one step at time `now`: its latency and the commit to run when it ends."""
        started = time.perf_counter()
        self._admit(now)
        self._reserve_decode_blocks()
        b = self.batch
        takes = self._prefill_chunks()
        r, p = len(b), sum(takes)
        if r == 0 and p == 0:
            return None
        prefill = self.prefilling[: len(takes)]
        # Verify context: the running requests' mean KV; prefill: each chunk's end context.
        ctx = float(b[:, CTX].mean()) if r else 0.0
        p_ctx = sum(
            int(self.w.prompt_tokens[e[0]] + self.generated[e[0]]) - e[1] + t
            for e, t in zip(prefill, takes, strict=True)
        ) / max(len(takes), 1)
        prefill_work = (p, len(takes), p_ctx)
        draft_s, lengths, acc, stop, verify_tokens = 0.0, None, None, None, 0
        if r:
            ids = b[:, ID]
            conf, truth = self.backend.draw(ids, self.rng)
            if self.policy.drafts:
                draft_s = self.draft_cost.seconds(r, self.cfg.gamma, ctx, self.latency)
            if self.synchronous:  # the verify pass waits for the host's schedule
                draft_s += self.cfg.sched.seconds(r)
            lengths = self.policy.lengths(
                conf,
                lambda x: 1.0 / (draft_s + self.latency.step(x, r, ctx, *prefill_work)),
                truth,
            )
            acc, stop = self.backend.verify(ids, lengths, truth)
            if hasattr(self.policy, "observe"):
                self.policy.observe(lengths, acc)
            verify_tokens = r + int(lengths.sum())
        completing = [e for e, t in zip(prefill, takes, strict=True) if e[1] == t]
        first_stop = (
            self.backend.prefilled(np.array([e[0] for e in completing], np.int64))
            if completing
            else None
        )
        if self.wall_clock:
            step_s = time.perf_counter() - started
        else:
            step_s = draft_s + self.latency.step(verify_tokens, r, ctx, *prefill_work)
        self.log.append((now, step_s, r, verify_tokens + p, p, self.used_blocks))

        def commit(end: float) -> None:
            if r:
                self._commit_decode(lengths, acc, stop, end)
            self._commit_prefill(takes, completing, first_stop, end)

        return step_s, commit

    def _commit_decode(
        self, lengths: np.ndarray, acc: np.ndarray, stop: np.ndarray | None, end: float
    ) -> None:
        b = self.batch
        emit = np.minimum(acc + 1, b[:, LEFT])
        if stop is not None:  # an end-of-sequence token ends the request with this round
            b[stop, LEFT] = emit[stop]
        b[:, CTX] += emit
        b[:, LEFT] -= emit
        b[:, ROUNDS] += 1
        b[:, VERIFIED] += lengths
        b[:, ACCEPTED] += acc
        done = b[:, LEFT] == 0
        if done.any():
            self.finish[b[done, ID]] = end
            self.finished += int(done.sum())
            self._leave(done)

    def _commit_prefill(
        self, takes: list[int], completing: list[list[int]], stop: np.ndarray | None, end: float
    ) -> None:
        for entry, take in zip(self.prefilling, takes, strict=False):  # takes: a prefix
            entry[1] -= take
        if not completing:
            return
        self.prefilling = [e for e in self.prefilling if e[1] > 0]
        for k, (i, _, blocks, order) in enumerate(
            completing
        ):  # prefill emits a token (docs/design.md, The replica step)
            self.generated[i] += 1
            if np.isnan(self.first_token[i]):
                self.first_token[i] = end
            left = int(self.w.output_tokens[i] - self.generated[i])
            if left == 0 or (stop is not None and stop[k]):
                self.finish[i] = end
                self.finished += 1
                self.used_blocks -= blocks
                self.backend.released(np.array([i]))
                continue
            row = [i, int(self.w.prompt_tokens[i] + self.generated[i]), left, blocks, order]
            self.batch = np.vstack([self.batch, [*row, *self.counters[i]]])

    def process(self, env: simpy.Environment, progress: Callable[[int], None] | None):
        """The simpy process: step until every request has finished."""
        n, stalled = len(self.w), 0
        while self.finished < n:
            planned = self.step(env.now)
            if planned is None:  # idle: sleep until the next arrival
                if self.next_arrival >= n:
                    raise SimulationStuck(f"idle at t={env.now:g} s with {self._state()}")
                yield env.timeout(self.w.arrival_s[self.next_arrival] - env.now)
                continue
            step_s, commit = planned
            stalled = stalled + 1 if not step_s > 0 else 0  # NaN counts as no progress
            if stalled > MAX_STALLED_STEPS or not np.isfinite(step_s) or step_s < 0:
                raise SimulationStuck(
                    f"step of {step_s!r} s at t={env.now:g} s with {self._state()}"
                )
            yield env.timeout(step_s)
            commit(env.now)
            if progress is not None and len(self.log) % 2000 == 0:
                progress(self.finished)

    def _state(self) -> str:
        return (
            f"{self.finished}/{len(self.w)} finished, {len(self.waiting)} waiting, "
            f"{len(self.prefilling)} prefilling, {len(self.batch)} decoding, "
            f"{self.used_blocks}/{self.cfg.kv_blocks} KV blocks"
        )

    def step_log(self) -> StepLog:
        cols = np.array(self.log, dtype=np.float64).reshape(-1, 6).T
        return StepLog(cols[0], cols[1], *(c.astype(np.int64) for c in cols[2:]))

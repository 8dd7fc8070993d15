"""One serving replica as a simpy process: continuous batching with speculative decoding.

Each step the replica (1) admits queued requests FCFS under --max-seqs and the paged KV budget,
(2) makes room in the KV cache for this round's verify tokens, preempting the most recently
admitted request by recompute if it must, (3) asks the backend for the running requests'
confidences, the policy for their verify lengths and the backend again for the accepted drafts,
(4) adds a chunk of prefill work, and (5) takes one step latency before committing the tokens:
the hardware profile's latency for the step's batch (clock "profile"), or the measured wall
time of the step's real work (clock "wall", for real-model backends).

The running batch lives in the first rows of one preallocated int64 matrix (a row per request,
a column per counter), so a round is a few in-place numpy operations over the batch, whatever
its size; rows leave the matrix, and their counters go back to the per-request arrays, only
when a request finishes or is preempted. The replica keeps its own clock and hands control to
simpy only when another process has an event due first (see `process`), so a run is not one
simpy event per step.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

from dsim.engine.backend import Backend
from dsim.engine.config import DraftCost, EngineConfig
from dsim.engine.steplog import StepLog, StepRecorder
from dsim.errors import InputError
from dsim.hardware.latency import LatencyModel
from dsim.workload import Workload

# Columns of the running-batch matrix. Every row takes part in every round, so ROUNDS holds a
# request's rounds minus the replica's (`Replica.rounds`) and a round need not touch it.
ID, CTX, LEFT, BLOCKS, ORDER, ROUNDS, VERIFIED, ACCEPTED = range(8)
COUNTERS = (ROUNDS, VERIFIED, ACCEPTED)
SHORT = 100  # below this many rows, summing a Python list beats a numpy reduction's overhead
PROGRESS_EVERY = 2000  # steps between progress reports


def total(x: np.ndarray) -> int:
    """Sum of a short int array, fast for the engine's typical batches."""
    return sum(x.tolist()) if len(x) < SHORT else int(x.sum())


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
        self.drafts = policy.drafts
        self.lookahead = 1 + (cfg.gamma if self.drafts else 0)
        self.generated = np.zeros(n, np.int64)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.counters = np.zeros((n, len(COUNTERS)), np.int64)
        self.preemptions = np.zeros(n, np.int64)
        self.waiting: deque[int] = deque()
        self.prefilling: list[list[int]] = []  # [request, tokens left, blocks, order]
        self.rows = np.zeros((cfg.max_seqs, 8), np.int64)
        self.running = 0
        self.rounds = 0  # decode rounds run so far
        self.batch = self.rows[:0]  # rows[:running], renewed whenever `running` changes
        self.next_arrival = 0
        self.admissions = 0
        self.used_blocks = 0
        self.finished = 0
        self.steps = StepRecorder()
        self._plan: tuple = ()  # what the step in flight commits when it ends
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
        while self.waiting and self.running + len(self.prefilling) < self.cfg.max_seqs:
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
        pad = self.lookahead + self.cfg.block_size - 1
        while self.running:
            b = self.batch
            # _blocks_for(ctx + lookahead) in two operations; blocks never shrink: need >= held
            need = (b[:, CTX] + pad) // self.cfg.block_size
            grow = total(need - b[:, BLOCKS])
            if grow == 0:
                return
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
        self.counters[ids, COUNTERS.index(ROUNDS)] += self.rounds
        self.generated[ids] = b[rows, CTX] - self.w.prompt_tokens[ids]
        self.used_blocks -= int(b[rows, BLOCKS].sum())
        stay = b[~rows]
        self.running = len(stay)
        self.rows[: self.running] = stay
        self.batch = self.rows[: self.running]
        self.backend.released(ids)

    def _join(self, i: int, blocks: int, order: int) -> None:
        """Request i, prefilled, joins the batch with its saved counters."""
        row = self.rows[self.running]
        row[:ROUNDS] = (
            i,
            self.w.prompt_tokens[i] + self.generated[i],
            self._left(i),
            blocks,
            order,
        )
        row[ROUNDS:] = self.counters[i]
        row[ROUNDS] -= self.rounds
        self.running += 1
        self.batch = self.rows[: self.running]

    def _left(self, i: int) -> int:
        return int(self.w.output_tokens[i] - self.generated[i])

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

    def _prefill_context(self, takes: list[int]) -> int:
        """KV tokens the step's prefill chunks attend over (done so far plus this chunk)."""
        return sum(
            int(self.w.prompt_tokens[e[0]] + self.generated[e[0]]) - e[1] + t
            for e, t in zip(self.prefilling, takes, strict=False)  # takes: a prefix
        )

    def _sps(self, draft_s: float, prefill: int, ctx: float) -> Callable[[np.ndarray], np.ndarray]:
        """Steps per second of a round verifying B tokens, drafter and prefill included."""
        return lambda x: 1.0 / (draft_s + self.latency.latency(x + prefill, ctx))

    def step(self, now: float) -> float | None:
        """Plan one step at time `now`: its latency (None when idle); `commit` ends it."""
        started = time.perf_counter() if self.wall_clock else 0.0
        self._admit(now)
        self._reserve_decode_blocks()
        b = self.batch
        takes = self._prefill_chunks() if self.prefilling else []
        r, p = len(b), sum(takes)
        if r == 0 and p == 0:
            return None
        kv = total(b[:, CTX]) + (self._prefill_context(takes) if takes else 0)
        ctx = kv / (r + len(takes))
        draft_s, decode = 0.0, None
        batch_tokens = p
        if r:
            ids = b[:, ID]
            conf, truth = self.backend.draw(ids, self.rng)
            if self.drafts:
                draft_s = self.draft_cost.seconds(r, ctx, self.latency)
            lengths = self.policy.lengths(conf, self._sps(draft_s, p, ctx), truth)
            acc, stop = self.backend.verify(ids, lengths, truth)
            batch_tokens += r + total(lengths)
            decode = (lengths, acc, stop)
        completing = [e for e, t in zip(self.prefilling, takes, strict=False) if e[1] == t]
        first_stop = None
        if completing:
            first_stop = self.backend.prefilled(np.array([e[0] for e in completing], np.int64))
        if self.wall_clock:
            step_s = time.perf_counter() - started
        else:
            step_s = draft_s + self.latency.latency(batch_tokens, ctx)
        self.steps.add(now, step_s, r, batch_tokens, p, self.used_blocks)
        self._plan = (decode, takes, completing, first_stop)
        return step_s

    def commit(self, end: float) -> None:
        """End the planned step at time `end`: emit its tokens, finish and move requests."""
        decode, takes, completing, first_stop = self._plan
        if decode is not None:
            self._commit_decode(*decode, end)
        if takes:
            self._commit_prefill(takes, completing, first_stop, end)

    def _commit_decode(
        self, lengths: np.ndarray, acc: np.ndarray, stop: np.ndarray | None, end: float
    ) -> None:
        b = self.batch
        left = b[:, LEFT]
        emit = np.minimum(acc + 1, left)
        if stop is not None:  # an end-of-sequence token ends the request with this round
            left[stop] = emit[stop]
        b[:, CTX] += emit
        left -= emit
        b[:, VERIFIED] += lengths
        b[:, ACCEPTED] += acc
        self.rounds += 1
        if np.count_nonzero(left) < len(left):
            done = left == 0
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
        for k, (i, _, blocks, order) in enumerate(completing):  # prefill emits a token
            self.generated[i] += 1
            if np.isnan(self.first_token[i]):
                self.first_token[i] = end
            if self._left(i) == 0 or (stop is not None and stop[k]):
                self.finish[i] = end
                self.finished += 1
                self.used_blocks -= blocks
                self.backend.released(np.array([i]))
            else:
                self._join(i, blocks, order)

    # -- the clock --------------------------------------------------------------------------
    def process(self, env: simpy.Environment, progress: Callable[[int], None] | None):
        """The simpy process: step until every request has finished.

        Steps follow each other on the replica's own clock `t`, which advances exactly as
        simpy's would (now + delay), so results do not depend on how often it yields. Before
        moving `t` past another process's next event it yields until then, so that process
        sees this replica as a per-step timeout would show it (a step planned, not yet
        committed); alone, it yields once, at the end, so that env.now reaches the last step's end.
        """
        n, arrival = len(self.w), self.w.arrival_s
        t = env.now
        while self.finished < n:
            step_s = self.step(t)
            idle = step_s is None  # then sleep until the next arrival
            end = t + (arrival[self.next_arrival] - t) if idle else t + step_s
            if env.peek() < end:
                yield env.timeout(max(0.0, end - env.now))
            t = end
            if idle:
                continue
            self.commit(t)
            if progress is not None and self.steps.count % PROGRESS_EVERY == 0:
                progress(self.finished)
        yield env.timeout(max(0.0, t - env.now))

    def step_log(self) -> StepLog:
        return self.steps.log()

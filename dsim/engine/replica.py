"""One serving replica as a simpy process: continuous batching with speculative decoding.

Each step the replica (1) admits queued requests FCFS under --max-seqs and the paged KV budget,
(2) makes room in the KV cache for this round's verify tokens, preempting the most recently
admitted request by recompute if it must (an engine that reserves a request's whole KV at
admission, TensorRT-LLM's rule, needs neither: its rows never grow), (3) asks the backend for
the running requests' confidences, the policy for their verify lengths (a synchronous policy
adds its scheduling cost to the step) and the backend again for the accepted drafts (told back
to the policy's `observe`; plain decoding, a policy that does not draft, asks the backend for
its one token a request instead, `Backend.plain`), (4) adds a chunk of prefill work (an engine
that schedules prefill first runs it in a step of its own, with no decode round), and (5) takes
one step latency before committing the tokens, as its clock says (`dsim.engine.clock`: the
profile's latency for the step's verify and prefill work plus the drafter's passes,
`LatencyModel.step` and `DraftCost`, or the measured wall time of a real-model step). The
backend reports what each request emitted and whether it emitted an end-of-sequence token; the
engine alone applies output caps and ends requests.

Requests are pushed in (`arrive`, by the arrival source or, for a decode replica, when a
request's KV has been transferred) and results go to a `Records` object, which every replica
of a cluster shares. A prefill-only replica hands each prefilled request on (`handoff`).

The running batch lives in the first rows of one preallocated int64 matrix (a row per request,
a column per counter) and the KV blocks of its rows in one array, so a round is a few numpy
operations over the batch, whatever its size (the columns are laid out so that a round writes
only two of them); rows leave the matrix, and their counters go back to the per-request
arrays, only when a request finishes or is preempted. The replica keeps its own clock and
hands control to simpy only when another process has an event due first (see `process`), so a
run is not one simpy event per step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from dsim.engine.backend import Backend
from dsim.engine.clock import Clock, ProfileClock, WallClock, delay_to
from dsim.engine.config import DraftCost, EngineConfig
from dsim.engine.kv_blocks import KvBlocks, total
from dsim.engine.records import Records
from dsim.engine.round_kernels import ID, KV_END, LEFT, ORDER, VERIFIED, commit_round, leave_rows
from dsim.engine.steplog import StepLog, StepRecorder
from dsim.errors import InputError, SimulationStuck
from dsim.hardware.latency import LatencyModel, StepPrice, StepRate
from dsim.policies.protocol import EngineCosts, Policy, StepContext, ask, policy_traits
from dsim.workload import Workload

MAX_STALLED_STEPS = 1000  # consecutive zero-length steps before the engine reports it is stuck
PROGRESS_EVERY = 2000  # steps between progress reports


def ragged(lengths: np.ndarray, left: np.ndarray) -> bool:
    """Whether a round's verify lengths differ between requests, not counting rows at their
    output cap (l + 1 >= tokens left: an engine would shorten them to the cap)."""
    free = lengths[lengths + 1 < left]
    return len(free) > 1 and int(free.min()) != int(free.max())


@dataclass(slots=True)
class StepPlan:
    """What the step in flight commits when it ends: `step` writes it, `commit` reads it (one
    per replica, rewritten every step, so planning a step allocates nothing for it)."""

    decodes: bool = False  # the step runs a decode round over the batch
    lengths: np.ndarray | None = None  # shape [R]: drafts each running request verifies
    emitted: np.ndarray | None = None  # shape [R]: tokens the backend emitted per request
    accepted: np.ndarray | None = None  # shape [R]: drafts among them the backend accepted
    stop: np.ndarray | None = None  # shape [R] bool: ended on end-of-sequence (None: none did)
    takes: list[int] = field(default_factory=list)  # prefill tokens per chunked entry, in order
    completing: list[list[int]] = field(default_factory=list)  # entries whose prompt completes
    first_stop: np.ndarray | None = None  # per completing entry: first token is end-of-sequence


class Replica:
    """Queues as a deque and a list; the decode batch as a matrix (see module doc).

    `work` is the replica's load as a router sees it: tokens still to prefill plus output
    tokens it still has to emit, over every request it holds (queued, prefilling or running).
    """

    def __init__(
        self,
        workload: Workload,
        latency: LatencyModel,
        draft_cost: DraftCost,
        backend: Backend,
        policy: Policy,
        cfg: EngineConfig,
        rng: np.random.Generator,
        records: Records,
        clock: Clock | None = None,
        index: int = 0,
        handoff: Callable[[int, float], None] | None = None,
    ) -> None:
        self.w, self.latency, self.draft_cost = workload, latency, draft_cost
        self.backend, self.policy, self.cfg, self.rng = backend, policy, cfg, rng
        self.rec, self.index, self.handoff = records, index, handoff
        self.clock = clock or ProfileClock()
        traits = policy_traits(policy)
        self.drafts = traits.drafts
        # A synchronous policy needs this round's confidences on the host before the verify
        # pass can start: its scheduling cost is on the critical path (profile clock only).
        self.synchronous = traits.synchronous and not isinstance(self.clock, WallClock)
        self.observe = traits.observe
        # A policy that reads the step's shape prices it with its own startup tables.
        self.costs = self._engine_costs() if traits.reads_step else None
        self.lookahead = 1 + (cfg.gamma if self.drafts else 0)
        # (ctx + pad) // block_size = kv.blocks_for(ctx + lookahead): a round's KV need
        self.pad = self.lookahead + cfg.block_size - 1
        # Admission reserves prompt + output (+ a round's lookahead): the blocks of a request's
        # longest round, held from admission, so no round grows a row. A prefill-only replica
        # holds only the prompt's KV.
        self.reserves = cfg.reserve_output and handoff is None
        self.waiting: deque[int] = deque()
        self.kv_ready: set[int] = set()  # pushed with their KV (transferred from a prefill replica)
        self.work = 0
        self.prefilling: list[list[int]] = []  # [request, tokens left, blocks, order]
        self.rows = np.zeros((cfg.max_seqs, 7), np.int64)
        self._no_stop = np.zeros(cfg.max_seqs, bool)  # stop flags of a backend that has none
        self._no_drafts = np.zeros(cfg.max_seqs, np.int64)  # plain decoding's lengths (read only)
        self._gone = np.zeros(cfg.max_seqs, np.int64)  # requests leaving the batch (leave_rows)
        self.kv = KvBlocks(cfg.kv_tokens, cfg.block_size)
        self.rounds = 0  # decode rounds run so far
        self._set_running(0)
        self.batch_ctx = 0  # the batch's total context
        self.admissions = 0
        self.steps = StepRecorder()
        self.ragged_steps = 0  # decode steps that paid the ragged verify penalty
        self.plan = StepPlan()
        self._wake: simpy.Event | None = None  # set while idle, until a request is pushed
        self._check_fits()

    def _check_fits(self) -> None:
        """Refuse a request whose longest round cannot fit the cache's whole blocks: its last
        round starts at prompt + output - 1 tokens and needs a round's lookahead more, in whole
        blocks (what recompute grows a row to and reserve takes at once); one that does not
        fit would be preempted forever."""
        size = self.cfg.block_size
        blocks = self.kv.blocks_for(
            self.w.prompt_tokens + self.w.output_tokens + self.lookahead - 1
        )
        too_big = np.flatnonzero(blocks > self.kv.capacity)
        if len(too_big):
            i = int(too_big[0])
            raise InputError(
                self.w.source,
                i + 1,
                f"request needs {int(blocks[i]) * size} KV tokens ({int(blocks[i])} blocks of "
                f"{size}), more than --kv-tokens {self.cfg.kv_tokens} holds in whole blocks",
            )

    def _engine_costs(self) -> EngineCosts:
        """How this replica's engine prices the shapes a scheduler profiles at startup: the
        profile's verify step and the drafter's round (a dummy run's batch carries no
        prefill)."""
        cfg, latency, draft = self.cfg, self.latency, self.draft_cost
        return EngineCosts(
            verify_s=lambda n, seqs, ctx: float(latency.latency(n, seqs, ctx)),
            draft_s=lambda seqs, ctx: draft.seconds(seqs, cfg.gamma, ctx, latency),
            capture_sizes=cfg.shape.capture_sizes,
            max_tokens=cfg.token_budget or cfg.max_seqs * (1 + cfg.gamma) + cfg.prefill_chunk,
            max_reqs=cfg.max_seqs,
            gamma=cfg.gamma,
            vocab=cfg.shape.vocab,
        )

    def _step_context(self, r: int, takes: list[int]) -> StepContext:
        """The decode step's shape: its requests (running plus prefill chunks), T (one token a
        running request plus the chunks') and N_sampling (running requests plus the chunks
        that complete their prompt)."""
        done = sum(e[1] == t for e, t in zip(self.prefilling, takes, strict=False))
        return StepContext(r + len(takes), r + sum(takes), r + done, self.ids, self.costs)

    @property
    def free_blocks(self) -> int:
        return self.kv.free

    @property
    def holds(self) -> int:
        """Requests on the replica: queued, prefilling or running."""
        return len(self.waiting) + len(self.prefilling) + self.running

    # -- requests pushed in -----------------------------------------------------------------
    def arrive(self, i: int, kv_ready: bool = False) -> None:
        """Request i joins the queue; with `kv_ready` its prompt's KV is already here (sent by
        a prefill replica, announced by `expect`), so it skips prefill. Wakes an idle replica."""
        self.waiting.append(i)
        if kv_ready:
            self.kv_ready.add(i)
        else:  # a prefill-only replica emits only the first token
            self.work += self._context(i) + (1 if self.handoff else self._left(i))
        if self._wake is not None:
            self._wake.succeed()
            self._wake = None

    def expect(self, i: int) -> None:
        """Request i's KV is on its way here: its output counts as this replica's load now."""
        self.work += self._left(i)

    # -- admission, KV growth, preemption -------------------------------------------------
    def _context(self, i: int) -> int:
        return int(self.w.prompt_tokens[i] + self.rec.generated[i])

    def _admit(self) -> None:
        while self.waiting and self.running + len(self.prefilling) < self.cfg.max_seqs:
            i = self.waiting[0]
            context = self._context(i)
            # the blocks of its longest round: context + left - 1 tokens, plus the lookahead
            extra = self._left(i) + self.lookahead - 1 if self.reserves else 1
            need = self.kv.blocks_for(context + extra)
            if not self.kv.admit(need):
                break
            self.waiting.popleft()
            if i in self.kv_ready:
                self.kv_ready.discard(i)
                self._join(i, need, self.admissions)
            else:
                self.prefilling.append([i, context, need, self.admissions])
            self.admissions += 1

    def _reserve_decode_blocks(self) -> None:
        """Grow the batch's KV to hold this round's verify tokens (ctx + lookahead, with `pad`
        carrying the ceiling); preempt the most recently admitted request until it fits."""
        while self.running and not self.kv.reserve_rows(self.kv_end, self.left):
            victim = int(np.argmax(self.batch[:, ORDER]))
            i = int(self.ids[victim])
            self.rec.preemptions[i] += 1
            self.waiting.appendleft(i)
            self._leave(np.arange(self.running) == victim)
            self.work += self._context(i)  # its KV is gone: the whole context is prefilled again

    def _leave(self, rows: np.ndarray) -> np.ndarray:
        """Rows (a boolean mask) leave the batch: free their KV, save their counters. Returns
        the requests that left (a view of a buffer the next leave rewrites)."""
        rec = self.rec
        gone, context = leave_rows(
            self.batch,
            rows,
            self.pad,
            self.rounds,
            self.w.prompt_tokens,
            rec.counters,
            rec.generated,
            self._gone,
        )
        ids = self._gone[:gone]
        self.kv.free_rows(rows)
        self.batch_ctx -= context
        self._set_running(self.running - gone)
        self.backend.released(ids)
        return ids

    def _join(self, i: int, blocks: int, order: int) -> None:
        """Request i, prefilled, joins the batch with its saved counters."""
        row = self.rows[self.running]
        context, left = self._context(i), self._left(i)
        rounds, verified, accepted = self.rec.counters[i].tolist()
        row[:] = (
            i,
            context + left + self.pad,
            left,
            order,
            rounds - self.rounds,
            verified,
            accepted - context + rounds,
        )
        self.kv.join_row(blocks)
        self.batch_ctx += context
        self._set_running(self.running + 1)

    def _set_running(self, n: int) -> None:
        """The batch is rows[:n]; its column views are made here, not every round."""
        self.running = n
        self.batch = b = self.rows[:n]
        self.ids, self.kv_end = b[:, ID], b[:, KV_END]
        self.left, self.verified = b[:, LEFT], b[:, VERIFIED]
        self.no_stop = self._no_stop[:n]
        self.no_drafts = self._no_drafts[:n]

    def _left(self, i: int) -> int:
        return int(self.w.output_tokens[i] - self.rec.generated[i])

    # -- one step -----------------------------------------------------------------------------
    def _prefill_chunks(self, verifying: int) -> list[int]:
        """This step's prefill tokens per prefilling entry, FCFS: at most `prefill_chunk` in
        all and, under a step token budget, what the `verifying` requests' verify tokens
        leave."""
        budget, takes = self.cfg.prefill_chunk, []
        if self.cfg.token_budget is not None:
            budget = min(budget, self.cfg.token_budget - verifying * self.lookahead)
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
            self._context(e[0]) - e[1] + t
            for e, t in zip(self.prefilling, takes, strict=False)  # takes: a prefix
        )

    def step(self, now: float) -> float | None:
        """Plan one step at time `now`: its latency (None when idle); `commit` ends it."""
        started = self.clock.start(now)
        if self.waiting:
            self._admit()
        # Prefill first (an engine that does not mix): a step with prefill work decodes nothing.
        prefill_only = bool(self.prefilling) and not self.cfg.mixed_prefill
        if not (prefill_only or self.reserves):
            self._reserve_decode_blocks()
        r = 0 if prefill_only else self.running
        takes = self._prefill_chunks(r) if self.prefilling else []
        p = sum(takes)
        if r == 0 and p == 0:
            return None
        # Verify context: the running requests' mean KV; prefill: the chunks' mean end context.
        ctx = self.batch_ctx / r if r else 0.0
        p_ctx = self._prefill_context(takes) / len(takes) if takes else 0.0
        price = self.latency.priced(r, ctx, p, len(takes), p_ctx, self.cfg.fused_prefill)
        plan = self.plan
        plan.decodes = r > 0
        # A fused step carrying prefill runs without full CUDA graphs whatever its lengths
        # (vLLM's rule): only a decode-only or unfused step can pay the ragged penalty.
        penalty = 0.0 if takes and self.cfg.fused_prefill else self.cfg.ragged_penalty
        if r and self.drafts:
            shape = self._step_context(r, takes) if self.costs is not None else None
            draft_s, target_s, verify_tokens = self._decode_round(
                plan, r, ctx, price, penalty, shape
            )
        elif r:
            draft_s, target_s, verify_tokens = self._plain_round(plan, r, price)
        else:
            draft_s, target_s, verify_tokens = 0.0, price(0), 0
        plan.takes = takes
        if takes:  # the backend runs each chunk in the step that schedules it
            chunked = self.prefilling[: len(takes)]
            done = [e[1] == t for e, t in zip(chunked, takes, strict=True)]
            plan.completing = [e for e, d in zip(chunked, done, strict=True) if d]
            plan.first_stop = self.backend.prefill([e[0] for e in chunked], takes, done)
        modelled = draft_s + target_s
        step_s = self.clock.seconds(started, modelled)
        self.steps.add(now, step_s, r, verify_tokens + p, p, self.kv.used)
        return step_s

    def _decode_round(
        self,
        plan: StepPlan,
        r: int,
        ctx: float,
        price: StepPrice,
        penalty: float,
        shape: StepContext | None,
    ) -> tuple[float, float, int]:
        """Draft, schedule and verify one round of the batch's r requests into `plan`: the
        drafter's (and a synchronous scheduler's) seconds, the target pass's, which pays
        (1 + penalty) when the round's lengths are ragged (`ragged`), and its verify tokens.
        The policy's SPS is this step's own price (`StepRate` over the `price` charged below),
        so a draft it trims saves what the step's charge saves."""
        ids = self.ids
        conf, truth = self.backend.draw(ids, self.rng)
        draft_s = self.draft_cost.seconds(r, self.cfg.gamma, ctx, price)
        if self.synchronous:  # the verify pass waits for the host's schedule
            draft_s += self.cfg.sched.seconds(r)
        lengths = ask(self.policy, conf, StepRate(price, draft_s, penalty), truth, shape)
        emitted, accepted, stop = self.backend.verify(ids, lengths, truth)
        if self.observe is not None:
            self.observe(lengths, accepted)
        plan.lengths, plan.emitted, plan.accepted, plan.stop = lengths, emitted, accepted, stop
        verify_tokens = r + total(lengths)
        if penalty and ragged(lengths, self.left):
            self.ragged_steps += 1
            return draft_s, price.ragged(verify_tokens, penalty), verify_tokens
        return draft_s, price(verify_tokens), verify_tokens

    def _plain_round(self, plan: StepPlan, r: int, price: StepPrice) -> tuple[float, float, int]:
        """Plain decoding (a policy that does not draft): no drafter runs and no request
        verifies a draft, so nothing is drawn, the policy is not asked, and the target's pass
        emits a token a request (`Backend.plain`). Returns what `_decode_round` does."""
        plan.lengths = self.no_drafts
        plan.emitted, plan.accepted, plan.stop = self.backend.plain(self.ids, self.rng)
        if self.observe is not None:
            self.observe(plan.lengths, plan.accepted)
        sched_s = self.cfg.sched.seconds(r) if self.synchronous else 0.0
        return sched_s, price(r), r

    def commit(self, end: float) -> None:
        """End the planned step at time `end`: emit its tokens, finish and move requests."""
        plan = self.plan
        if plan.decodes:
            self._commit_decode(plan.lengths, plan.emitted, plan.accepted, plan.stop, end)
        if plan.takes:
            self._commit_prefill(plan.takes, plan.completing, plan.first_stop, end)

    def _commit_decode(
        self,
        lengths: np.ndarray,
        emitted: np.ndarray,
        accepted: np.ndarray,
        stop: np.ndarray | None,
        end: float,
    ) -> None:
        """`emitted`: tokens the backend emitted (accepted drafts + one of the target's, or up
        to an end-of-sequence token, flagged in `stop`), `accepted` the drafts among them; the
        output cap cuts them here."""
        no_stop = self.no_stop if stop is None else stop
        emitted_now, cut, done = commit_round(lengths, emitted, accepted, no_stop, self.batch)
        self.work -= emitted_now + cut
        self.batch_ctx += emitted_now  # the context grows by what the rows emitted
        self.rounds += 1
        if done:
            ids = self._leave(self.left == 0)
            self.rec.finish[ids] = end
            self.rec.replica[ids] = self.index
            self.rec.count_finished(len(ids), end)

    def _commit_prefill(
        self, takes: list[int], completing: list[list[int]], stop: np.ndarray | None, end: float
    ) -> None:
        for entry, take in zip(self.prefilling, takes, strict=False):  # takes: a prefix
            entry[1] -= take
        self.work -= sum(takes)
        if not completing:
            return
        self.prefilling = [e for e in self.prefilling if e[1] > 0]
        # prefill emits a token (docs/design.md, The replica step)
        rec = self.rec
        for k, (i, _, blocks, order) in enumerate(completing):
            rec.generated[i] += 1
            self.work -= 1
            if np.isnan(rec.first_token[i]):
                rec.first_token[i] = end
            ends = self._left(i) == 0 or (stop is not None and stop[k])
            if not ends and self.handoff is None:
                self._join(i, blocks, order)
                continue
            self.kv.release(blocks)
            self.backend.released(np.array([i]))
            if not ends:  # a prefill-only replica: decode happens elsewhere
                self.handoff(i, end)
                continue
            if self.handoff is None:
                self.work -= self._left(i)  # an end-of-sequence token drops the rest
            rec.finish[i] = end
            rec.replica[i] = self.index
            rec.count_finished(1, end)

    # -- the clock --------------------------------------------------------------------------
    def process(self, env: simpy.Environment, progress: Callable[[int], None] | None):
        """The simpy process: step while there is work, sleep until a request is pushed.

        Steps follow each other on the replica's own clock `t` (each step ends at t + its
        latency), so results do not depend on how often it yields. Before moving `t` to or past
        another process's next event it yields until then, so that process sees this replica as
        a per-step timeout would show it (a step planned, not yet committed) and a request pushed
        at a step's end is admitted by the next step. Idle, it first brings simpy's time up to
        `t` (so env.now ends at the last step's end), then waits to be woken by `arrive`.
        """
        t, stalled = env.now, 0
        while True:
            step_s = self.step(t)
            if step_s is None:
                if t > env.now:
                    yield env.timeout(delay_to(env.now, t))
                if not self.holds:
                    self._wake = env.event()
                    yield self._wake
                t = env.now
                continue
            stalled = stalled + 1 if not step_s > 0 else 0  # NaN counts as no progress
            if stalled > MAX_STALLED_STEPS or not math.isfinite(step_s) or step_s < 0:
                raise SimulationStuck(f"step of {step_s!r} s at t={t:g} s with {self._state()}")
            end = t + step_s
            if env.peek() <= end:
                yield env.timeout(delay_to(env.now, end))
            t = end
            self.commit(t)
            if progress is not None and self.steps.count % PROGRESS_EVERY == 0:
                progress(self.rec.finished)

    def _state(self) -> str:
        return (
            f"{self.rec.finished}/{len(self.w)} finished, {len(self.waiting)} waiting, "
            f"{len(self.prefilling)} prefilling, {self.running} decoding, "
            f"{self.kv.used}/{self.kv.capacity} KV blocks"
        )

    def step_log(self) -> StepLog:
        return self.steps.log()

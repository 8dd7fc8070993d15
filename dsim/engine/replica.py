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

The running batch is a `RunningBatch` (`dsim.engine.batch`: one int64 matrix, a row per
request, a named column per counter) and the KV blocks of its rows one array, so a round is a
few compiled loops over the batch, whatever its size; rows leave the matrix, and their counters
go back to the per-request records, only when a request finishes or is preempted. The replica
keeps its own clock and hands control to simpy only when another process has an event due
first (see `process`), so a run is not one simpy event per step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from dsim.engine.backend import Backend
from dsim.engine.batch import RunningBatch
from dsim.engine.clock import Clock, ProfileClock, WallClock, delay_to
from dsim.engine.config import DraftCost, EngineConfig
from dsim.engine.kv_blocks import KvBlocks, total
from dsim.engine.records import Records
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
class PrefillEntry:
    """A request admitted and not yet prefilled: its KV blocks are held from admission."""

    request: int  # the request's index in the workload
    to_prefill: int  # context tokens still to prefill (all of it until the first chunk)
    blocks: int  # KV blocks admission took for it
    order: int  # its admission order on the replica (becomes its batch row's ORDER)


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
    completing: list[PrefillEntry] = field(default_factory=list)  # entries whose prompt completes
    first_stop: np.ndarray | None = None  # per completing entry: first token is end-of-sequence


class Replica:
    """Queues as a deque and a list; the decode batch as a `RunningBatch` (see module doc).

    `work` is the replica's load as a router sees it: tokens still to prefill plus output
    tokens it still has to emit, over every request it holds (queued, prefilling or running).
    """

    def __init__(
        self,
        workload: Workload,
        *,
        latency: LatencyModel,
        draft_cost: DraftCost,
        backend: Backend,
        policy: Policy,
        config: EngineConfig,
        rng: np.random.Generator,
        records: Records,
        clock: Clock | None = None,
        index: int = 0,
        handoff: Callable[[int, float], None] | None = None,
    ) -> None:
        self.workload, self.latency, self.draft_cost = workload, latency, draft_cost
        self.backend, self.policy, self.config, self.rng = backend, policy, config, rng
        self.records, self.index, self.handoff = records, index, handoff
        self.clock = clock or ProfileClock()
        traits = policy_traits(policy)
        self.policy_drafts = traits.drafts
        # A synchronous policy needs this round's confidences on the host before the verify
        # pass can start: its scheduling cost is on the critical path (profile clock only).
        self.synchronous = traits.synchronous and not isinstance(self.clock, WallClock)
        self.observe = traits.observe
        # A policy that reads the step's shape prices it with its own startup tables.
        self.engine_costs = self._engine_costs() if traits.reads_step else None
        # tokens a round adds to a request's KV at most: its verify tokens
        self.lookahead = 1 + (config.gamma if self.policy_drafts else 0)
        # (context + kv_pad) // block_size = kv.blocks_for(context + lookahead): a round's KV need
        self.kv_pad = self.lookahead + config.block_size - 1
        # Admission reserves prompt + output (+ a round's lookahead): the blocks of a request's
        # longest round, held from admission, so no round grows a row. A prefill-only replica
        # holds only the prompt's KV.
        self.reserves_output = config.reserve_output and handoff is None
        self.waiting: deque[int] = deque()
        self.kv_ready: set[int] = set()  # pushed with their KV (transferred from a prefill replica)
        self.work = 0
        self.prefilling: list[PrefillEntry] = []
        self.batch = RunningBatch(config.max_seqs)
        self.kv = KvBlocks(config.kv_tokens, config.block_size)
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
        size = self.config.block_size
        blocks = self.kv.blocks_for(
            self.workload.prompt_tokens + self.workload.output_tokens + self.lookahead - 1
        )
        too_big = np.flatnonzero(blocks > self.kv.capacity)
        if len(too_big):
            i = int(too_big[0])
            raise InputError(
                self.workload.source,
                i + 1,
                f"request needs {int(blocks[i]) * size} KV tokens ({int(blocks[i])} blocks of "
                f"{size}), more than --kv-tokens {self.config.kv_tokens} holds in whole blocks",
            )

    def _engine_costs(self) -> EngineCosts:
        """How this replica's engine prices the shapes a scheduler profiles at startup: the
        profile's verify step and the drafter's round (a dummy run's batch carries no
        prefill)."""
        config, latency, draft = self.config, self.latency, self.draft_cost
        budget = config.token_budget
        return EngineCosts(
            verify_s=lambda n, seqs, ctx: float(latency.latency(n, seqs, ctx)),
            draft_s=lambda seqs, ctx: draft.seconds(seqs, config.gamma, ctx, latency),
            capture_sizes=config.shape.capture_sizes,
            max_tokens=budget or config.max_seqs * (1 + config.gamma) + config.prefill_chunk,
            max_reqs=config.max_seqs,
            gamma=config.gamma,
            vocab=config.shape.vocab,
        )

    def _step_context(self, r: int, takes: list[int]) -> StepContext:
        """The decode step's shape: its requests (running plus prefill chunks), T (one token a
        running request plus the chunks') and N_sampling (running requests plus the chunks
        that complete their prompt)."""
        done = sum(e.to_prefill == t for e, t in zip(self.prefilling, takes, strict=False))
        ids = self.batch.request
        return StepContext(r + len(takes), r + sum(takes), r + done, ids, self.engine_costs)

    @property
    def free_blocks(self) -> int:
        return self.kv.free

    @property
    def holds(self) -> int:
        """Requests on the replica: queued, prefilling or running."""
        return len(self.waiting) + len(self.prefilling) + self.batch.size

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
        return int(self.workload.prompt_tokens[i] + self.records.generated[i])

    def _admit(self) -> None:
        while self.waiting and self.batch.size + len(self.prefilling) < self.config.max_seqs:
            i = self.waiting[0]
            context = self._context(i)
            # the blocks of its longest round: context + left - 1 tokens, plus the lookahead
            extra = self._left(i) + self.lookahead - 1 if self.reserves_output else 1
            need = self.kv.blocks_for(context + extra)
            if not self.kv.admit(need):
                break
            self.waiting.popleft()
            if i in self.kv_ready:
                self.kv_ready.discard(i)
                self._join(i, need, self.admissions)
            else:
                self.prefilling.append(PrefillEntry(i, context, need, self.admissions))
            self.admissions += 1

    def _reserve_decode_blocks(self) -> None:
        """Grow the batch's KV to hold this round's verify tokens (context + lookahead, with
        `kv_pad` carrying the ceiling); preempt the most recently admitted request until it
        fits."""
        batch = self.batch
        while batch.size and not self.kv.reserve_rows(batch.context, self.kv_pad):
            victim = batch.newest()
            i = int(batch.request[victim])
            self.records.preemptions[i] += 1
            self.waiting.appendleft(i)
            self._leave(np.arange(batch.size) == victim)
            self.work += self._context(i)  # its KV is gone: the whole context is prefilled again

    def _leave(self, rows: np.ndarray) -> np.ndarray:
        """Rows (a boolean mask) leave the batch: free their KV, save their counters. Returns
        the requests that left (a view of a buffer the next leave rewrites)."""
        records = self.records
        ids = self.batch.leave(
            rows, self.workload.prompt_tokens, records.counters, records.generated
        )
        self.kv.free_rows(rows)
        self.backend.released(ids)
        return ids

    def _join(self, i: int, blocks: int, order: int) -> None:
        """Request i, prefilled, joins the batch with its saved counters."""
        counters = self.records.counters[i].tolist()
        self.batch.join(i, self._context(i), self._left(i), order, counters)
        self.kv.join_row(blocks)

    def _left(self, i: int) -> int:
        return int(self.workload.output_tokens[i] - self.records.generated[i])

    # -- one step -----------------------------------------------------------------------------
    def _prefill_chunks(self, verifying: int) -> list[int]:
        """This step's prefill tokens per prefilling entry, FCFS: at most `prefill_chunk` in
        all and, under a step token budget, what the `verifying` requests' verify tokens
        leave."""
        budget, takes = self.config.prefill_chunk, []
        if self.config.token_budget is not None:
            budget = min(budget, self.config.token_budget - verifying * self.lookahead)
        for entry in self.prefilling:
            take = min(entry.to_prefill, budget)
            if take == 0:
                break
            takes.append(take)
            budget -= take
        return takes

    def _prefill_context(self, takes: list[int]) -> int:
        """KV tokens the step's prefill chunks attend over (done so far plus this chunk)."""
        return sum(
            self._context(e.request) - e.to_prefill + t
            for e, t in zip(self.prefilling, takes, strict=False)  # takes: a prefix
        )

    def step(self, now: float) -> float | None:
        """Plan one step at time `now`: its latency (None when idle); `commit` ends it."""
        started = self.clock.start(now)
        if self.waiting:
            self._admit()
        # Prefill first (an engine that does not mix): a step with prefill work decodes nothing.
        prefill_only = bool(self.prefilling) and not self.config.mixed_prefill
        if not (prefill_only or self.reserves_output):
            self._reserve_decode_blocks()
        r = 0 if prefill_only else self.batch.size
        takes = self._prefill_chunks(r) if self.prefilling else []
        p = sum(takes)
        if r == 0 and p == 0:
            return None
        # Verify context: the running requests' mean KV; prefill: the chunks' mean end context.
        ctx = self.batch.context_total / r if r else 0.0
        p_ctx = self._prefill_context(takes) / len(takes) if takes else 0.0
        price = self.latency.priced(r, ctx, p, len(takes), p_ctx, self.config.fused_prefill)
        plan = self.plan
        plan.decodes = r > 0
        # A fused step carrying prefill runs without full CUDA graphs whatever its lengths
        # (vLLM's rule): only a decode-only or unfused step can pay the ragged penalty.
        penalty = 0.0 if takes and self.config.fused_prefill else self.config.ragged_penalty
        if r and self.policy_drafts:
            shape = self._step_context(r, takes) if self.engine_costs is not None else None
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
            done = [e.to_prefill == t for e, t in zip(chunked, takes, strict=True)]
            plan.completing = [e for e, d in zip(chunked, done, strict=True) if d]
            plan.first_stop = self.backend.prefill([e.request for e in chunked], takes, done)
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
        ids = self.batch.request
        conf, truth = self.backend.draw(ids, self.rng)
        draft_s = self.draft_cost.seconds(r, self.config.gamma, ctx, price)
        if self.synchronous:  # the verify pass waits for the host's schedule
            draft_s += self.config.sched.seconds(r)
        lengths = ask(self.policy, conf, StepRate(price, draft_s, penalty), truth, shape)
        emitted, accepted, stop = self.backend.verify(ids, lengths, truth)
        if self.observe is not None:
            self.observe(lengths, accepted)
        plan.lengths, plan.emitted, plan.accepted, plan.stop = lengths, emitted, accepted, stop
        verify_tokens = r + total(lengths)
        if penalty and ragged(lengths, self.batch.left):
            self.ragged_steps += 1
            return draft_s, price.ragged(verify_tokens, penalty), verify_tokens
        return draft_s, price(verify_tokens), verify_tokens

    def _plain_round(self, plan: StepPlan, r: int, price: StepPrice) -> tuple[float, float, int]:
        """Plain decoding (a policy that does not draft): no drafter runs and no request
        verifies a draft, so nothing is drawn, the policy is not asked, and the target's pass
        emits a token a request (`Backend.plain`). Returns what `_decode_round` does."""
        plan.lengths = self.batch.no_drafts
        plan.emitted, plan.accepted, plan.stop = self.backend.plain(self.batch.request, self.rng)
        if self.observe is not None:
            self.observe(plan.lengths, plan.accepted)
        sched_s = self.config.sched.seconds(r) if self.synchronous else 0.0
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
        emitted_now, cut, done = self.batch.commit(lengths, emitted, accepted, stop)
        self.work -= emitted_now + cut
        if done:
            ids = self._leave(self.batch.left == 0)
            self.records.finish[ids] = end
            self.records.replica[ids] = self.index
            self.records.count_finished(len(ids), end)

    def _commit_prefill(
        self,
        takes: list[int],
        completing: list[PrefillEntry],
        stop: np.ndarray | None,
        end: float,
    ) -> None:
        for entry, take in zip(self.prefilling, takes, strict=False):  # takes: a prefix
            entry.to_prefill -= take
        self.work -= sum(takes)
        if not completing:
            return
        self.prefilling = [e for e in self.prefilling if e.to_prefill > 0]
        # prefill emits a token (docs/design.md, The replica step)
        records = self.records
        for k, entry in enumerate(completing):
            i = entry.request
            records.generated[i] += 1
            self.work -= 1
            if np.isnan(records.first_token[i]):
                records.first_token[i] = end
            ends = self._left(i) == 0 or (stop is not None and stop[k])
            if not ends and self.handoff is None:
                self._join(i, entry.blocks, entry.order)
                continue
            self.kv.release(entry.blocks)
            self.backend.released(np.array([i]))
            if not ends:  # a prefill-only replica: decode happens elsewhere
                self.handoff(i, end)
                continue
            if self.handoff is None:
                self.work -= self._left(i)  # an end-of-sequence token drops the rest
            records.finish[i] = end
            records.replica[i] = self.index
            records.count_finished(1, end)

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
                progress(self.records.finished)

    def _state(self) -> str:
        return (
            f"{self.records.finished}/{len(self.workload)} finished, {len(self.waiting)} waiting, "
            f"{len(self.prefilling)} prefilling, {self.batch.size} decoding, "
            f"{self.kv.used}/{self.kv.capacity} KV blocks"
        )

    def step_log(self) -> StepLog:
        return self.steps.log()

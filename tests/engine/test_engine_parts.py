"""The engine's fast paths against their plain definitions: prefix counting, the step log,
short sums, KV bookkeeping, and a replica sharing its simpy environment with another process."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

from dsim.acceptance.prefix import leading_accepted
from dsim.acceptance.sources import parse_acceptance
from dsim.cluster.source import arrivals
from dsim.engine.backend import Simulated
from dsim.engine.batch import RunningBatch
from dsim.engine.config import EngineConfig, parse_draft_cost
from dsim.engine.kv_blocks import SHORT, total
from dsim.engine.records import Records
from dsim.engine.replica import Replica
from dsim.engine.steplog import StepRecorder
from dsim.hardware.latency import LatencyModel
from dsim.policies import parse_policy
from dsim.run_spec import DEFAULT_PROFILE
from dsim.workload import synthetic


@pytest.mark.parametrize("width", [0, 1, 2, 5, 7, 8, 17])
def test_prefix_counter_matches_cumulative_product(width):
    rng = np.random.default_rng(width)
    for rows in (500, 3, 2):
        uniform, prob = rng.random((rows, width)), np.full((rows, width), 0.8)
        if width:
            uniform[0], uniform[1, 0] = 0.0, 0.9  # the all-accepted row, a first rejection
        got = leading_accepted(uniform, prob)
        np.testing.assert_array_equal(got, np.cumprod(uniform < prob, axis=1).sum(axis=1))
        assert got.dtype == np.int64
        if width:
            assert got[0] == width and got[1] == 0


def test_step_recorder_keeps_every_value_exactly_across_growth():
    rec, rows = StepRecorder(), []
    rng = np.random.default_rng(1)
    for k in range(5000):  # well past any initial allocation
        row = (k * 0.1 + rng.random(), rng.random(), k % 300, 2**40 + k, k % 7, 3 * k)
        rec.add(*row)
        rows.append(row)
        if k == 10:
            assert rec.log().start_s[-1] == rows[-1][0]  # reading mid-run leaves it appendable
    log = rec.log()
    cols = list(zip(*rows, strict=True))
    np.testing.assert_array_equal(log.start_s, cols[0])
    np.testing.assert_array_equal(log.latency_s, cols[1])
    ints = [log.num_running, log.batch_tokens, log.prefill_tokens, log.kv_blocks_used]
    for got, want in zip(ints, cols[2:], strict=True):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    assert rec.count == 5000


@pytest.mark.parametrize("n", [0, 1, SHORT - 1, SHORT, 5 * SHORT])
def test_total_is_the_exact_sum(n):
    x = np.random.default_rng(n).integers(0, 2**40, size=n)
    assert total(x) == sum(int(v) for v in x)
    assert isinstance(total(x), int)


@given(
    st.lists(
        st.tuples(st.integers(1, 500), st.integers(1, 5), st.integers(0, 9), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_running_batch_rows_round_trip_through_a_round(rows):
    """Requests joined with saved counters leave with those counters plus one round's (a round
    cut by the output cap counting every draft it accepted); the named views read the rows and
    `context_total` stays their summed context."""
    context, left, saved, leaving = (np.array(c) for c in zip(*rows, strict=True))
    n = len(rows)
    batch = RunningBatch(n + 1)
    for k in range(n):
        batch.join(k, int(context[k]), int(left[k]), 10 + k, (saved[k], 2 * saved[k], saved[k]))
    np.testing.assert_array_equal(batch.request, np.arange(n))
    np.testing.assert_array_equal(batch.order, 10 + np.arange(n))
    np.testing.assert_array_equal(batch.verified, 2 * saved)
    assert batch.newest() == n - 1 and batch.context_total == context.sum()
    ones = np.ones(n, np.int64)
    emitted_now, cut, done = batch.commit(ones, 3 * ones, 2 * ones, None)  # 2 drafts + 1
    emit = np.minimum(3, left)
    assert (emitted_now, cut, done) == (emit.sum(), 0, np.count_nonzero(left <= 3))
    np.testing.assert_array_equal(batch.context, context + emit)
    np.testing.assert_array_equal(batch.left, left - emit)
    assert batch.context_total == batch.context.sum()
    counters, generated = np.zeros((n, 3), np.int64), np.zeros(n, np.int64)
    gone = batch.leave(leaving, np.zeros(n, np.int64), counters, generated).copy()
    np.testing.assert_array_equal(gone, np.flatnonzero(leaving))
    np.testing.assert_array_equal(counters[gone], np.c_[saved + 1, 2 * saved + 1, saved + 2][gone])
    np.testing.assert_array_equal(generated[gone], (context + emit)[gone])
    np.testing.assert_array_equal(batch.request, np.flatnonzero(~leaving))
    assert batch.size == n - len(gone) and batch.context_total == batch.context.sum()


def _replica(seed: int = 0, cfg: EngineConfig | None = None, rate: float = 3) -> Replica:
    workload = synthetic(f"synthetic:rate={rate},n=120,prompt=300,output=80", seed)
    rng = np.random.default_rng(seed)
    backend = Simulated(parse_acceptance("preset:dspark:chat", 7))
    backend.bind(len(workload), rng)
    latency = LatencyModel.from_csv(ROOT / DEFAULT_PROFILE)
    return Replica(
        workload,
        latency=latency,
        draft_cost=parse_draft_cost("ratio:0.1"),
        backend=backend,
        policy=parse_policy("dspark"),
        config=cfg or EngineConfig(max_seqs=16),
        rng=rng,
        records=Records.empty(len(workload)),
    )


def _serve(env: simpy.Environment, replica: Replica) -> None:
    env.process(arrivals(env, replica.workload.arrival_s, replica.arrive))
    env.process(replica.process(env, None))


def test_replica_shares_simpy_time_with_another_process():
    """Another process sees the replica as per-step timeouts would show it: at each of its
    events, exactly the steps that ended by then are committed; results do not change."""
    alone = _replica()
    env = simpy.Environment()
    _serve(env, alone)
    env.run()
    end = alone.steps.log()
    assert env.now == end.start_s[-1] + end.latency_s[-1]  # env ends at the last step's end
    assert alone.records.finished == len(alone.workload) and alone.work == 0

    shared, seen = _replica(), []

    def ticker(env, replica):
        while replica.records.finished < len(replica.workload):
            yield env.timeout(0.3737)
            seen.append((env.now, replica.records.finished))

    env = simpy.Environment()
    _serve(env, shared)
    env.process(ticker(env, shared))
    env.run()
    np.testing.assert_array_equal(shared.records.finish, alone.records.finish)
    np.testing.assert_array_equal(shared.records.counters, alone.records.counters)
    assert len(seen) > 50
    for now, finished in seen:
        assert finished == np.count_nonzero(alone.records.finish <= now)


@pytest.mark.parametrize("block_size", [16, 12])  # a power of two (shifted) and not (divided)
def test_kv_blocks_and_running_sums_balance_under_preemption(block_size):
    """Under a KV budget that forces preemption, every step holds at most the budget, and the
    replica's running sums (KV blocks, the batch's context and blocks) return to zero."""
    cfg = EngineConfig(max_seqs=64, kv_tokens=3000, block_size=block_size, prefill_chunk=256)
    replica = _replica(cfg=cfg, rate=30)
    env = simpy.Environment()
    _serve(env, replica)
    env.run()
    log = replica.steps.log()
    assert replica.records.finished == len(replica.workload)
    assert replica.records.preemptions.sum() > 0
    assert log.kv_blocks_used.max() <= cfg.kv_blocks
    kv = replica.kv
    assert kv.used == kv.rows_total == replica.batch.context_total == replica.work == 0
    rounds, verified, accepted = replica.records.counters.T
    assert (accepted <= verified).all() and (rounds > 0).all()
    # Each round emits its accepted drafts plus one token; only a request's last round may
    # be cut by its output cap, and prefill (again after each preemption) emits one more.
    emitted = replica.records.generated - 1 - replica.records.preemptions
    assert (emitted <= rounds + accepted).all() and (emitted > rounds + accepted - 8).all()

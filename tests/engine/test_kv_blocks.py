"""The KV block allocator keeps its books under any sequence of admissions, growth and frees."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dsim.engine.kv_blocks import KvBlocks

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.integers(1, 40)),
        st.tuples(st.just("join"), st.integers(0, 20)),
        st.tuples(st.just("grow"), st.integers(0, 30)),
        st.tuples(st.just("leave"), st.integers(0, 2**16)),
        st.tuples(st.just("release"), st.integers(0, 20)),
    ),
    max_size=60,
)


@given(st.integers(1, 2000), st.sampled_from([1, 3, 16, 32]), OPS)
def test_books_balance_under_any_sequence(kv_tokens, block_size, ops):
    kv = KvBlocks(kv_tokens, block_size)
    held: list[int] = []  # admitted requests not in the batch, their blocks
    tokens: list[int] = []  # per batch row: its padded tokens (the reserve's argument)
    for op, n in ops:
        before = (kv.used, kv.rows.copy(), kv.rows_total)
        if op == "admit":
            fits = kv.used + n <= kv.capacity
            assert kv.admit(n) == fits
            if fits:
                held.append(n)
        elif op == "join" and held:
            blocks = held.pop(n % len(held))
            kv.join_row(blocks)
            tokens.append(blocks * block_size)
        elif op == "grow" and tokens:
            want = [t + (n * (k + 1)) % (3 * block_size) for k, t in enumerate(tokens)]
            need = np.array(want, np.int64) // block_size
            grow = int(np.maximum(need, kv.rows).sum()) - kv.rows_total
            padded = np.maximum(np.array(want), kv.rows * block_size)
            ok = kv.reserve_rows(padded, 0)
            assert ok == (before[0] + grow <= kv.capacity)
            if ok:
                tokens = [max(w, t) for w, t in zip(want, tokens, strict=True)]
            else:  # refused: nothing changed
                assert kv.used == before[0] and kv.rows_total == before[2]
                np.testing.assert_array_equal(kv.rows, before[1])
        elif op == "leave" and tokens:
            mask = np.array([(n >> k) & 1 == 1 for k in range(len(tokens))])
            kv.free_rows(mask)
            tokens = [t for t, m in zip(tokens, mask, strict=True) if not m]
        elif op == "release" and held:
            kv.release(held.pop(n % len(held)))
        assert 0 <= kv.used <= kv.capacity
        assert kv.rows_total == int(kv.rows.sum()) and len(kv.rows) == len(tokens)
        assert kv.used - kv.rows_total == sum(held)
        assert kv.free == kv.capacity - kv.used


@given(st.integers(0, 10**6), st.sampled_from([1, 7, 16, 64]))
def test_blocks_for_is_the_ceiling(tokens, block_size):
    kv = KvBlocks(10**7, block_size)
    blocks = kv.blocks_for(tokens)
    assert blocks * block_size >= tokens > (blocks - 1) * block_size or tokens == blocks == 0


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=20), st.sampled_from([5, 16]))
def test_reserve_rows_floors_padded_tokens_and_never_shrinks_a_row(padded, block_size):
    kv = KvBlocks(10**9, block_size)
    for _ in padded:
        kv.join_row(0)
    kv_pad = min(padded)
    assert kv.reserve_rows(np.array(padded, np.int64) - kv_pad, kv_pad)
    np.testing.assert_array_equal(kv.rows, np.array(padded) // block_size)
    assert kv.used == kv.rows_total == sum(p // block_size for p in padded)

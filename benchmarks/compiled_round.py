"""What a compiled decode round would cost against the engine's numpy round (issue 14).

The round is fixed:3's decode step on R rows of gamma 7 as the engine does it (`Parametric-
Acceptance.draw`, `Simulated.verify`, `Replica._reserve_decode_blocks` and `_commit_decode`'s
arithmetic, copied here), against the same arithmetic in one numba function, with its random
draws made two ways: by numba from the Generator, and by numpy (two calls) before it. Each
variant's true prefixes are checked against numpy's on the same seed (same stream, same
results), then each is timed over 50,000 rounds, three times.

The sizing study behind the engine's compiled round (`dsim/engine/round_kernels.py`); it
imports no dsim. Run: `.venv/bin/python benchmarks/compiled_round.py [R]`.
"""

from __future__ import annotations

import sys
import time

import numba
import numpy as np
from numba import njit
from scipy.special import expit

GAMMA, LENGTH, SHIFT = 7, 3, 4  # drafts, fixed:3, 16-token KV blocks
ROUNDS = 50_000


class State:
    """A batch that never finishes (outputs and KV far from their caps)."""

    def __init__(self, rows: int, seed: int) -> None:
        self.z_all = np.random.default_rng(123).normal(0.5, 1.0, (1000, GAMMA))
        self.idx = np.arange(rows, dtype=np.int64) * 7
        self.lengths = np.full(rows, LENGTH, np.int64)
        self.kv_end = np.full(rows, 10**9, np.int64)
        self.left = np.full(rows, 10**8, np.int64)
        self.verified = np.zeros(rows, np.int64)
        self.verdicts = np.zeros((rows, GAMMA + 1), bool)
        self.rng = np.random.default_rng(seed)
        self.truth = np.empty(rows, np.int64)


def total(x: np.ndarray) -> int:
    return sum(x.tolist()) if len(x) < 100 else int(x.sum())


def numpy_round(s: State) -> np.ndarray:
    """The engine's calls, in its order."""
    z = s.z_all.take(s.idx, axis=0)
    z += s.rng.standard_normal(z.shape)
    p = expit(z)
    np.less(s.rng.random(z.shape), p, out=s.verdicts[:, :-1])
    truth = s.verdicts.argmin(axis=1)
    emitted = np.minimum(truth, s.lengths)
    emitted += 1
    need = s.kv_end - s.left
    need >>= SHIFT
    total(need)
    emit = np.minimum(emitted, s.left)
    total(emit)
    s.left -= emit
    s.verified += s.lengths
    np.count_nonzero(s.left)
    return truth


@njit
def _rest(z_all, idx, normals, uniforms, lengths, kv_end, left, verified, truth):
    """Everything after the draws, row by row: (tokens emitted, KV blocks needed, any done)."""
    rows, gamma = normals.shape
    emitted_total, need_total, done = 0, 0, False
    for i in range(rows):
        t = gamma
        for j in range(gamma):
            p = 1.0 / (1.0 + np.exp(-(z_all[idx[i], j] + normals[i, j])))
            if not uniforms[i, j] < p:
                t = j
                break
        truth[i] = t
        need_total += (kv_end[i] - left[i]) >> SHIFT
        e = min(min(t, lengths[i]) + 1, left[i])
        emitted_total += e
        left[i] -= e
        verified[i] += lengths[i]
        done = done or left[i] == 0
    return emitted_total, need_total, done


@njit
def _whole(z_all, idx, rng, lengths, kv_end, left, verified, truth):
    """The draws by numba's own Generator, in numpy's order, then `_rest`."""
    shape = (idx.shape[0], z_all.shape[1])
    normals = rng.standard_normal(shape)
    uniforms = rng.random(shape)
    return _rest(z_all, idx, normals, uniforms, lengths, kv_end, left, verified, truth)


def compiled_round(s: State) -> np.ndarray:
    _whole(s.z_all, s.idx, s.rng, s.lengths, s.kv_end, s.left, s.verified, s.truth)
    return s.truth


def numpy_draws_round(s: State) -> np.ndarray:
    shape = (len(s.idx), GAMMA)
    normals, uniforms = s.rng.standard_normal(shape), s.rng.random(shape)
    _rest(s.z_all, s.idx, normals, uniforms, s.lengths, s.kv_end, s.left, s.verified, s.truth)
    return s.truth


VARIANTS = {"numpy": numpy_round, "compiled": compiled_round, "numpy draws": numpy_draws_round}


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    print(f"numba {numba.__version__}, numpy {np.__version__}, R = {rows}")
    start = time.perf_counter()
    compiled_round(State(rows, 0))  # compiles both numba functions
    print(f"  first call (compiling): {time.perf_counter() - start:.2f} s")
    for name, run in list(VARIANTS.items())[1:]:
        a, b = State(rows, 1), State(rows, 1)
        same = sum(np.array_equal(numpy_round(a), run(b)) for _ in range(20_000))
        print(f"  {name}: true prefixes as numpy's in {same} of 20,000 rounds")
    for _ in range(3):
        line = []
        for name, run in VARIANTS.items():
            s = State(rows, 0)
            start = time.perf_counter()
            for _ in range(ROUNDS):
                run(s)
            line.append(f"{name} {(time.perf_counter() - start) / ROUNDS * 1e6:5.2f} us")
        print("  " + ", ".join(line))


if __name__ == "__main__":
    main()

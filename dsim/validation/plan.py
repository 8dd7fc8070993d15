"""What `dsim validate` serves, and at which rates.

The prompt split: the acceptance trace that drives the simulation must come from prompts other
than the ones validation serves. `dsim collect` numbers sequences by their row in its prompt
file (`seq_id`, recorded with the file in the trace's sidecar `dataset`), so the held-out file
is split by row: EVEN rows (0, 2, 4, ...) are the trace half, whose trace rows drive the
simulation; ODD rows are the served half, which real mode serves. Repeat k's request i asks
served prompt (k n + i) mod P (n requests a run, P served prompts), so the repeats walk through
the served half instead of serving its first n prompts every time (the default three repeats of
10 serve 30 of the 36 held-out served prompts, each once). The two halves are disjoint and
together cover the file.

The rate rule: a load is a target busy fraction of the server under `mtp1` (light 1/3,
moderate 2/3). Its arrival rate is the one at which the *simulator* (the just-measured target
and drafter profiles, the trace half's acceptance, the served prompts' real lengths and the
trace half's generated lengths) keeps the server busy that fraction of the time under `mtp1`,
averaged over the repeats' arrival seeds: a bisection on log(rate). The real busy fraction each
run achieved is reported next to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.trace import read_acceptance_trace, write_acceptance_trace
from dsim.engine.backend import Simulated
from dsim.errors import InputError
from dsim.models.data import Prompt
from dsim.run import run_engine
from dsim.run_inputs import resolve_engine
from dsim.run_spec import RunSpec
from dsim.workload import Workload, load_workload

RATE_RANGE = (1e-4, 1e4)  # requests/s searched by the rate rule
BISECTIONS = 40


def split_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of an n-prompt file: (trace half: even rows, served half: odd rows)."""
    rows = np.arange(n)
    return rows[rows % 2 == 0], rows[rows % 2 == 1]


def trace_half(
    trace: Path, prompts: Path, n_prompts: int, served: bool = False
) -> tuple[pd.DataFrame, dict]:
    """The trace's rows recorded on the trace half of `prompts` (`served`: on the served half,
    for read-backs that replay the prompts real mode served); InputError (one line) if the
    trace was recorded on another prompt file, or has no rows there."""
    df, meta = read_acceptance_trace(trace)
    dataset = meta.get("dataset")
    if not dataset or Path(dataset).resolve() != Path(prompts).resolve():
        raise InputError(
            trace,
            None,
            f"recorded on prompts {dataset!r}, not {str(prompts)!r}: its seq_id rows cannot be "
            "split from the served prompts",
        )
    if int(df["seq_id"].max()) >= n_prompts:
        raise InputError(trace, None, f"seq_id beyond the {n_prompts} rows of {prompts}")
    keep = split_rows(n_prompts)[1 if served else 0]
    half = df[df["seq_id"].isin(keep)].reset_index(drop=True)
    if half.empty:
        name = "served half (odd rows)" if served else "trace half (even rows)"
        raise InputError(trace, None, f"no rows on the {name} of the prompts: nothing to replay")
    return half, meta


def write_trace_half(
    half: pd.DataFrame, meta: dict, source: Path, out: Path, served: bool = False
) -> None:
    """The trace half (`served`: the served half) as an acceptance trace of its own (the
    simulations replay this file)."""
    rows = "odd" if served else "even"
    note = f"rows of {source} on the {rows} rows of {meta['dataset']} (dsim validate's split)"
    keep = {k: meta[k] for k in ("target", "drafter", "dataset", "temperature")}
    write_acceptance_trace(half, out, {**keep, "command": note})


def generated_lengths(half: pd.DataFrame, cap: int) -> np.ndarray:
    """Tokens each trace sequence generated (the prefill's token plus accepted + 1 per round),
    at most `cap`: the output lengths the rate rule expects."""
    per_seq = (half["accepted"] + 1).groupby(half["seq_id"]).sum().to_numpy()
    return np.minimum(per_seq + 1, cap).astype(np.int64)


def arrivals_spec(rate: float, n: int, cap: int) -> str:
    """The trace spec of a validation run: n Poisson arrivals at `rate`, outputs capped at
    `cap` (real mode ends a request at its cap or its end-of-sequence token)."""
    return f"synthetic:rate={rate!r},cv=1,n={n},output={cap},sigma=0"


def repeat_order(prompts: int, repeat: int, n: int) -> np.ndarray:
    """Served-prompt indices in the order repeat `repeat` asks them: request i gets entry
    i mod P, served prompt (repeat n + i) mod P (P = `prompts`, n requests a run)."""
    return (repeat * n + np.arange(prompts)) % prompts


def expected_workload(
    rate: float, n: int, seed: int, prompt_tokens: np.ndarray, output_tokens: np.ndarray
) -> Workload:
    """n Poisson arrivals at `rate` (the real runs' arrivals for this seed), request i with
    the i mod P-th prompt length (in the repeat's order) and the i mod S-th expected output
    length."""
    arrivals = load_workload(arrivals_spec(rate, n, 1), seed).arrival_s
    i = np.arange(n)
    return Workload(
        arrivals,
        prompt_tokens[i % len(prompt_tokens)],
        output_tokens[i % len(output_tokens)],
        "dsim validate rate rule",
    )


def simulated_busy(spec: RunSpec, workload: Workload, acceptance: str) -> tuple[float, float]:
    """(Busy fraction, busy seconds) of a trace-driven simulation of `workload` under `spec`."""
    source = parse_acceptance(acceptance, spec.gamma, "raw")  # real mode's raw confidences
    summary = run_engine(resolve_engine(spec), workload, Simulated(source)).summary
    busy = float(summary["busy_fraction"])
    return busy, busy * float(summary["duration_s"])


def choose_rate(
    busy: float,
    busy_at: Callable[[float], float],
    lo: float = RATE_RANGE[0],
    hi: float = RATE_RANGE[1],
    steps: int = BISECTIONS,
) -> float:
    """The rate whose busy fraction `busy_at(rate)` is `busy` (bisection on log rate; busy
    grows with the rate)."""
    if not 0 < busy < 1:
        raise InputError(None, None, f"a load's busy fraction must be in (0, 1), got {busy}")
    for _ in range(steps):
        mid = float(np.sqrt(lo * hi))
        lo, hi = (mid, hi) if busy_at(mid) < busy else (lo, mid)
    return float(np.sqrt(lo * hi))


@dataclass(frozen=True)
class Repeats:
    """What a load's repeats serve, as the rate rule expects it: repeat k's arrivals and
    sampling seed `seeds[k]`, `n` requests each, the served prompts' token lengths (in the
    served half's order) and the trace half's generated lengths."""

    seeds: tuple[int, ...]
    n: int
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def workloads(self, rate: float) -> list[Workload]:
        """Each repeat's expected workload at `rate`, its prompts in the repeat's order."""
        order = [repeat_order(len(self.prompt_tokens), k, self.n) for k in range(len(self.seeds))]
        return [
            expected_workload(rate, self.n, seed, self.prompt_tokens[o], self.output_tokens)
            for seed, o in zip(self.seeds, order, strict=True)
        ]


def simulate_repeats(
    spec: RunSpec, acceptance: str, repeats: Repeats, rate: float
) -> list[tuple[float, float]]:
    """`simulated_busy` of each repeat at `rate` under `spec`, repeat k running seeds[k]."""
    runs = zip(repeats.seeds, repeats.workloads(rate), strict=True)
    return [simulated_busy(replace(spec, seed=s), w, acceptance) for s, w in runs]


def rate_for_load(
    busy: float, base: RunSpec, acceptance: str, repeats: Repeats
) -> tuple[float, float]:
    """The rule's rate for a target `mtp1` busy fraction, and the simulated busy fraction
    there (mean over the repeats)."""
    spec = replace(base, policy="mtp1")

    def busy_at(rate: float) -> float:
        return float(np.mean([b for b, _ in simulate_repeats(spec, acceptance, repeats, rate)]))

    rate = choose_rate(busy, busy_at)
    return rate, busy_at(rate)


def run_busy_s(
    base: RunSpec, policies: tuple[str, ...], acceptance: str, repeats: Repeats, rate: float
) -> float:
    """A run's simulated busy seconds at `rate`, the mean over `policies` and the repeats: a
    real run's time is its passes' (the clock skips the idle gaps), so this is what the
    study's projection weighs a load's runs by (`dsim.validation.timeline`)."""
    runs = [
        seconds
        for policy in policies
        for _, seconds in simulate_repeats(replace(base, policy=policy), acceptance, repeats, rate)
    ]
    return float(np.mean(runs))


def trace_prompts(prompts: list[Prompt]) -> list[Prompt]:
    """The trace half (even rows) of the prompt file: never served by the measured runs."""
    keep, _ = split_rows(len(prompts))
    return [prompts[i] for i in keep]


def served_prompts(prompts: list[Prompt]) -> list[Prompt]:
    """The served half (odd rows) of the prompt file."""
    _, serve = split_rows(len(prompts))
    if not len(serve):
        raise InputError(None, None, "the prompt file needs at least 2 prompts to split")
    return [prompts[i] for i in serve]

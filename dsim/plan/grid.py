"""Each configuration's load grid: from a bracket the step model gives down to a floor, in steps
of at most STEP (5%) of the load, so a bisection over it lands within one step of the highest
load a tier allows (docs/plan.md, The load bracket).

Open loop the load is the offered rate in req/s. Its top is an upper bound on what the
configuration can serve: every decode step at its best tokens per second (all of a round's
drafts accepted, no prefill, no drafter, the shortest context) and every prefill step full
of mean prompts, each chunk at the shortest context it can have, whichever binds, times the
replicas that do each. Closed loop the load is the client's concurrency C, from 1 to
max_num_seqs x the decode replicas (more clients only queue)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsim.errors import InputError
from dsim.plan.space import Config
from dsim.run_inputs import EngineInputs

STEP = 0.05  # the largest relative step between consecutive loads
SPAN = 32.0  # open loop: the grid reaches down to its top / SPAN


@dataclass(frozen=True)
class Traffic:
    """What the trace offers, read once: the mean lengths the bracket prices, the rate at
    rate scale 1 (open loop) and whether its client is closed-loop."""

    closed: bool
    mean_prompt: float
    mean_output: float
    base_rate: float  # req/s at rate scale 1 (NaN closed loop)


def _decode_rate(engine: EngineInputs) -> float:
    """Output tokens per second of one replica at its best batch: each request's round emits
    every draft and the bonus token."""
    cfg, latency = engine.config, engine.profile.latency
    per_request = cfg.gamma + 1 if engine.policy.drafts else 1
    most = cfg.max_seqs
    if cfg.token_budget:
        most = max(1, min(most, cfg.token_budget // per_request))
    batches = sorted({*(2**i for i in range(most.bit_length())), most})
    return max(r * per_request / float(latency.latency(r * per_request, r, 0.0)) for r in batches)


def _prefill_rate(engine: EngineInputs, mean_prompt: float) -> float:
    """Prompt tokens per second of one replica prefilling full steps of mean prompts, each
    chunk at the shortest context it can have: its own length (a chunk attends over itself;
    a profile has no prefill row below that, so a lower context would be an extrapolation)."""
    cfg, latency = engine.config, engine.profile.latency
    tokens = cfg.token_budget or cfg.prefill_chunk
    seqs = max(1, round(tokens / mean_prompt))
    return tokens / float(latency.prefill(tokens, seqs, tokens / seqs))


def rate_bound(config: Config, engine: EngineInputs, traffic: Traffic) -> float:
    """An upper bound, in req/s, on the rate `config` serves (module doc)."""
    decoded = max(traffic.mean_output - 1.0, 0.0)  # the prefill step emits the first token
    decode = _decode_rate(engine) / decoded if decoded > 0 else math.inf
    prefill = _prefill_rate(engine, traffic.mean_prompt) / traffic.mean_prompt
    p, d = config.layout.split
    if p == 0:
        return d * min(decode, prefill)
    return min(d * decode, p * prefill)


def loads(top: float, closed: bool, step: float = STEP) -> tuple[float, ...]:
    """The grid, ascending: open loop top / (1 + step)^k down to top / SPAN; closed loop the
    integers from `top` down to 1 with each at most `step` below the last (or 1 below)."""
    if not 0 < step <= STEP:
        raise InputError(None, None, f"--step must be in (0, {STEP}], got {step!r}")
    if closed:
        values, v = [], int(top)
        while v >= 1:
            values.append(float(v))
            v = min(v - 1, math.ceil(v / (1 + step)))
        return tuple(reversed(values))
    n = math.floor(math.log(SPAN) / math.log1p(step)) + 1
    return tuple(top / (1 + step) ** k for k in reversed(range(n)))

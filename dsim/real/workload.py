"""Real prompts on a trace's arrival times: the workload of real-model mode.

Arrivals (and the request count) come from the run's trace as in simulation; request i asks
prompt i mod P of the prompt file, so its prompt length is the real tokenized length of that
chat turn. The trace's output length, capped at --max-new-tokens, becomes the request's cap:
a real request ends at the cap or at its end-of-sequence token, whichever comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsim.errors import InputError
from dsim.models.data import Prompt
from dsim.workload import Workload


@dataclass(frozen=True)
class RealWorkload:
    workload: Workload  # prompt_tokens: real lengths; output_tokens: caps
    prompts: list[Prompt]  # request i's prompt
    token_ids: list[list[int]]  # request i's prompt as target token ids


def real_workload(
    arrivals: Workload, prompts: list[Prompt], target, max_new_tokens: int
) -> RealWorkload:
    """Attach prompts to the arrivals of `arrivals` and cap outputs at `max_new_tokens`."""
    if max_new_tokens < 1:
        raise InputError(None, None, f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    encoded = [target.encode_chat(p.prompt) for p in prompts]
    pick = [i % len(prompts) for i in range(len(arrivals))]
    token_ids = [encoded[k] for k in pick]
    workload = Workload(
        arrivals.arrival_s,
        np.array([len(ids) for ids in token_ids], dtype=np.int64),
        np.minimum(arrivals.output_tokens, max_new_tokens).astype(np.int64),
        arrivals.source,
    )
    return RealWorkload(workload, [prompts[k] for k in pick], token_ids)

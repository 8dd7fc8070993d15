"""The profiles a validation measures on its own machine right before the real runs: never
clock a validation by another machine's profile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from dsim.hardware.latency import profile_metadata, write_profile
from dsim.hardware.measure import latency_percentiles
from dsim.models.cpu_profile import Before, Focus, write_cpu_profile
from dsim.models.data import Prompt
from dsim.models.drafters import random_draft, time_draft
from dsim.validation.bench import Bench

DRAFTER_BATCHES = (1, 2, 4, 8, 16, 32)
PROFILE_WARMUP = 1  # untimed passes per point: the timed rounds run them all again
# The cells the runs live in (one or two sequences hold nearly all of both loads' decode
# time), timed 2 more times after each of the profile's 5 rounds: medians of 15. With 5, such
# a cell's median wanders by a few percent from profile to profile, and the light load's
# passes under one policy move by as much (the validation study's README and its probe of the
# small-batch cells); about a minute more of profiling on a 2-core VM.
FOCUS = Focus(max_seqs=2, rounds=2)


def drafter_before(drafter) -> Before:
    """The real drafter's batched draft() of R sequences, run untimed before each of the
    target profile's verify passes of R sequences: every policy a validation serves drafts
    each round right before its verify, and the target's pass costs differently after it."""
    gen = torch.Generator().manual_seed(0)
    drafts: dict[int, Callable[[], object]] = {}

    def run(seqs: int) -> None:
        if seqs not in drafts:
            drafts[seqs] = random_draft(drafter, seqs, gen)
        drafts[seqs]()

    return Before(run, "the real drafter's draft() of the point's sequences, untimed")


def measure_drafter_profile(drafter, target, out: Path, repeats: int = 7) -> pd.DataFrame:
    """Median wall time of the real drafter's batched draft() at R sequences; written as a
    drafter profile of one block pass per round (batch_tokens = R x gamma, num_seqs = R, one
    context: the drafter reads no KV cache), read with --drafter-kind block."""
    rows = []
    for r in DRAFTER_BATCHES:
        times = time_draft(drafter, target.hidden_size, r, repeats)
        p10, p50, p90 = latency_percentiles(times)
        rows.append((r * drafter.gamma, 0, p50, r, p10, p90))
    cols = ["batch_tokens", "context_len", "latency_ms", "num_seqs"]
    df = pd.DataFrame(rows, columns=[*cols, "latency_ms_p10", "latency_ms_p90"])
    meta = {
        "estimate": False,
        "method": "measured: wall time of the real drafter's draft() at R sequences",
        "model": str(getattr(drafter, "config", "drafter")),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    write_profile(df, out, meta)
    return df


class Measured(NamedTuple):
    """What the profiling phase made: the profiles, the served prompts' token lengths, and the
    seconds of the target profile's work beyond its plain rounds: its focus rounds and the
    drafter passes before its verify points (0 when a profile was given)."""

    profile: Path
    draft_profile: Path
    prompt_lengths: np.ndarray
    extra_s: float


def measure_profiles(bench: Bench, served: list[Prompt]) -> Measured:
    """The drafter's profile, and the target's unless one was given."""
    s, target, drafter = bench.settings, bench.target, bench.drafter
    draft_profile = bench.out / "drafter-profile.csv"
    bench.log(f"profiling the drafter on this machine ({draft_profile})")
    measure_drafter_profile(drafter, target, draft_profile)
    prompt_lengths = np.array([len(target.encode_chat(p.prompt)) for p in served], np.int64)
    profile, extra_s = s.profile, 0.0
    if profile is None:
        profile = bench.out / "profile.csv"
        bench.log(f"profiling {s.target} on this machine ({profile})")
        grid = s.profile_grid(int(prompt_lengths.max()) + s.max_new_tokens, drafter.gamma + 1)
        write_cpu_profile(
            target, s.target, grid, profile, warmup=PROFILE_WARMUP, progress=False, focus=FOCUS,
            before=drafter_before(drafter),
        )  # fmt: skip
        meta = profile_metadata(profile)
        extra_s = meta["focus"]["seconds"] + meta["before"]["seconds"]
    return Measured(profile, draft_profile, prompt_lengths, extra_s)

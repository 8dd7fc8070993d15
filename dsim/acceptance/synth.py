"""Acceptance traces sampled from any AcceptanceSource, so the measured-trace path can be
exercised (replay, calibration) before a real drafter records one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.trace import conf_columns, write_acceptance_trace
from dsim.errors import InputError


def synthesize_trace(
    source: Any,
    sequences: int,
    rounds: int,
    rng: np.random.Generator,
    domain: str,
) -> pd.DataFrame:
    """`sequences` x `rounds` rows: request s of `source` becomes sequence s.

    Domains come from the source's per-request `domain_names` when it has them, else `domain`.
    """
    source.bind(sequences, rng)
    idx = np.arange(sequences)
    draws = [source.draw(idx, rng) for _ in range(rounds)]
    gamma = source.gamma
    conf = np.stack([c for c, _ in draws], axis=1).reshape(-1, gamma)  # (seq, round) order
    accepted = np.stack([a for _, a in draws], axis=1).ravel()
    domains = getattr(source, "domain_names", None)
    per_seq = (
        np.asarray(domains, dtype=object) if domains is not None else np.full(sequences, domain)
    )
    df = pd.DataFrame(
        {
            "seq_id": np.repeat(idx, rounds).astype(np.int64),
            "round": np.tile(np.arange(rounds), sequences).astype(np.int32),
            "domain": np.repeat(per_seq, rounds),
            "gamma": np.full(sequences * rounds, gamma, dtype=np.int32),
        }
    )
    df[conf_columns(gamma)] = conf
    df["accepted"] = accepted.astype(np.int32)
    return df


def write_synthetic_trace(
    spec: str,
    gamma: int,
    sequences: int,
    rounds: int,
    seed: int,
    out: str | Path,
    command: str,
) -> pd.DataFrame:
    """Sample a trace from the acceptance spec (`dsim synth-acceptance`) and write it."""
    for name, value in (("--gamma", gamma), ("--sequences", sequences), ("--rounds", rounds)):
        if value < 1:
            raise InputError(None, None, f"{name} must be at least 1, got {value}")
    source = parse_acceptance(spec, gamma)
    rng = np.random.default_rng(seed)
    df = synthesize_trace(source, sequences, rounds, rng, domain=spec)
    meta = {
        "target": None,
        "drafter": None,
        "dataset": "synthetic",
        "temperature": None,
        "command": command,
        "source": spec,
        "seed": seed,
    }
    write_acceptance_trace(df, out, meta)
    return df

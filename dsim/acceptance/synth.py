"""Acceptance traces sampled from any AcceptanceSource, so the measured-trace path can be
exercised (replay, calibration) before a real drafter records one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dsim.acceptance.sources import parse_acceptance
from dsim.acceptance.trace import conf_columns, write_acceptance_trace
from dsim.checks import check_number
from dsim.errors import InputError
from dsim.run_spec import MAX_COUNTS


def _rounds(
    source: Any, sequences: int, rounds: int, tokens: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sequence, round, confidences, accepted) of every drawn round, in drawing order: every
    sequence for `rounds` rounds, or with `tokens` each until it has emitted that many."""
    idx, emitted, out, t = np.arange(sequences), np.zeros(sequences), [], 0
    while len(idx) and (t < rounds if tokens is None else True):
        conf, accepted = source.draw(idx, rng)
        out.append((idx, np.full(len(idx), t), conf, accepted))
        if tokens is not None:
            emitted[idx] += accepted + 1
            idx = idx[emitted[idx] < tokens]
        t += 1
    return tuple(np.concatenate([o[i] for o in out]) for i in range(4))  # type: ignore[return-value]


def synthesize_trace(
    source: Any,
    sequences: int,
    rounds: int,
    rng: np.random.Generator,
    domain: str,
    tokens: int | None = None,
) -> pd.DataFrame:
    """Request s of `source` becomes sequence s, for `rounds` rounds each or, with `tokens`,
    until it has emitted that many tokens (as a serving request does: one that accepts less
    runs more rounds, which weighs the trace's rounds as a serving run's are weighed).

    Domains come from the source's per-request `domain_names` when it has them, else `domain`.
    """
    source.bind(sequences, rng)
    seq, rnd, conf, accepted = _rounds(source, sequences, rounds, tokens, rng)
    order = np.lexsort((rnd, seq))  # (seq, round) order
    seq, rnd, conf, accepted = seq[order], rnd[order], conf[order], accepted[order]
    domains = getattr(source, "domain_names", None)
    per_seq = (
        np.asarray(domains, dtype=object) if domains is not None else np.full(sequences, domain)
    )
    df = pd.DataFrame(
        {
            "seq_id": seq.astype(np.int64),
            "round": rnd.astype(np.int32),
            "domain": per_seq[seq],
            "gamma": np.full(len(seq), source.gamma, dtype=np.int32),
        }
    )
    df[conf_columns(source.gamma)] = conf
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
    tokens: int | None = None,
) -> pd.DataFrame:
    """Sample a trace from the acceptance spec (`dsim synth-acceptance`) and write it."""
    check_number(gamma, "--gamma", ge=1, le=MAX_COUNTS["gamma"], integer=True)
    checked = [("--sequences", sequences), ("--rounds", rounds)]
    for name, value in checked + ([("--tokens", tokens)] if tokens is not None else []):
        if value < 1:
            raise InputError(None, None, f"{name} must be at least 1, got {value}")
    source = parse_acceptance(spec, gamma)
    rng = np.random.default_rng(seed)
    df = synthesize_trace(source, sequences, rounds, rng, domain=spec, tokens=tokens)
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

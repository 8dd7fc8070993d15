"""Defaults of `dsim validate` (and `dsim serve`'s prompts), shared by the command and the
study without either importing the other (the study's heavy imports stay out of the CLI)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_DRAFTER = Path("drafters/markov.pt")
DEFAULT_TRACE = Path("traces/acceptance/smollm2-markov.parquet")
DEFAULT_PROMPTS = Path("traces/prompts/heldout.jsonl")
DEFAULT_REPEATS = 3

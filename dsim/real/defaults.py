"""The held-out prompt file: `dsim serve`'s default prompts and the prompts `dsim validate`
splits (kept apart from both commands so neither imports the other)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_PROMPTS = Path("traces/prompts/heldout.jsonl")

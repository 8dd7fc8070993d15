"""The `lab` extra: torch, transformers, gguf and accelerate, for the commands that run real
models (measuring profiles, training, collecting, `serve`, `validate`). The simulator installs
without it; a command that needs it says so in one line instead of failing on an import."""

from __future__ import annotations

import importlib.util
import sys

from dsim.errors import InputError

LAB = ("torch", "transformers", "gguf", "accelerate")
INSTALL = "pip install 'dsim[lab]'"


def _importable(name: str) -> bool:
    """Whether `name` can be imported, without importing it (torch takes seconds)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require_lab(what: str, modules: tuple[str, ...] = LAB) -> None:
    """Raise one input error (exit 2) naming the extra to install if a module is missing."""
    missing = [m for m in modules if not _importable(m)]
    if missing:
        raise InputError(None, None, f"{what} needs {', '.join(missing)}: {INSTALL}")

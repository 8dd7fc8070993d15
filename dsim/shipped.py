"""The files dsim carries inside its package, so `dsim run`'s defaults resolve wherever it runs.

The defaults stay spelled as paths of the checkout (`traces/azure2023/...`, `profiles/...`), so
a run's spec, its summary and a sweep's cache keys read the same in every directory. Where such
a relative path names no file, `locate` returns the package's copy under the same name
(`dsim/data/`, package data in pyproject.toml; in the checkout those are links to the
repository's files, so the bytes live once and a wheel carries them).
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def locate(path: str) -> str:
    """`path` itself when it exists (or is absolute, or climbs out with `..`); else the
    package's copy of that relative path when dsim ships one; else `path` (whose reader then
    says it is missing)."""
    given = Path(path)
    if given.is_absolute() or ".." in given.parts or given.exists():
        return path
    shipped = DATA / given
    return str(shipped) if shipped.is_file() else path

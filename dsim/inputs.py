"""Opening an input file: one clear error for each way it can fail, and a record of every read.

`input_file` is the gate every reader of a user's file goes through (tables, sidecars,
calibration files, checkpoints). It tells "not found" from "a directory", "not a regular file"
(a FIFO would block forever) and "permission denied", and, inside `recording()`, notes the
file, so a sweep can key its cache on every file a simulation reads, whichever spec led there
(docs/design.md, Trace and profile formats).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from dsim.errors import InputError

_READS: ContextVar[set[str] | None] = ContextVar("dsim_reads", default=None)


def input_file(path: str | Path, what: str = "file") -> Path:
    """`path` if it names a readable regular file; else an InputError saying why not."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        problem = {
            errno.ENOENT: f"{what} not found",
            errno.ENOTDIR: f"{what} not found (a parent is not a directory)",
            errno.EACCES: "permission denied (a folder on the path cannot be searched)",
        }.get(exc.errno, exc.strerror or "cannot be read")
        raise InputError(path, None, problem) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(path, None, f"is a directory, expected a {what}")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(
            path, None, f"is not a regular file (a FIFO, socket or device), expected a {what}"
        )
    if not os.access(path, os.R_OK):
        raise InputError(path, None, "permission denied")
    reads = _READS.get()
    if reads is not None:
        reads.add(str(path.resolve()))
    return path


@contextmanager
def recording() -> Iterator[set[str]]:
    """Collect the resolved paths of the files `input_file` admits inside the block."""
    reads: set[str] = set()
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON file holding one object (sidecars, calibrations); anything else is an InputError."""
    path = input_file(path, what)
    data = path.read_bytes()
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(path, data.count(b"\n", 0, exc.start) + 1, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise InputError(path, None, f"a {what} must be a JSON object, not a {type(obj).__name__}")
    return obj

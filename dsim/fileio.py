"""Atomic writes: an output either appears whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# Version of the layout of dsim's output tables and summary.json; bump it when a column or key
# changes meaning or disappears (adding one does not need a bump).
SCHEMA_VERSION = 1
SCHEMA_KEY = b"dsim.schema_version"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def write_parquet(df: pd.DataFrame, path: str | Path) -> None:
    """A table as Parquet, atomically, stamped with the schema version in its key-value metadata
    (`dsim.schema_version`), so a reader can tell which layout of the columns it holds."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    stamp = {SCHEMA_KEY: str(SCHEMA_VERSION).encode()}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **stamp})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_with(path: str | Path, writer: Callable[[Path], None]) -> None:
    """Call `writer(tmp_path)` and move the result into place atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place only on success.

    An existing directory is replaced file by file (files the new run did not write stay).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp.chmod(0o777 & ~_UMASK)
    try:
        yield tmp
        if path.exists():
            for item in tmp.iterdir():
                os.replace(item, path / item.name)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")

"""Atomic writes: an output either appears whole or not at all."""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsim.errors import InputError

if TYPE_CHECKING:  # Parquet's libraries load with the first table written: the rest of this
    import pandas as pd  # module is stdlib-only (the GPU profile's device has no pandas)

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
    """Strict JSON: NaN and infinities (an undefined metric) are written as null."""
    text = json.dumps(_strict(obj), indent=2, sort_keys=True, default=_jsonable, allow_nan=False)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n")


def _strict(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:
        obj = obj.item()
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj


def write_parquet(df: pd.DataFrame, path: str | Path) -> None:
    """A table as Parquet, atomically, stamped with the schema version in its key-value metadata
    (`dsim.schema_version`), so a reader can tell which layout of the columns it holds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    stamp = {SCHEMA_KEY: str(SCHEMA_VERSION).encode()}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **stamp})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_with(path: str | Path, writer: Callable[[Path], None]) -> None:
    """Call `writer(tmp_path)` and move the result into place atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def sidecar_of(path: str | Path) -> Path:
    """NAME.json beside NAME.csv or NAME.parquet: what the file is and the command that made it."""
    return Path(path).with_suffix(".json")


def write_with_sidecar(path: str | Path, writer: Callable[[Path], None], meta: dict) -> None:
    """A table and its NAME.json sidecar: the sidecar lands only once the table is whole, then
    the table; a failure before either move leaves both as they were."""
    with atomic_path(path) as tmp:
        writer(tmp)
        write_json(sidecar_of(path), meta)


# The text chunk dsim stamps into every PNG it writes (no version or date: the same figure
# gives the same bytes), so a later run can tell its own picture from a user's.
PNG_STAMP = {"Software": "dsim"}


def write_png(fig: Any, path: str | Path, dpi: int) -> None:
    """A matplotlib figure as a PNG, atomically, stamped as dsim's (`PNG_STAMP`)."""
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata=PNG_STAMP))


def dsim_wrote(path: str | Path) -> bool:
    """Whether dsim wrote the file at `path`, by the mark each kind of output carries: a JSON
    file names dsim as its maker (a sidecar's `command` is the dsim command line that made it;
    a folder's marker, such as summary.json, names its dsim `format`); a PNG has dsim's text
    stamp; a table (CSV, Parquet) is dsim's when its NAME.json sidecar is."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            obj = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return False
        if not isinstance(obj, dict):
            return False
        command, form = obj.get("command"), obj.get("format")
        return (isinstance(command, str) and command.startswith("dsim ")) or (
            isinstance(form, str) and form.startswith("dsim-")
        )
    if path.suffix == ".png":
        return _png_text(path, "Software") == PNG_STAMP["Software"]
    side = sidecar_of(path)
    return side != path and side.is_file() and dsim_wrote(side)


def _png_text(path: Path, key: str) -> str | None:
    """The value of a PNG's tEXt chunk `key` (None: not a PNG, or no such chunk)."""
    try:
        with path.open("rb") as fh:
            if fh.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            while len(head := fh.read(8)) == 8:
                length, kind = struct.unpack(">I4s", head)
                if kind != b"tEXt":
                    fh.seek(length + 4, os.SEEK_CUR)
                    continue
                name, _, value = fh.read(length).partition(b"\0")
                fh.seek(4, os.SEEK_CUR)
                if name.decode("latin-1") == key:
                    return value.decode("latin-1")
    except OSError:
        return None
    return None


def check_output_file(
    path: str | Path,
    force: bool,
    sidecar: bool = False,
    ours: Callable[[Path], bool] = dsim_wrote,
    reads: tuple[str | Path, ...] = (),
) -> None:
    """An output file dsim may replace: absent, written by dsim (`ours`: `dsim_wrote`, or the
    reader of a format that carries its own mark, such as a drafter checkpoint), or `force`d;
    with `sidecar`, its NAME.json too. Never a file the command `reads` (nor one's sidecar),
    even with `force`: the output would destroy its own input. Anything else (a user's file,
    a folder, a link) is an InputError, before any work is done."""
    path = Path(path)
    if sidecar and path.suffix == ".json":
        raise InputError(path, None, "is the name of its own NAME.json sidecar: choose another")
    outputs = (path, sidecar_of(path)) if sidecar else (path,)
    inputs = {q.resolve() for r in reads for q in (Path(r), sidecar_of(r))}
    for file in outputs:
        if file.resolve() in inputs:
            raise InputError(
                file,
                None,
                "is a file this command reads: writing it would destroy its own "
                "input (choose another --out)",
            )
    for file in outputs:
        if file.is_symlink() or file.is_dir():
            kind = "a link" if file.is_symlink() else "a folder"
            raise InputError(
                file, None, f"is {kind}, not a file dsim may replace: choose another --out"
            )
        mine = ours if file == path else dsim_wrote
        if file.exists() and not force and not mine(file):
            which = "" if file == path else f" (the sidecar of {path.name})"
            raise InputError(
                file,
                None,
                f"exists and dsim did not write it{which}: not replacing it (choose another "
                "--out, or --force to replace it)",
            )
    folder = next(p for p in (path.absolute().parent, *path.absolute().parents) if p.exists())
    _probe(folder)  # the nearest folder that exists: nothing is made before the work


def _probe(folder: Path) -> None:
    """Write and remove a file in `folder`, or an InputError naming it."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dsim-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(folder, None, f"cannot write here: {exc.strerror or exc}") from None


def check_output_dir(path: str | Path, owner: str | tuple[str, ...]) -> None:
    """An output folder dsim may write into: absent, empty, or holding `owner` (so dsim wrote
    it; with several names, any one of them).

    Anything else (a file, someone's folder) is an InputError, before any work is done.
    """
    path = Path(path)
    owners = (owner,) if isinstance(owner, str) else owner
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise InputError(path, None, "exists and is not a folder: choose another --out")
    if path.is_dir() and any(path.iterdir()) and not any(_owns(path / o) for o in owners):
        raise InputError(
            path,
            None,
            f"is a folder without dsim's {' or '.join(owners)}, not a dsim output: not "
            "replacing it (choose another --out, or empty it)",
        )


def _owns(marker: Path) -> bool:
    """Whether `marker` marks a dsim output: a JSON file that carries dsim's mark
    (`dsim_wrote`: a user's `summary.json`, whatever object it holds, does not), or a folder
    or table that exists."""
    return dsim_wrote(marker) if marker.suffix == ".json" else marker.exists()


def check_replaced_dir(
    path: str | Path, owner: str, ours: Collection[str], reads: Iterable[str | Path] = ()
) -> None:
    """An output folder dsim may swap in whole (`atomic_dir`), before any work: one that
    `check_output_dir` allows, holding no file the command `reads` (nor one's sidecar)
    anywhere inside it, even if dsim wrote it, no sub-folder that is not one of the names such
    a folder holds (`ours`), and no file outside them that carries no dsim mark (a user's
    notes beside a run): the swap would delete them."""
    path = Path(path)
    check_output_dir(path, owner)
    if not path.is_dir():
        return
    folder = path.resolve()
    inputs = (q.resolve() for r in reads for q in (Path(r), sidecar_of(r)))
    inside = next((q for q in inputs if q.is_relative_to(folder) and q.exists()), None)
    if inside is not None:  # the first named, before its sidecar
        raise InputError(
            inside,
            None,
            f"is a file this command reads, inside the output folder {path}, which is "
            "replaced as a whole: choose another --out",
        )
    for entry in sorted(path.iterdir()):
        if entry.name not in ours and (entry.is_dir() or not dsim_wrote(entry)):
            what = (
                "a folder this output does not hold"
                if entry.is_dir()
                else "a file dsim did not write"
            )
            raise InputError(
                path,
                None,
                f"holds {entry.name}, {what}: replacing the folder would delete it (move it "
                "out, or choose another --out)",
            )


def check_writable(folder: str | Path) -> None:
    """Make `folder` if needed and write and remove a file in it: a folder dsim cannot write
    is refused before any work, not after the first result."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(folder, None, f"cannot write here: {exc.strerror or exc}") from None
    _probe(folder)


@contextmanager
def atomic_dir(path: str | Path, owner: str, ours: Collection[str]) -> Iterator[Path]:
    """Build a directory under a temporary name beside `path`, then swap it in as a whole.

    An existing output folder (see `check_replaced_dir`, checked again here: a caller checks
    it before its work, and a file may have landed in the folder since) is replaced entirely:
    none of its old files linger, and a failure before the swap leaves it exactly as it was.
    """
    path = Path(path)
    check_replaced_dir(path, owner, ours)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as exc:
        raise InputError(path, None, f"cannot create the output folder: {exc.strerror}") from None
    tmp.chmod(0o777 & ~_UMASK)
    try:
        yield tmp
        if not path.exists():
            os.replace(tmp, path)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
        os.replace(path, old)  # a folder may be renamed over an empty one
        try:
            os.replace(tmp, path)
        except OSError:
            os.replace(old, path)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def staged_files(folder: str | Path) -> Iterator[Path]:
    """Write a set of files into a temporary folder beside `folder`, then move them all in.

    Everything that can fail (computing, plotting, a full disk) happens before the first move,
    so the files are replaced together: all new, or all as they were.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".staged.", dir=folder))
    try:
        yield tmp
        for item in sorted(tmp.iterdir()):
            os.chmod(item, 0o666 & ~_UMASK)
            os.replace(item, folder / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")

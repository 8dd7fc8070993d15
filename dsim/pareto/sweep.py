"""Sweep points and the executors that run them, with a resumable on-disk cache.

Each point is one RunSpec. Its result lives in DIR/points/<key>/ (summary.json with the spec,
requests.parquet), written by the worker through `write_run`, which moves the directory into
place only when complete: a killed sweep leaves finished points whole and nothing else, and the
next run skips them. The key hashes the full spec, the bytes of every file a simulation of it
reads (those named inside specs and sidecars included) and dsim's simulation code, so any
change behind an unchanged path invalidates the points that read it. Workers return only the
summary; per-request tables never travel back (with a Ray cluster, DIR and the inputs must be
on a filesystem every node sees).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import pandas as pd

from dsim.codehash import code_digest
from dsim.errors import InputError
from dsim.run import simulate, write_run
from dsim.run_inputs import input_files
from dsim.run_spec import RunSpec

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Point:
    policy: str
    load: float
    spec: RunSpec
    key: str


def make_points(specs: Iterable[tuple[str, float, RunSpec]]) -> list[Point]:
    digests: dict[str, str] = {}  # each input file is read once per sweep, not once per point
    return [Point(policy, load, spec, point_key(spec, digests)) for policy, load, spec in specs]


def point_key(spec: RunSpec, digests: dict[str, str] | None = None) -> str:
    """16 hex digits of SHA-256 over the spec, the contents of every file a simulation of it
    reads (`input_files`: files named inside specs and sidecars too) and dsim's simulation code
    (`code_digest`): change any of them behind an unchanged path and the point is run again.

    Files are hashed afresh on every call (`digests` only shares them between the points of one
    sweep): a cache keyed on size and mtime would miss an edit within one clock tick.
    """
    digests = {} if digests is None else digests
    for path in input_files(spec):
        if path not in digests:
            digests[path] = _file_digest(path)
    inputs = sorted(digests[path] for path in input_files(spec))  # not the paths: the spec
    # names them, and a sweep folder moved together with its inputs keeps its points
    blob = json.dumps(
        {"spec": spec.as_dict(), "inputs": inputs, "code": code_digest()}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def point_dir(out: Path, key: str) -> Path:
    return out / "points" / key


def read_summary(out: Path, key: str) -> dict | None:
    """The stored summary of a finished point, or None when the point has not finished."""
    path = point_dir(out, key) / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    for key in ("spec", "schema_version"):  # the run's, not a measurement
        summary.pop(key, None)
    return summary


def run_point(spec: RunSpec, directory: str) -> dict:
    """Simulate one point and store it; runs in a worker process, returns only the summary."""
    result = simulate(spec)
    write_run(result, spec, directory)
    return result.summary


Task = tuple[RunSpec, str]


def _local(tasks: list[Task], jobs: int) -> Iterator[tuple[int, dict]]:
    """In this process for one job (no pickling, easy to debug), else a spawn process pool.

    The pool is terminated however the loop ends (done, a failed point, Ctrl-C, SIGTERM): no
    worker outlives the sweep, and a point it was writing never lands (see `write_run`).
    """
    if jobs == 1:
        for i, task in enumerate(tasks):
            yield i, run_point(*task)
        return
    pool = get_context("spawn").Pool(jobs, initializer=_ignore_interrupts)
    try:
        yield from pool.imap_unordered(_run_indexed, enumerate(tasks))
    finally:
        pool.terminate()
        pool.join()


def _ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which terminates them (no traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_indexed(item: tuple[int, Task]) -> tuple[int, dict]:
    i, task = item
    return i, run_point(*task)


def _ray(tasks: list[Task], address: str | None, jobs: int) -> Iterator[tuple[int, dict]]:
    """One Ray task per point, on a local instance with `jobs` CPUs or the cluster at `address`."""
    import ray

    started = not ray.is_initialized()
    if started:
        cpus = None if address else jobs
        ray.init(address=address, num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(run_point)
        pending = {remote.remote(*task): i for i, task in enumerate(tasks)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            yield pending.pop(done[0]), ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


def check_executor(executor: str, jobs: int) -> None:
    """Fail on a bad executor choice before any work: unknown name, no ray, jobs < 1."""
    if executor not in EXECUTORS:
        raise InputError(None, None, f"--executor {executor!r}: expected one of {EXECUTORS}")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise InputError(None, None, "--executor ray needs ray: pip install 'dsim[ray]'")
    if jobs < 1:
        raise InputError(None, None, f"--jobs must be >= 1, got {jobs}")


def run_sweep(
    points: list[Point],
    out: Path,
    executor: str = "local",
    jobs: int = 2,
    address: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Run the unfinished points, then one row per point: policy, load, key, summary fields.

    Finished points are read back from disk, not recomputed. Rows follow `points` order, so the
    table does not depend on which worker finished first.
    """
    check_executor(executor, jobs)
    summaries = {p.key: read_summary(out, p.key) for p in points}
    todo = [p for p in points if summaries[p.key] is None]
    done = len(points) - len(todo)
    if progress:
        progress(done)
    tasks = [(p.spec, str(point_dir(out.resolve(), p.key))) for p in todo]
    results = _local(tasks, jobs) if executor == "local" else _ray(tasks, address, jobs)
    with closing(results):  # stop the workers now, not when the generator is collected
        for i, summary in results:
            summaries[todo[i].key] = summary
            done += 1
            if progress:
                progress(done)
    rows = [
        {"policy": p.policy, "load": p.load, "seed": p.spec.seed, "point": p.key}
        | {k: v for k, v in sorted(summaries[p.key].items()) if not isinstance(v, list | dict)}
        for p in points
    ]  # scalar summary fields, sorted: the same columns whether a point was run now or read back
    return pd.DataFrame(rows)

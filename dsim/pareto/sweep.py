"""Sweep points and the executors that run them, with a resumable on-disk cache.

Each point is one RunSpec. Its result lives in DIR/points/<key>/ (summary.json with the spec,
requests.parquet), written by the worker through `write_run`, which moves the directory into
place only when complete: a killed sweep leaves finished points whole and nothing else, and the
next run skips them. The key hashes the full spec plus the bytes of every input file it names,
so editing a profile or trace invalidates the points that read it. Workers return only the
summary; per-request tables never travel back (with a Ray cluster, DIR and the inputs must be
on a filesystem every node sees).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path

import pandas as pd

from dsim.acceptance.vllm_metrics import scrape_files
from dsim.errors import InputError
from dsim.run import RunSpec, simulate, write_run

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Point:
    policy: str
    load: float
    spec: RunSpec
    key: str


def make_points(specs: Iterable[tuple[str, float, RunSpec]]) -> list[Point]:
    return [Point(policy, load, spec, point_key(spec)) for policy, load, spec in specs]


def point_key(spec: RunSpec) -> str:
    """16 hex digits of SHA-256 over the spec and the contents of the files it reads."""
    named = [v for v in spec.as_dict().values() if isinstance(v, str)]
    files = [f for f in [*named, *scrape_files(spec.acceptance)] if Path(f).is_file()]
    inputs = {f: _file_digest(f, Path(f).stat().st_mtime_ns, Path(f).stat().st_size) for f in files}
    blob = json.dumps({"spec": spec.as_dict(), "inputs": inputs}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@lru_cache(maxsize=64)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """SHA-256 of a file; cached per (path, mtime, size), so a long session sees edits."""
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
    """In this process for one job (no pickling, easy to debug), else a spawn process pool."""
    if jobs == 1:
        for i, task in enumerate(tasks):
            yield i, run_point(*task)
        return
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"))
    try:
        futures = {pool.submit(run_point, *task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:  # on Ctrl-C or a failed point, drop the queued points instead of running them all
        pool.shutdown(wait=True, cancel_futures=True)


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

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
import os
import pickle
import queue
import signal
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import pandas as pd

from dsim.codehash import code_digest
from dsim.errors import InputError, Notice, WorkerLost
from dsim.policies.plugin import call_limit, set_call_limit
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


def _summary_file(out: Path, key: str) -> Path:
    """What marks a point finished (`write_run` moves its folder in whole)."""
    return point_dir(out, key) / "summary.json"


def unfinished(points: list[Point], out: Path) -> list[Point]:
    """The points without a stored summary in `out`: the ones a run of the sweep simulates."""
    return [p for p in points if not _summary_file(out, p.key).is_file()]


def read_summary(out: Path, key: str) -> dict | None:
    """The stored summary of a finished point, or None when the point has not finished."""
    path = _summary_file(out, key)
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    for key in ("spec", "format", "schema_version"):  # the run's, not a measurement
        summary.pop(key, None)
    return summary


def run_point(spec: RunSpec, directory: str) -> dict:
    """Simulate one point and store it; runs in a worker process, returns only the summary."""
    result = simulate(spec)
    write_run(result, spec, directory)
    return result.summary


Task = tuple[RunSpec, str]


def _local(tasks: list[Task], jobs: int) -> Iterator[tuple[int, dict]]:
    """In this process for one job (no pickling, easy to debug), else `jobs` spawned workers."""
    if jobs == 1:
        for i, task in enumerate(tasks):
            yield i, run_point(*task)
        return
    yield from _pool(tasks, jobs)


def _pool(tasks: list[Task], jobs: int) -> Iterator[tuple[int, dict]]:
    """Worker processes fed from a queue, each reporting the point it starts and its result.

    A worker that ends without a result (killed, or a plug-in that ended its process) ends the
    sweep with `WorkerLost` instead of a wait forever. The workers start with SIGINT ignored,
    so Ctrl-C is the parent's alone (one line, no worker tracebacks, even while they import),
    and they are terminated however the loop ends: no worker outlives the sweep, and a point
    one was writing never lands (see `write_run`).
    """
    ctx = get_context("spawn")
    todo, results = ctx.Queue(), ctx.Queue()
    for item in enumerate(tasks):
        todo.put(item)
    workers = [
        ctx.Process(target=_worker, args=(todo, results, call_limit()), daemon=True)
        for _ in range(min(jobs, len(tasks)))
    ]
    for _ in workers:
        todo.put(None)
    busy: dict[int, int] = {}  # worker pid -> the task it runs
    try:
        with _sigint_ignored():
            for w in workers:
                w.start()
        for _ in tasks:
            kind, a, b = _next_message(results, workers, busy, tasks)
            if kind == "error":
                raise b
            yield a, b
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.join()


def _next_message(
    results, workers: list, busy: dict[int, int], tasks: list[Task]
) -> tuple[str, int, object]:
    """The next ("done", task, summary) or ("error", task, exception); raises WorkerLost when
    a worker has ended with a point unfinished."""
    while True:
        try:
            kind, a, b = pickle.loads(results.get(timeout=0.5))
        except queue.Empty:
            for w in workers:
                if w.exitcode is not None and (w.exitcode != 0 or w.pid in busy):
                    task = busy.get(w.pid)
                    raise WorkerLost(_lost(w, None if task is None else tasks[task][0])) from None
            continue
        if kind == "start":
            busy[a] = b
            continue
        busy.pop(next((p for p, t in busy.items() if t == a), None), None)
        return kind, a, b


def _lost(worker, spec: RunSpec | None) -> str:
    code = worker.exitcode
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    which = "" if spec is None else f" running a point of policy {spec.policy!r}"
    return (
        f"a sweep worker {how}{which} (a plug-in policy that ends its process does this); "
        "finished points are kept, and a rerun resumes from them"
    )


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while workers are started: they inherit it (Python keeps an ignored SIGINT
    ignored at start-up), and a Ctrl-C in these milliseconds is dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _worker(todo, results, limit: float) -> None:
    """A worker's loop: points until the sentinel; each outcome sent back already pickled (an
    exception that cannot be pickled is sent as its text)."""
    _worker_setup(limit)
    while (item := todo.get()) is not None:
        i, task = item
        results.put(pickle.dumps(("start", os.getpid(), i)))
        try:
            message = ("done", i, run_point(*task))
        except Exception as exc:
            message = ("error", i, exc)
        try:
            payload = pickle.dumps(message)
        except Exception:
            payload = pickle.dumps(("error", i, RuntimeError(repr(message[2]))))
        results.put(payload)


def _worker_setup(limit: float) -> None:
    """A worker's settings: the parent's plug-in call limit, and no notes of its own (the
    parent reads every point's inputs first, `point_key`, and says each note once)."""
    set_call_limit(limit)
    warnings.simplefilter("ignore", Notice)


def _ray_point(spec: RunSpec, directory: str, limit: float) -> dict:
    _worker_setup(limit)
    return run_point(spec, directory)


def _ray(tasks: list[Task], address: str | None, jobs: int) -> Iterator[tuple[int, dict]]:
    """One Ray task per point, on a local instance with `jobs` CPUs or the cluster at `address`."""
    import ray

    started = not ray.is_initialized()
    if started:
        cpus = None if address else jobs
        ray.init(address=address, num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(_ray_point)
        pending = {remote.remote(*task, call_limit()): i for i, task in enumerate(tasks)}
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

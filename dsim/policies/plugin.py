"""Plug-in verification policies: `--policy module.path:ClassName` or `path/to/file.py:ClassName`.

The class is built as `ClassName()`, or `ClassName(sla_tps=X)` when an SLA is set, and must
follow the policy protocol of docs/policies.md. The adapter keeps the user's code from
harming a run in three ways:

- what it returns is checked (shape, integer type, range), so a wrong answer is one clear
  error, not a crash deep in the engine;
- what it receives are read-only copies (`conf`, `truth`, observe's arrays, an SPS function
  with no state of the engine's behind it), so it changes what the engine does only through
  the lengths it returns;
- every call into its code (the import, the constructor, its traits, `lengths`, `observe`, a
  copy) runs under `guard`: an exception, `sys.exit`, `os._exit`, a KeyboardInterrupt it
  raises or a call longer than the time limit becomes a `PluginError` naming the policy, the
  call and the exception (one line, exit 2; `DSIM_TRACEBACK=1` prints the traceback too).

A plug-in file is imported once per process (again only if its bytes change), however many
replicas, runs or sweep points build the policy.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from dsim.errors import InputError, Interrupted, PluginError
from dsim.policies.protocol import SPS, Traits, policy_traits, sps_at, sps_span

DEFAULT_CALL_LIMIT_S = 60.0  # a policy call slower than this is taken to hang
TRACEBACK_ENV = "DSIM_TRACEBACK"  # set to 1: a plug-in failure also prints its traceback
_limit = {"seconds": DEFAULT_CALL_LIMIT_S}
_MODULES: dict[tuple[str, str], ModuleType] = {}  # (file, sha256 of its bytes) -> module


def set_call_limit(seconds: float) -> None:
    """The time limit of one call into a plug-in (0: none), for this process."""
    if not seconds >= 0:
        raise InputError(None, None, f"--plugin-timeout must be >= 0 seconds, got {seconds!r}")
    _limit["seconds"] = float(seconds)


def call_limit() -> float:
    return _limit["seconds"]


class _TimeUp(BaseException):
    """SIGALRM during a plug-in call."""


class _Exited(BaseException):
    """The plug-in called os._exit (stands in for it while its code runs)."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


def _exit_instead(code: object = 0) -> None:
    raise _Exited(code)


def _alarm(signum, frame) -> None:
    raise _TimeUp()


@contextmanager
def _time_limit() -> Iterator[None]:
    """SIGALRM after the call limit; only on the main thread, where signals are delivered. The
    timer it replaces (an interrupt's retry, `dsim.interrupts`) is set again afterwards."""
    seconds = _limit["seconds"]
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _alarm)
    timer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        signal.setitimer(signal.ITIMER_REAL, *timer)


_inside = threading.local()


@contextmanager
def guard(policy: str, where: str) -> Iterator[None]:
    """Run user code of `policy` (doing `where`): anything but a returned value or the CLI's own
    interrupt becomes one PluginError. Nested guards leave the work to the outermost."""
    if getattr(_inside, "depth", 0):
        yield
        return
    _inside.depth, real_exit = 1, os._exit
    os._exit = _exit_instead  # os._exit cannot be caught; this stands in while the code runs
    try:
        with _time_limit():
            yield
    except (Interrupted, PluginError):
        raise
    except BaseException as exc:  # the user's code may fail in any way: one line, exit 2
        detail = "".join(traceback.format_exception(exc))
        raise PluginError(None, None, f"policy {policy!r}: {where} {_what(exc)}", detail) from None
    finally:
        os._exit, _inside.depth = real_exit, 0


def _what(exc: BaseException) -> str:
    """How the call ended, in one line, with the user's line that raised (when there is one)."""
    if isinstance(exc, _TimeUp):
        return f"did not return within {_limit['seconds']:g} s (--plugin-timeout)"
    if isinstance(exc, SystemExit | _Exited):
        call = "sys.exit" if isinstance(exc, SystemExit) else "os._exit"
        return f"called {call}({exc.code!r}): a policy must return, not end the process"
    message = " ".join(str(exc).split())
    text = f"raised {type(exc).__name__}" + (f": {message[:300]}" if message else "")
    return text + _user_line(exc)


def _user_line(exc: BaseException) -> str:
    from dsim.codehash import user_file  # a leaf: the standard library only

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if user_file(f.filename)]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


@dataclass(frozen=True)
class PluginRef:
    """A plug-in spec read once: the module or FILE.py it imports and the class it builds."""

    target: str
    class_name: str

    @staticmethod
    def parse(spec: str) -> PluginRef | None:
        """`TARGET:CLASS` split at its last colon; None unless both parts are there and CLASS is
        a Python name (whether TARGET is a built-in's kind is the registry's question)."""
        target, _, class_name = spec.rpartition(":")
        return PluginRef(target, class_name) if target and class_name.isidentifier() else None

    @property
    def spec(self) -> str:
        return f"{self.target}:{self.class_name}"


def _import(ref: PluginRef) -> ModuleType:
    target, spec = ref.target, ref.spec
    if not target.endswith(".py"):
        with guard(spec, f"cannot import {target!r}; the import"):
            return importlib.import_module(target)
    path = Path(target)
    if path.is_dir():
        raise InputError(target, None, "is a folder, not a policy file (FILE.py:CLASS)")
    if not path.is_file():
        raise InputError(target, None, "policy file not found")
    source = path.read_bytes()
    key = (str(path.resolve()), hashlib.sha256(source).hexdigest())
    if key not in _MODULES:
        name = f"dsim_policy_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses in the file look their module up here
        with guard(spec, f"cannot import {target!r}; the import"):
            module_spec.loader.exec_module(module)
        _MODULES[key] = module
    return _MODULES[key]


def plugin_maker(ref: PluginRef, sla_tps: float | None = None) -> Callable[[], PlugIn]:
    """Import `ref`'s module once; the maker builds a fresh checked instance per call."""
    cls = getattr(_import(ref), ref.class_name, None)
    if cls is None:
        raise InputError(
            None, None, f"policy {ref.spec!r}: {ref.target!r} has no {ref.class_name!r}"
        )
    return lambda: _build(cls, ref, sla_tps)


def _build(cls: type, ref: PluginRef, sla_tps: float | None) -> PlugIn:
    spec = ref.spec
    args = "" if sla_tps is None else f"sla_tps={sla_tps}"
    with guard(spec, f"{ref.class_name}({args})"):
        policy = cls() if sla_tps is None else cls(sla_tps=sla_tps)
    with guard(spec, "reading its lengths and drafts"):
        usable = callable(getattr(policy, "lengths", None)) and hasattr(policy, "drafts")
    if not usable:
        raise InputError(
            None,
            None,
            f"policy {spec!r}: needs a lengths(conf, sps, truth) method and a drafts attribute "
            "(docs/policies.md)",
        )
    return PlugIn(policy, spec)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only copy: a write raises, and one made writable again changes only the copy."""
    out = np.array(a)
    out.flags.writeable = False
    return out


def _rate_view(sps: SPS) -> Callable[[np.ndarray], np.ndarray]:
    """SPS as a plug-in sees it: a function (with `span`) returning fresh read-only arrays."""

    def rate(b):
        return _frozen(sps_at(sps, np.asarray(b)))

    rate.span = lambda start, stop: _frozen(sps_span(sps, start, stop))
    return rate


@dataclass
class PlugIn:
    """A user's policy behind the protocol checks, its traits read once with the protocol's
    defaults filled in (`policy_traits`)."""

    inner: object
    name: str
    traits: Traits = field(init=False, repr=False)

    def __post_init__(self) -> None:
        with guard(self.name, "reading its drafts, synchronous and observe attributes"):
            self.traits = policy_traits(self.inner)

    def __deepcopy__(self, memo: dict) -> PlugIn:
        with guard(self.name, "copying the policy object"):
            return PlugIn(copy.deepcopy(self.inner, memo), self.name)

    @property
    def drafts(self) -> bool:
        return self.traits.drafts

    @property
    def synchronous(self) -> bool:
        return self.traits.synchronous

    def lengths(self, conf: np.ndarray, sps: SPS, truth: np.ndarray | None) -> np.ndarray:
        seen = None if truth is None else _frozen(truth)
        with guard(self.name, "lengths"):
            out = np.asarray(self.inner.lengths(_frozen(conf), _rate_view(sps), seen))
        r, gamma = conf.shape
        if (
            out.shape != (r,)
            or not np.issubdtype(out.dtype, np.integer)
            or (out.size and (out.min() < 0 or out.max() > gamma))
        ):
            raise InputError(
                None,
                None,
                f"policy {self.name!r} returned {out.dtype} of shape {out.shape}; "
                f"expected {r} integers in 0..{gamma}",
            )
        return out.astype(np.int64)

    def observe(self, lengths: np.ndarray, accepted: np.ndarray) -> None:
        if self.traits.observe is not None:
            with guard(self.name, "observe"):
                self.traits.observe(_frozen(lengths), _frozen(accepted))

"""Interrupts: a signal becomes one `Interrupted` that reaches the command line even where the
code it lands in drops or wraps the exception (a ctypes callback, numba's dispatcher)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import pytest

from dsim.errors import Interrupted
from dsim.interrupts import RETRY_S, Interrupts


def _wait(seconds: float) -> None:
    """Ordinary Python work in a frame of its own (the entering frame is never raised in)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(RETRY_S / 10)


def _signal_inside_a_ctypes_callback() -> None:
    """A signal that lands in a ctypes callback: ctypes prints what it raises and drops it."""

    def inside() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        _wait(RETRY_S)

    ctypes.CFUNCTYPE(None)(inside)()


def _dropping(work) -> int:
    """Run `work`, dropping every Interrupted it raises (as a careless library would)."""
    dropped = 0
    try:
        work()
    except Interrupted:
        dropped += 1
    return dropped


def test_an_interrupt_dropped_by_a_ctypes_callback_is_raised_again_silently(monkeypatch):
    printed = []  # what the unraisable hook (which prints dropped exceptions) was handed
    monkeypatch.setattr(sys, "unraisablehook", lambda u: printed.append(u.exc_value))
    with Interrupts() as interrupts:
        with pytest.raises(Interrupted) as caught:
            _signal_inside_a_ctypes_callback()
            _wait(20 * RETRY_S)
        assert interrupts.stop() == signal.SIGINT
    assert caught.value.signum == signal.SIGINT
    assert printed == []  # the dropped exception was not printed


def test_an_interrupt_a_library_catches_is_raised_again_until_stopped():
    with Interrupts() as interrupts:
        assert _dropping(lambda: (os.kill(os.getpid(), signal.SIGTERM), _wait(1))) == 1
        with pytest.raises(Interrupted):
            _wait(20 * RETRY_S)
        interrupts.stop()
        _wait(5 * RETRY_S)  # stopped: no more raising
    assert interrupts.signum == signal.SIGTERM


def test_handlers_are_restored_and_a_quiet_run_sees_no_signal():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGALRM)
    with Interrupts() as interrupts:
        assert signal.getsignal(signal.SIGINT) != before[0]
        _wait(2 * RETRY_S)
    assert interrupts.signum is None
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGALRM)) == before

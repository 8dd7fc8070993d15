"""SIGINT and SIGTERM as one `Interrupted` exception that reaches the command line, whatever
code the signal lands in.

A Python signal handler raises in the frame that runs when the signal arrives, and some frames
lose what it raises: a ctypes callback (llvmlite's object cache during numba's first compile)
prints the exception (sys.unraisablehook) and drops it, and numba's dispatcher turns it into a
SystemError. So the unraisable hook stays silent about `Interrupted`, and the handler remembers
the first signal and raises it again every RETRY_S seconds (a SIGALRM timer) until the command
line has caught it and called `stop`. It never raises in the frame that entered it (the command
line's own, which is catching it) nor in `stop`."""

from __future__ import annotations

import signal
import sys
from types import FrameType, TracebackType

from dsim.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)
RETRY_S = 0.05


class Interrupts:
    """While entered (in the main thread): SIGINT and SIGTERM raise `Interrupted`, again and
    again until `stop`; a second signal does not cut the cleanup short. Elsewhere (an embedding
    caller's thread) the caller's handlers stay and `signum` stays None."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._settled = False
        self._quiet: set = set()
        self._hook = sys.unraisablehook

    def __enter__(self) -> Interrupts:
        self._quiet = {sys._getframe(1).f_code, Interrupts.stop.__code__}
        self._hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        try:
            for sig in (*SIGNALS, signal.SIGALRM):
                self._previous[sig] = signal.signal(sig, self._raise)
        except ValueError:  # not the main thread: keep the caller's handlers
            self._restore()
        return self

    def __exit__(
        self, kind: type | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._restore()
        sys.unraisablehook = self._hook

    def _unraisable(self, unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):  # dropped: it is raised again
            self._hook(unraisable)

    def stop(self) -> int | None:
        """Stop raising; the signal that arrived, if one did."""
        self._settled = True
        if self.signum is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return self.signum

    def _raise(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            signal.setitimer(signal.ITIMER_REAL, RETRY_S, RETRY_S)
        if not self._settled and (frame is None or frame.f_code not in self._quiet):
            raise Interrupted(self.signum)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

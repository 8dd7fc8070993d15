"""The one exception that bad input raises; the CLI turns it into one line and exit code 2."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad user input: names the file, the row (when there is one) and the problem."""

    def __init__(self, path: str | Path | None, row: int | None, problem: str) -> None:
        self.path = str(path) if path is not None else None
        self.row = row
        self.problem = problem
        super().__init__(path, row, problem)  # re-creatable from args (simpy re-raises so)

    def __str__(self) -> str:
        where = [p for p in (self.path, None if self.row is None else f"row {self.row}") if p]
        return ": ".join([*where, self.problem])

    def __reduce__(self):  # rebuilt from its three parts when a worker process sends it back
        return type(self), (self.path, self.row, self.problem)


class Notice(UserWarning):
    """Something the user should know about their input that does not stop the command: the
    CLI prints it as one `dsim: note:` line after a command that succeeds."""


class PluginError(InputError):
    """A user's plug-in failed (raised, exited, timed out): the user's code is input, so it is
    one line and exit 2; `detail` keeps the traceback for `DSIM_TRACEBACK=1`."""

    def __init__(self, path: str | Path | None, row: int | None, problem: str, detail: str = ""):
        super().__init__(path, row, problem)
        self.detail = detail
        self.args = (path, row, problem, detail)  # re-created from args, detail kept

    def __reduce__(self):
        return type(self), (self.path, self.row, self.problem, self.detail)


class WorkerLost(RuntimeError):
    """A sweep's worker process ended without reporting its point (killed, or its code exited
    the process): the sweep stops; finished points are kept."""


class SimulationStuck(RuntimeError):
    """The engine stopped advancing time (a bug or an input no check caught): names the state."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; the CLI exits 128 + signal number with one line."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signum)

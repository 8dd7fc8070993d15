"""The dsim command line: thin wrappers that parse, validate, call one function, map errors."""

from __future__ import annotations

import errno
import os
import signal
import sys
import warnings
from typing import Any, NoReturn, get_args

import typer

from dsim import run_commands
from dsim.acceptance import commands as acceptance_commands
from dsim.checks import finite
from dsim.errors import InputError, Notice, SimulationStuck, WorkerLost
from dsim.hardware import commands as hardware_commands
from dsim.interrupts import Interrupts
from dsim.models import commands as models_commands
from dsim.pareto import commands as pareto_commands
from dsim.plan import commands as plan_commands
from dsim.policies import commands as policy_commands
from dsim.policies.plugin import TRACEBACK_ENV
from dsim.real import commands as real_commands
from dsim.validation import commands as validation_commands

app = typer.Typer(
    help="dsim: design and compare speculative-decoding verification schedulers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for module in (
    run_commands,
    real_commands,
    validation_commands,
    hardware_commands,
    acceptance_commands,
    models_commands,
    pareto_commands,
    plan_commands,
    policy_commands,
):
    module.register(app)


def _numeric_kind(param) -> type | None:
    """float or int when a parameter takes one (optionally None), else None."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    kinds = [k for k in (get_args(annotation) or (annotation,)) if k is not type(None)]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (float, int) else None


def _checked(kind: type, callback):
    """A parameter callback: floats finite (NaN slips past checks like `x <= 0`), ints >= 0
    (every dsim integer option counts something); then the parameter's own callback."""

    def check(ctx, param, value):
        if value is not None and not (finite(value) and (kind is float or value >= 0)):
            rule = "a finite number" if kind is float else "a non-negative integer"
            raise typer.BadParameter(f"expected {rule}, got {value!r}", ctx=ctx, param=param)
        return value if callback is None else callback(ctx, param, value)

    return check


def _one_name(command) -> None:
    """Refuse an option given under two of its names (`--max-seqs 4 --max-num-seqs 8`, as a
    sweep's [run] refuses the pair): click would keep the last without a word. The same name
    twice stays click's rule, the last wins (a script appending an override)."""
    parse = command.parse_args

    def parse_args(ctx, args):
        for param in command.params:
            if param.param_type_name != "option" or len(param.opts) < 2:
                continue
            used = [o for o in param.opts if any(a == o or a.startswith(f"{o}=") for a in args)]
            if len(used) > 1:
                message = f"{' and '.join(used)} name the same setting: give one"
                raise typer.BadParameter(message, ctx=ctx)
        return parse(ctx, args)

    command.parse_args = parse_args


def harden(command) -> Any:
    """Check every float and int parameter of `command` and its subcommands, so options added
    later are covered without anyone remembering to check them; one name per option."""
    for param in command.params:
        kind = _numeric_kind(param)
        if kind is not None:
            param.callback = _checked(kind, param.callback)
    _one_name(command)
    for sub in getattr(command, "commands", {}).values():
        harden(sub)
    return command


# Input errors: a path the user named cannot be used as asked.
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR}
_PATH_ERRNOS |= {errno.EEXIST, errno.ENOENT, errno.ENAMETOOLONG, errno.ENOTEMPTY}


class _Exit(Exception):
    """How a command ends when it does not return: its exit code and its one line (or none)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message


def _fail(message: str, code: int) -> NoReturn:
    raise _Exit(code, f"dsim: {message}")


def main() -> None:
    """Entry point. Exit codes: 0 done; 1 the run failed (disk full, engine stuck, a sweep's
    worker lost); 2 bad input (one line naming the file, row and problem; a plug-in policy
    that fails is input too, with its traceback when DSIM_TRACEBACK=1); 130 / 143 interrupted
    by SIGINT / SIGTERM at any moment, a first compile included (one line, no final outputs
    written: whatever the interrupted code raised instead is dropped). Warnings (torch's, say)
    are shown after a command that succeeds and dropped when it fails, so an error stays one
    line; dsim's own notices (`dsim.errors.Notice`) are one `dsim: note: ` line each."""
    end = _Exit(0)
    with Interrupts() as interrupts, warnings.catch_warnings(record=True) as caught:
        try:
            code = _dispatch()
            end = _Exit(code if isinstance(code, int) else 0)
        except _Exit as exc:
            end = exc
        except BaseException:
            if interrupts.stop() is None:
                raise
        finally:
            interrupts.stop()
    signum = interrupts.signum
    if signum is not None:
        end = _Exit(128 + signum, f"dsim: interrupted by {signal.Signals(signum).name}")
    elif not end.code:
        notes = dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, Notice))
        for note in notes:
            print(f"dsim: note: {note}", file=sys.stderr)
        for w in caught:
            if not issubclass(w.category, Notice):
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if end.message:
        print(end.message, file=sys.stderr)
    if end.code:
        sys.exit(end.code)


def _dispatch() -> Any:
    """Run the command line; every failure becomes one line on stderr and its exit code."""
    try:
        return harden(typer.main.get_command(app)).main(prog_name="dsim", standalone_mode=False)
    except InputError as err:
        if os.environ.get(TRACEBACK_ENV) == "1" and getattr(err, "detail", ""):
            print(err.detail, file=sys.stderr, end="")  # a plug-in's own traceback, on request
        _fail(f"error: {err}", 2)
    except typer.TyperException as exc:  # typer's usage errors: a bad or missing option
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
        else:
            _fail(f"error: {exc.format_message()} (see --help)", exc.exit_code)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail("aborted", 1)
    except SimulationStuck as exc:
        _fail(f"error: simulation stuck: {exc}", 1)
    except WorkerLost as exc:
        _fail(f"error: {exc}", 1)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"error: {where}{exc.strerror or exc}", 2 if exc.errno in _PATH_ERRNOS else 1)

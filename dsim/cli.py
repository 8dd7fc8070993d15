"""The dsim command line: thin wrappers that parse, validate, call one function, map errors."""

from __future__ import annotations

import sys

import typer

from dsim import run_commands
from dsim.acceptance import commands as acceptance_commands
from dsim.errors import InputError
from dsim.hardware import commands as hardware_commands
from dsim.models import commands as models_commands
from dsim.pareto import commands as pareto_commands
from dsim.real import commands as real_commands

app = typer.Typer(
    help="dsim: design and compare speculative-decoding verification schedulers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for module in (
    run_commands,
    real_commands,
    hardware_commands,
    acceptance_commands,
    models_commands,
    pareto_commands,
):
    module.register(app)


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2."""
    try:
        app(standalone_mode=False)
    except InputError as err:
        print(f"dsim: error: {err}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("dsim: aborted", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # click usage errors carry their own exit code
        code = getattr(exc, "exit_code", None)
        if code is not None and hasattr(exc, "show"):
            exc.show()
            sys.exit(code)
        raise

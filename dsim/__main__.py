"""The process's entry (`dsim`, `python -m dsim`): a signal that arrives while the command line
is still being imported ends the process at once with its one line (nothing is written yet);
from then on the command line handles signals itself (`dsim.interrupts`)."""

import os
import signal
import sys


def _during_imports(signum: int, frame) -> None:
    sys.stderr.write(f"dsim: interrupted by {signal.Signals(signum).name}\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _during_imports)
    from dsim.cli import main as command_line

    command_line()


if __name__ == "__main__":
    main()

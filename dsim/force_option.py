"""`--force`: the one option that lets a command replace an output file dsim did not write
(`dsim.fileio.check_output_file` states the rule)."""

from __future__ import annotations

import typer

FORCE = typer.Option(
    False,
    "--force",
    help="Replace the output file (and its NAME.json) even if dsim did not write it.",
)

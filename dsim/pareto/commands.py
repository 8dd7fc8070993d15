"""Placeholder: replaced by this area's commands."""

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the dsim app."""

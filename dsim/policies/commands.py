"""CLI for policy design: `dsim check-policy` (the checks live in dsim/policies/check.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dsim.lab import require_lab
from dsim.policies.plugin import DEFAULT_CALL_LIMIT_S, TRACEBACK_ENV, set_call_limit
from dsim.policies.registry import parse_policy, policy_usage
from dsim.size_gate import YES

# The time limit of one call into a plug-in policy, for every command that runs policies.
PLUGIN_TIMEOUT = typer.Option(
    DEFAULT_CALL_LIMIT_S,
    "--plugin-timeout",
    help="Seconds one call into a plug-in policy may take before the run stops with an error "
    f"(0: no limit). A failing plug-in is one line; {TRACEBACK_ENV}=1 adds its traceback.",
)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the dsim app."""
    app.command("check-policy")(check_policy)


def check_policy(
    spec: Annotated[str, typer.Argument(help=f"The policy: {policy_usage()} (docs/policies.md).")],
    trials: Annotated[
        int, typer.Option(help="Random instances per (requests, gamma) size and SLA setting.")
    ] = 30,
    sequences: Annotated[
        int, typer.Option(help="Toy sequences per chi-square test (0 skips the test).")
    ] = 24000,
    seed: Annotated[int, typer.Option(help="Seed of the instances and of the toy decoding.")] = 0,
    plugin_timeout: float = PLUGIN_TIMEOUT,
    yes: bool = YES,
) -> None:
    """Check that a verification policy is lossless: the property on random instances, then a
    chi-square test of its decoded output on a toy vocabulary. Exit code 0: pass; 1: fail
    (with the smallest counterexample found); 2: the policy cannot be loaded, fails or hangs,
    or there is nothing to check."""
    from dsim.errors import InputError
    from dsim.policies.check import (
        BATCH,
        MAX_GAMMA,
        MAX_REQUESTS,
        SLA_FACTORS,
        TOY_SETTINGS,
        check_outcome,
        check_property,
        instance_count,
    )
    from dsim.size_gate import SECONDS_PER_INSTANCE, SECONDS_PER_TOY_SEQUENCE, check_time

    set_call_limit(plugin_timeout)
    if trials == 0 and sequences == 0:
        raise InputError(None, None, "--trials 0 --sequences 0 checks nothing: give either")
    if 0 < sequences < BATCH:
        raise InputError(None, None, f"--sequences: 0 (no test) or at least {BATCH}")
    if sequences > 0:  # the toy decoding runs on torch; the property check does not
        require_lab("check-policy's chi-square test (--sequences 0 skips it)", ("torch",))

    def make(sla):
        return parse_policy(spec, sla)

    make(None)  # a policy that cannot load fails here, with exit code 2
    factors = SLA_FACTORS
    try:
        make(1.0)
    except InputError as err:
        factors = (None,)
        typer.echo(f"note: no SLA settings ({err})")
    if spec == "oracle":
        raise InputError(None, None, "oracle is a clairvoyant bound (it sees the outcome), not a "
                         "policy an engine can run; there is nothing to check")  # fmt: skip
    instances = instance_count(trials, factors)
    toy = sequences * len(TOY_SETTINGS)
    check_time(
        f"this check is {instances:,} random instances and {toy:,} toy sequences",
        instances * SECONDS_PER_INSTANCE + toy * SECONDS_PER_TOY_SEQUENCE,
        yes,
    )
    runs, found = check_property(make, trials, seed, factors)
    sizes = f"requests 1..{MAX_REQUESTS}, gamma 2..{MAX_GAMMA}"
    if found is not None:
        typer.echo(f"property: FAIL after {runs} random instances ({sizes})")
        typer.echo(found.describe())
        typer.echo(f"FAIL: {spec} is not lossless")
        sys.exit(1)  # typer.Exit would be swallowed by cli.main's standalone_mode=False
    typer.echo(f"property: pass on {runs} random instances ({sizes}; SLA {len(factors)} settings)")
    failed = False
    if sequences > 0:
        for profile, sla, p in check_outcome(make, sequences, seed + 3):
            ok = p > 1e-3
            failed |= not ok
            sla_text = "none" if sla is None else f"{sla} tok/s"
            typer.echo(
                f"chi-square: {sequences} toy sequences, profile {profile}, SLA {sla_text}: "
                f"p = {p:.3g} ({'pass' if ok else 'FAIL'}, p > 0.001 passes)"
            )
    typer.echo(f"{'FAIL' if failed else 'PASS'}: {spec}")
    if failed:
        sys.exit(1)

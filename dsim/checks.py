"""The one check for a number a user gives: finite and in range, or an InputError.

Comparisons such as `x <= 0` are False for NaN, so a check written that way lets NaN through
(and a NaN rate or step then stops simulated time). Every numeric option, spec parameter and
config value goes through `check_number`, which asks for finiteness first.
"""

from __future__ import annotations

import math
import operator
from pathlib import Path

from dsim.errors import InputError

_BOUNDS = (("gt", ">", operator.gt), ("ge", ">=", operator.ge))
_UPPER = (("lt", "<", operator.lt), ("le", "<=", operator.le))


def check_number(
    value: object,
    name: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    integer: bool = False,
    where: str | Path | None = None,
) -> float:
    """`value` if it is a finite real number within the given bounds; else an InputError."""
    limits = {"gt": gt, "ge": ge, "lt": lt, "le": le}
    wanted = [
        f"{sym} {_fmt(limits[key])}"
        for key, sym, _ in (*_BOUNDS, *_UPPER)
        if limits[key] is not None
    ]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and finite(value)
    ok = ok and all(
        limits[key] is None or test(value, limits[key]) for key, _, test in (*_BOUNDS, *_UPPER)
    )
    ok = ok and (not integer or float(value).is_integer())
    if not ok:
        kind = "an integer" if integer else "a finite number"
        rule = f" {' and '.join(wanted)}" if wanted else ""
        raise InputError(where, None, f"{name} must be {kind}{rule}, got {value!r}")
    return value


def finite(value: float) -> bool:
    """Finite; an integer too large for a float (10**400) is not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _fmt(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def check_sizes(sizes: tuple[int, ...], what: str) -> tuple[int, ...]:
    """`sizes` as positive integers in increasing order (InputError naming `what` otherwise)."""
    ok = bool(sizes) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes
    )
    if not ok or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        raise InputError(
            None, None, f"{what} must be positive integers in increasing order, got {list(sizes)}"
        )
    return sizes

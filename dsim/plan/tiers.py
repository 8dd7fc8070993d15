"""SLA tiers: named tail SLAs (dsim.sla's keys and bounds), each judged on a plan's points
with the sweeps' rule: a point meets a tier when it is stable and keeps every bound, in every
seed (docs/pareto.md, What an excluded point does)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsim import sla as tail_sla
from dsim import spec_grammar
from dsim.errors import InputError

USAGE = f"NAME:KEY=VALUE[,KEY=VALUE...] with KEY=VALUE as {tail_sla.USAGE}"


@dataclass(frozen=True)
class Tier:
    name: str
    sla: tail_sla.Sla

    def met(self, summary: dict) -> bool:
        """Stable (the overload rule) and every bound kept."""
        return not bool(summary["unstable"]) and not self.sla.missed(summary)

    def usage(self, summary: dict) -> float:
        """The tightest bound's share of its limit at `summary` (value / limit for a ceiling,
        limit / value for a floor): below 1 leaves room, above 1 misses by that factor; 0 for
        a tier of stability alone; inf when unstable or unmeasured."""
        if bool(summary["unstable"]):
            return math.inf
        worst = 0.0
        for b in self.sla.bounds:
            value = float(summary[b.key])
            if math.isnan(value) or value <= 0:
                return math.inf
            worst = max(worst, b.limit / value if b.at_least else value / b.limit)
        return worst

    def shortfall(self, summary: dict) -> float:
        """How far `summary` is from the tier: the largest factor by which a bound is missed
        (1: met; inf: unstable or unmeasured)."""
        return max(1.0, self.usage(summary))

    def missed(self, summary: dict) -> str:
        """What `summary` misses, with its values (`unstable`, `tps_p50 < 40 (36.4)`)."""
        if bool(summary["unstable"]):
            return "unstable (overload rule)"
        return "; ".join(
            f"{m} ({float(summary[m.split()[0]]):.4g})" for m in self.sla.missed(summary)
        )

    @property
    def bounds(self) -> str:
        return ", ".join(map(str, self.sla.bounds)) or "stable only"


def parse_tier(text: str) -> Tier:
    """`--tier NAME:KEY=VALUE,...` (a NAME alone: stability only), its bounds read by the SLA
    reader of `dsim run --sla` (a key unknown or given twice is refused there)."""
    name, sep, body = text.partition(":")
    name = name.strip()
    if not name or "=" in name:
        raise InputError(None, None, f"--tier {text!r}: expected {USAGE}")
    where = f"--tier {text!r}"
    # each part read alone, so a key given twice reaches the SLA's own rule (not the later wins)
    pairs = [
        pair
        for part in (spec_grammar.split_top(body) if sep else [])
        for pair in spec_grammar.key_values(part, where, "KEY=VALUE").items()
    ]
    bounds = [(k, spec_grammar.number(v, f"{where}: {k}", gt=0)) for k, v in pairs]
    try:
        return Tier(name, tail_sla.read(bounds))
    except InputError as exc:
        raise InputError(None, None, f"{where}: {exc}") from None


def parse_tiers(texts: list[str]) -> tuple[Tier, ...]:
    """At least one tier (the command refuses a name given twice, as every list option)."""
    if not texts:
        raise InputError(None, None, f"give at least one --tier {USAGE}")
    return tuple(parse_tier(t) for t in texts)

"""Every policy name in one table: parsing, the list of names, the error and the CLI help read it.

A spec is `KIND` or `KIND:ARG` for a built-in, else a plug-in `MODULE:CLASS` / `FILE.py:CLASS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dsim.errors import InputError
from dsim.policies.builtin import DSpark, DSparkAsync, Fixed, Goodput, Oracle, Threshold
from dsim.policies.plugin import PluginRef, plugin_maker
from dsim.policies.protocol import Policy
from dsim.policies.vllm_adaptive import parse as parse_vllm_adaptive
from dsim.spec_grammar import name_arg, number

# (spec, the text after the kind's colon, SLA) -> a fresh policy, or None if ARG does not fit
Build = Callable[[str, str, float | None], Policy | None]


@dataclass(frozen=True)
class Entry:
    """One built-in kind. `usage` is how help and errors spell it (`fixed:K`); with `claims`,
    `KIND:ANYTHING` that does not parse is an error, never a plug-in named after the kind."""

    usage: str
    build: Build
    claims: bool = True
    reads_sla: bool = False  # whether --sla-tps changes what it does

    @property
    def kind(self) -> str:
        return self.usage.partition(":")[0]


def _fixed(k: int) -> Build:
    return lambda spec, arg, sla: None if arg else Fixed(k, spec)


def _fixed_k(spec: str, arg: str, sla: float | None) -> Fixed | None:
    try:
        k = int(arg)
    except ValueError:
        return None
    return Fixed(k, spec) if k >= 0 else None


def _threshold(spec: str, arg: str, sla: float | None) -> Threshold:
    return Threshold(number(arg, f"policy {spec}: h", ge=0, le=1), spec)


def _with_sla(cls: type[Goodput | DSpark | DSparkAsync]) -> Build:
    return lambda spec, arg, sla: None if arg else cls(sla_tps=sla)


def _vllm_adaptive(spec: str, arg: str, sla: float | None) -> Policy:
    return parse_vllm_adaptive(spec, arg)


def _oracle(spec: str, arg: str, sla: float | None) -> Oracle | None:
    return Oracle() if spec == "oracle" else None


BUILT_INS = (
    Entry("ar", _fixed(0), claims=False),
    Entry("mtp1", _fixed(1), claims=False),
    Entry("fixed:K", _fixed_k),
    Entry("threshold:h", _threshold),
    Entry("goodput", _with_sla(Goodput), reads_sla=True),
    Entry("dspark", _with_sla(DSpark), reads_sla=True),
    Entry("dspark-async", _with_sla(DSparkAsync), reads_sla=True),
    Entry("vllm-adaptive", _vllm_adaptive),
    Entry("oracle", _oracle, claims=False),
)
_BY_KIND = {entry.kind: entry for entry in BUILT_INS}
PLUGIN_FORMS = ("MODULE:CLASS", "FILE.py:CLASS")
POLICY_NAMES = (*(entry.usage for entry in BUILT_INS), *PLUGIN_FORMS)


def policy_usage() -> str:
    """The `--policy` help's list of names."""
    return " | ".join(POLICY_NAMES)


def policy_maker(spec: str, sla_tps: float | None = None) -> Callable[[], Policy]:
    """Read `spec` once (a plug-in's module is imported here, once per process) into a maker
    of fresh policy objects, one per replica (policies may keep per-run state); a bad spec
    fails now."""
    kind, arg = name_arg(spec)
    entry = _BY_KIND.get(kind)
    if entry is not None and entry.build(spec, arg, sla_tps) is not None:
        return lambda: entry.build(spec, arg, sla_tps)
    ref = plugin_ref(spec)
    if ref is not None:
        return plugin_maker(ref, sla_tps)
    raise InputError(None, None, f"unknown policy {spec!r}; known: {', '.join(POLICY_NAMES)}")


def plugin_ref(spec: str) -> PluginRef | None:
    """The plug-in `spec` names; None for a built-in (a claimed kind's `KIND:ANYTHING`
    included) or no policy at all."""
    kind, arg = name_arg(spec)
    entry = _BY_KIND.get(kind)
    if entry is not None and (entry.claims or entry.build(spec, arg, None) is not None):
        return None
    return PluginRef.parse(spec)


def parse_policy(spec: str, sla_tps: float | None = None) -> Policy:
    """A fresh policy object from its name, or a plug-in `module.path:ClassName` /
    `file.py:ClassName` (docs/policies.md)."""
    return policy_maker(spec, sla_tps)()


def _built_in(spec: str) -> Entry | None:
    """The built-in entry `spec` names, or None for a plug-in."""
    kind, arg = name_arg(spec)
    entry = _BY_KIND.get(kind)
    return entry if entry is not None and entry.build(spec, arg, None) is not None else None


def reads_sla(spec: str) -> bool:
    """Whether `--sla-tps` reaches policy `spec`: goodput, dspark, dspark-async and every
    plug-in (built as `ClassName(sla_tps=X)`) take it; the other built-ins ignore it."""
    entry = _built_in(spec)
    return entry is None or entry.reads_sla


def sla_users() -> str:
    """The names `--sla-tps` reaches, for messages."""
    return ", ".join(entry.usage for entry in BUILT_INS if entry.reads_sla) + " and plug-ins"


def check_gamma(spec: str, policy: Policy, gamma: int) -> None:
    """Refuse a fixed length beyond the drafts a round proposes: it would run as `fixed:gamma`
    while its results carry the longer name."""
    if isinstance(policy, Fixed) and policy.k > gamma:
        raise InputError(
            None,
            None,
            f"policy {spec} verifies {policy.k} drafts a round but gamma (drafts proposed per "
            f"round) is {gamma}: raise gamma to {policy.k} or use fixed:{gamma}",
        )

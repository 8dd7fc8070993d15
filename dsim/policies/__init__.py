"""Verification policies: each round, how many drafts each request verifies.

- `protocol`: the `Policy` protocol, its defaults (`policy_traits`) and the SPS type;
- `schedule`: the dspark machinery (candidates, throughput curve, SLA stop, Algorithm 1);
- `builtin`: the built-in policies; `vllm_adaptive`: vLLM's adaptive verification;
  `plugin`: users' own, behind checks;
- `registry`: the names, `parse_policy` and the help text;
- `check`: the losslessness checks behind `dsim check-policy`; `commands`: that command.

These modules import numpy, `dsim.errors`, `dsim.checks`, `dsim.spec_grammar`, `dsim.tables`
(`vllm-adaptive`'s cost file), `dsim.codehash` (a leaf
that says which files are the user's, for a plug-in's error line), `dsim.lab` (a leaf that
says which extra the chi-square test needs) and `dsim.size_gate` (a leaf: `dsim check-policy`
is gated as every long command is) only, never the engine, run,
pareto, real or cluster layers (the engine imports `protocol`); one exception: `check`'s
outcome test decodes with the real sampling code, `dsim.models.toy_decoder`, imported inside
its functions (dsim.models imports nothing from here). Definitions: docs/design.md; the
protocol: docs/policies.md.
"""

from dsim.policies.builtin import DSpark, DSparkAsync, Fixed, Goodput, Oracle, Threshold
from dsim.policies.protocol import SPS, EngineCosts, Policy, StepContext, Traits, policy_traits
from dsim.policies.registry import (
    POLICY_NAMES,
    check_gamma,
    parse_policy,
    plugin_ref,
    policy_maker,
    policy_usage,
    reads_sla,
    sla_users,
)
from dsim.policies.schedule import dspark_lengths, global_capacity
from dsim.policies.vllm_adaptive import VllmAdaptive

__all__ = [
    "POLICY_NAMES",
    "SPS",
    "DSpark",
    "DSparkAsync",
    "EngineCosts",
    "Fixed",
    "Goodput",
    "Oracle",
    "Policy",
    "StepContext",
    "Threshold",
    "Traits",
    "VllmAdaptive",
    "check_gamma",
    "dspark_lengths",
    "global_capacity",
    "parse_policy",
    "plugin_ref",
    "policy_maker",
    "policy_traits",
    "policy_usage",
    "reads_sla",
    "sla_users",
]

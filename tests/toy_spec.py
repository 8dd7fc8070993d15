"""The toy speculative decoder now lives in dsim (`dsim check-policy` runs it); tests import it
from here as before."""

from dsim.models.toy_decoder import chain, joint_pvalue, speculative_decode

__all__ = ["chain", "joint_pvalue", "speculative_decode"]

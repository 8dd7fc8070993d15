"""The number formats a user names (`--dtype`, `--kv-dtype`) or a profile's sidecar records, and
what each means: one canonical name (bf16, fp16, fp32, fp8, fp4) with its aliases (torch's
bfloat16, float16, float32; float8), the bytes an element takes and the torch dtype a
measurement builds. Each option accepts a `Vocabulary` of formats and parses the user's string
once, at the edge, into the canonical name.

Standard library only: the GPU profile's device script (`dsim.models.gpu_profile`, torch alone
on the GPU machine) imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsim.errors import InputError

# fp4 weights as MXFP4 (OCP Microscaling, gpt-oss's checkpoint format): 4-bit elements plus one
# 8-bit E8M0 scale per 32-element block, 4.25 bits a weight (NVFP4's 16-element blocks with an
# FP8 scale would be 4.5 bits).
MXFP4_BYTES = 0.5 + 1 / 32
BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": MXFP4_BYTES}
ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8": "fp8"}
TORCH = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # torch's attribute names
AUTO = "auto"


def canonical(name: object) -> str | None:
    """The canonical name of a spelling (any case, aliases; `auto` as itself), None if unknown."""
    if not isinstance(name, str):
        return None
    low = name.lower()
    low = ALIASES.get(low, low)
    return low if low in BYTES or low == AUTO else None


def element_bytes(name: object) -> float | None:
    """Bytes an element of the named format takes (a sidecar's `dtype`), None if it names none."""
    return BYTES.get(canonical(name) or "")


@dataclass(frozen=True)
class Vocabulary:
    """The formats one option accepts, under the spellings its error lists (their aliases are
    accepted too); `auto` is accepted where it means something, and parses to `auto`."""

    flag: str
    shown: tuple[str, ...]
    auto: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical names the option accepts (`auto` aside)."""
        return tuple(str(canonical(s)) for s in self.shown)

    def parse(self, value: str) -> str:
        """The canonical name of `value`, or what `auto` means here."""
        name = canonical(value)
        if name == AUTO and self.auto is not None:
            return self.auto
        if name in self.names:
            return name
        raise self.refuse(value)

    def refuse(self, value: object) -> InputError:
        """One line naming the option and every spelling it accepts."""
        *rest, last = ((AUTO,) if self.auto is not None else ()) + self.shown
        return InputError(
            None, None, f"{self.flag} must be {', '.join(rest)} or {last}, got {value!r}"
        )


TORCH_SHOWN = ("float32", "float16", "bfloat16")
# The GPU estimate: weights (auto: bf16, the checkpoints' compute dtype) and the KV cache.
ESTIMATE_WEIGHTS = Vocabulary("--dtype with --roofline", ("bf16", "fp8", "fp4"), auto="bf16")
ESTIMATE_KV = Vocabulary("--kv-dtype", ("bf16", "fp8"))
# What a user types for the KV cache: auto (the engine's default for the checkpoint) too.
REQUESTED_KV = Vocabulary("--kv-dtype", ("bf16", "fp8"), auto=AUTO)
# A measured profile (auto: float32 on cpu, bfloat16 on cuda) and the serving-grade GPU profile.
MEASURED = Vocabulary("--dtype", TORCH_SHOWN, auto=AUTO)
SERVING = Vocabulary("--dtype", TORCH_SHOWN)

"""What one validation study asks for (`Settings`) and the checks it passes before anything is
loaded. Light imports only: the command line reads its defaults from here at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dsim import spec_grammar
from dsim.errors import InputError
from dsim.hardware.measure import Grid
from dsim.models.target import SMOLLM2
from dsim.policies import Oracle, parse_policy
from dsim.real.defaults import DEFAULT_PROMPTS
from dsim.validation.timeline import BUDGET_MINUTES

DEFAULT_DRAFTER = Path("drafters/markov.pt")
DEFAULT_TRACE = Path("traces/acceptance/smollm2-markov.parquet")
DEFAULT_REPEATS = 3
POLICIES = ("mtp1", "fixed:4", "dspark")
LOADS = (("light", 1 / 3), ("moderate", 2 / 3))  # target mtp1 busy fractions
DENSE_SEQS = 4  # the on-machine profile measures every (R, q) cell up to this R


@dataclass(frozen=True)
class Settings:
    drafter: Path = DEFAULT_DRAFTER
    acceptance: Path = DEFAULT_TRACE  # the drafter's trace, recorded on `prompts`
    prompts: Path = DEFAULT_PROMPTS
    profile: Path | None = None  # None: profile the target on this machine before the real runs
    preset: str = "preset:dspark:chat"
    policies: tuple[str, ...] = POLICIES
    loads: tuple[tuple[str, float], ...] = LOADS
    repeats: int = DEFAULT_REPEATS  # seeds seed, seed + 1, ...
    requests: int = 10  # per run
    max_new_tokens: int = 64
    max_seqs: int = 16
    seed: int = 0
    target: str = SMOLLM2
    profile_contexts: tuple[int, ...] | None = None  # None: profile_grid's rule
    reference_every: int = 8  # verifies between reference passes (`dsim.validation.reference`)
    budget_minutes: float = BUDGET_MINUTES  # a re-run only within it (`dsim.validation.timeline`)
    draws: int = 32  # acceptance draws a run's simulations average (`dsim.validation.runs`)

    def check(self) -> None:
        """Everything that can be refused before a model is loaded or a file written."""
        counts = ("repeats", "requests", "max_new_tokens", "max_seqs", "reference_every", "draws")
        for name in counts:
            if getattr(self, name) < 1:
                raise InputError(None, None, f"--{name.replace('_', '-')} must be >= 1")
        if not self.budget_minutes > 0:
            raise InputError(None, None, "--budget-minutes must be > 0")
        if self.seed < 0:
            raise InputError(None, None, "--seed must be >= 0")
        if not self.policies:
            raise InputError(None, None, "--policies names no policy")
        for policy in self.policies:
            if isinstance(parse_policy(policy), Oracle):
                raise InputError(None, None, "policy oracle cannot be served for real")
        names = [n for n, _ in self.loads]
        if not names or len(set(names)) != len(names):
            raise InputError(None, None, "--loads needs distinct names: NAME=BUSY,...")
        for name, busy in self.loads:
            if not 0 < busy < 1:
                raise InputError(None, None, f"load {name}: busy fraction must be in (0, 1)")
        for path, what in ((self.drafter, "drafter checkpoint"), (self.profile, "profile")):
            if path is not None and not Path(path).is_file():
                raise InputError(path, None, f"{what} not found")

    def profile_grid(self, longest: int, block: int) -> Grid:
        """The on-machine profile's grid: R up to --max-seqs at q = 1, 2, 4, 8 tokens each,
        and every cell R <= DENSE_SEQS, q <= `block` (gamma + 1, the longest verify block), and
        one sequence of B tokens for every B <= 2 x `block` no such cell has (11 and 13 at
        gamma 7), at contexts 128, 256, 512, or 128, 512 and `longest` (the longest served
        prompt plus the output cap, rounded up to 128) when that is longer: the step model then
        interpolates over every context the runs reach instead of extrapolating past 512.
        Every cell the runs live in (R ~ 1-3) is measured, not interpolated, because the CPU
        pass is not monotone in B there (some ragged batches cost more than larger ones, and
        B = 9-15 is a slow band: the validation study's README and its probe files), which
        no interpolation between measured B can see. Above 2 x `block` the measured B are at
        most 4 apart and the pass is smooth."""
        seqs = tuple(sorted({r for r in (1, 2, 4, 16, 64) if r < self.max_seqs} | {self.max_seqs}))
        top = -(-longest // 128) * 128
        contexts = self.profile_contexts or ((128, 256, 512) if top <= 512 else (128, 512, top))
        dense = range(1, min(DENSE_SEQS, self.max_seqs) + 1)
        cells = tuple((r, q) for r in dense for q in range(1, block + 1))
        covered = {r * q for r, q in cells}
        cells += tuple((1, b) for b in range(1, 2 * block + 1) if b not in covered)
        return Grid(seqs, (1, 2, 4, 8), contexts, (1, 4), (32, 128), cells)


def parse_loads(text: str) -> tuple[tuple[str, float], ...]:
    """`light=0.333,moderate=0.667` -> ((name, busy fraction), ...)."""
    loads = spec_grammar.key_values(text, "--loads", "NAME=BUSY")
    for name, busy in loads.items():
        if not name:
            raise InputError(None, None, f"--loads: entry {busy!r} needs a NAME=")
        spec_grammar.number(busy, f"--loads entry {name!r} (NAME=BUSY): BUSY", gt=0, lt=1)
    return tuple((name, float(busy)) for name, busy in loads.items())

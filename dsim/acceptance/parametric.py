"""Parametric acceptance: per-position conditional acceptance with per-request and per-round
variation, and confidences that carry real but imperfect information.

For request r with domain d at round t, the true conditional acceptance probability of draft k is
    p[r,k] = sigmoid(logit(q[d,k]) + shift[d] + u[r] + e[r,t,k]),
u ~ N(0, spread_req^2) fixed per request, e ~ N(0, spread^2) fresh each round. Drafts are accepted
left to right with probability p; the first rejection ends the prefix. The drafter reports
    c[r,k] = sigmoid(overconf * (logit(p[r,k]) + n[r,t,k])),  n ~ N(0, noise^2) fresh each round,
so with noise = 0 and overconf = 1 the confidence is exactly calibrated (P(accept | c) = c) and
its discrimination grows with the spreads; overconf > 1 is the over-confidence that STS removes
(temperature 1/overconf). The confidence noise makes discrimination a parameter of its own: it
blurs which drafts the drafter believes in without moving what the target accepts (its draws
come from a generator spawned at bind, so the acceptance draws are the same at every noise),
and it leaves the confidence over-dispersed, as a real head's raw output is. With rho > 0 (off
by default) the round noise follows an AR(1) process over a request's consecutive rounds,
e[r,t] = rho e[r,t-1] + sqrt(1 - rho^2) eta[r,t],
so acceptance comes in easy and hard stretches while its marginal distribution is unchanged.
With spreads > 0 the served conditional acceptance is not q (rounds that reach draft k select
easier requests), so sources that name a served curve fit their latent q to it (`fit_latent`):
presets offline (dsim.acceptance.presets, where shift[d] then moves tau to another target's
figure), vLLM scrapes and `tau:` figures when read (`serving_latent`). Explicit position
means are latent means as given, shift 0, spreads 0 by default (where latent and served curves
agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit

from dsim.acceptance.prefix import leading_accepted
from dsim.errors import InputError


@dataclass(frozen=True)
class DomainModel:
    """One domain's acceptance: position means q_1..q_gamma plus the logit shift to apply."""

    name: str
    q: tuple[float, ...]
    shift: float = 0.0


@dataclass
class ParametricAcceptance:
    """AcceptanceSource over a weighted mix of domains (see module docstring)."""

    gamma: int
    domains: list[DomainModel]
    weights: np.ndarray
    spread: float = 1.0
    spread_req: float = 0.5
    overconf: float = 1.0
    rho: float = 0.0
    noise: float = 0.0
    _base: np.ndarray = field(init=False, repr=False)
    _dom: np.ndarray = field(init=False, repr=False)
    _z: np.ndarray = field(init=False, repr=False)
    _noise: np.ndarray = field(init=False, repr=False)
    _conf_rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._base = np.array(
            [
                logit(np.clip(_extend(d.q, self.gamma), 1e-9, 1 - 1e-9)) + d.shift
                for d in self.domains
            ]
        )
        self.weights = np.asarray(self.weights, dtype=np.float64) / np.sum(self.weights)

    @property
    def latent(self) -> np.ndarray:
        """Each domain's latent logit means per position, shift included: (domains, gamma)."""
        return self._base

    @property
    def domain_names(self) -> np.ndarray:
        """Domain name of each bound request (for writing synthetic acceptance traces)."""
        return np.array([d.name for d in self.domains])[self._dom]

    def bind(self, n_requests: int, rng: np.random.Generator) -> None:
        self._dom = rng.choice(len(self.domains), size=n_requests, p=self.weights)
        self._z = self._base[self._dom]
        if self.spread_req:
            self._z = self._z + rng.normal(0.0, self.spread_req, size=(n_requests, 1))
        if self.rho and self.spread:
            self._noise = rng.normal(0.0, self.spread, size=self._z.shape)
        if self.noise:
            self._conf_rng = rng.spawn(1)[0]  # spawning leaves rng's own stream untouched

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        # The simulator's hottest call: `take` gathers rows ~4x faster than fancy indexing, and
        # spread * standard normals are bit for bit rng.normal(0, spread) (a spread of 1, the
        # presets', needs no product).
        z = self._z.take(idx, axis=0)
        if self.spread:
            noise = rng.standard_normal(z.shape)
            if self.spread != 1.0:
                noise *= self.spread
            if self.rho:
                noise = self.rho * self._noise[idx] + np.sqrt(1.0 - self.rho**2) * noise
                self._noise[idx] = noise
            z += noise
        p = expit(z)
        accepted = leading_accepted(rng.random(z.shape), p)
        if self.noise:
            z += self.noise * self._conf_rng.standard_normal(z.shape)
        conf = p if self.overconf == 1.0 and not self.noise else expit(self.overconf * z)
        return conf, accepted


def _extend(q: tuple[float, ...], gamma: int) -> np.ndarray:
    """Position means for gamma drafts: truncate, or repeat the last position's mean."""
    q = np.asarray(q, dtype=np.float64)
    return q[:gamma] if gamma <= len(q) else np.concatenate([q, np.full(gamma - len(q), q[-1])])


def serving_curve(
    latent: np.ndarray,
    spread: float,
    spread_req: float,
    n_req: int = 1000,
    n_round: int = 32,
    seed: int = 12345,
) -> tuple[np.ndarray, float]:
    """Conditional acceptance per position and tokens per round (incl. bonus) at full
    verification, pooled over rounds as a serving run pools them.

    Every request emits about the same number of tokens, so a request that accepts less runs more
    rounds and weighs more: request r's rounds weigh 1 / tau_r. Position k's conditional
    acceptance is P(drafts 1..k accepted) / P(drafts 1..k-1 accepted) over those rounds (the
    paper's denominator), and tau is the harmonic mean of the tau_r (all tokens / all rounds), so
    tau = 1 + sum_k prod_{j<=k} curve_j exactly. Expected probabilities over fixed-seed latent
    draws, so the result is deterministic and smooth in `latent`.
    """
    rng = np.random.default_rng(seed)
    z = latent + rng.normal(0.0, spread_req, size=(n_req, 1, 1))
    z = z + rng.normal(0.0, spread, size=(n_req, n_round, len(latent)))
    reach = np.cumprod(expit(z), axis=2).mean(axis=1)  # (request, k): P(drafts 1..k accepted)
    weight = 1.0 / (1.0 + reach.sum(axis=1))
    passed = weight @ reach
    reached = np.concatenate([[weight.sum()], passed[:-1]])
    return passed / reached, float(1.0 + passed.sum() / weight.sum())


def expected_tau(q: np.ndarray, shift: float, spread: float, spread_req: float) -> float:
    """Tokens per round (incl. bonus) at full verification, as a serving run measures it."""
    return serving_curve(logit(q) + shift, spread, spread_req)[1]


def fit_latent(
    target: np.ndarray,
    spread: float,
    spread_req: float,
    n_req: int = 1000,
    n_round: int = 32,
    seed: int = 12345,
    tol: float = 1e-3,
) -> np.ndarray:
    """Latent logit means whose served conditional curve (`serving_curve`, same draws every
    step) equals `target` at every position: a fixed-point iteration in logit space, each step
    the logit gap between target and served curve. Targets are clipped to [1e-6, 1 - 1e-6]
    (0 and 1 have no logit); ValueError when 200 steps leave a position more than `tol` off."""
    goal = logit(np.clip(np.asarray(target, dtype=np.float64), 1e-6, 1 - 1e-6))
    latent = goal.copy()
    for _ in range(200):
        curve = serving_curve(latent, spread, spread_req, n_req, n_round, seed)[0]
        step = goal - logit(np.clip(curve, 1e-12, 1 - 1e-12))
        latent = np.clip(latent + step, -30.0, 30.0)
        if np.abs(step).max() < 1e-6:
            return latent
    gap = np.abs(serving_curve(latent, spread, spread_req, n_req, n_round, seed)[0] - expit(goal))
    if gap.max() > tol:
        raise ValueError(f"position {int(gap.argmax()) + 1} stays {gap.max():.3f} off")
    return latent


FIT_REQUESTS = 4000  # x 32 rounds: expectation within ~0.003 of the curve (test_scrape_fit)


@lru_cache(maxsize=64)
def _serving(curve: tuple[float, ...], spread: float, spread_req: float) -> tuple[float, ...]:
    latent = fit_latent(np.asarray(curve), spread, spread_req, n_req=FIT_REQUESTS)
    return tuple(expit(latent).tolist())


def serving_latent(
    curve: tuple[float, ...], spread: float, spread_req: float, where: str | Path
) -> tuple[float, ...]:
    """Latent means (as probabilities) that serve the conditional `curve` at these spreads
    (`fit_latent`, cached); an InputError naming `where` (the scrape, the spec) when none do."""
    try:
        return _serving(curve, spread, spread_req)
    except ValueError as err:
        raise InputError(
            where,
            None,
            f"no latent means serve its curve at spread={spread:g}, "
            f"spread_req={spread_req:g} ({err}): try smaller spreads",
        ) from None


@lru_cache(maxsize=256)
def fit_shift(q: tuple[float, ...], tau: float, spread: float, spread_req: float) -> float:
    """Logit shift that makes expected_tau match `tau` (the preset's reference figure)."""
    qa = np.clip(np.asarray(q), 1e-6, 1 - 1e-6)
    f = lambda s: expected_tau(qa, s, spread, spread_req) - tau  # noqa: E731
    return float(brentq(f, -12.0, 12.0, xtol=1e-6))

"""Drafter training on the cached target states (loss: docs/design.md, The drafter family).

loss = sum_k w_k (kl KL_k + tv TV_k + ce CE_k + BCE(c_k, c*_k)) / sum_k w_k,
w_k = exp(-(k-1)/gamma).

KL_k is the soft-label forward KL from the target's distribution to the drafter's at draft
position k, on the draft vocabulary V: with p_t the target's probabilities on V (mass m <= 1),
KL_k = sum_V p_t log(p_t / p_d) - m log m = m KL(p_t / m || p_d), zero exactly when the drafter
equals the target's distribution renormalised on V. Its gradient is m (p_d - p_t / m) per logit,
whatever p_d is, unlike TV's, which scales with the drafter's own probabilities. p_t is
recomputed for each batch from the cached final hidden states through the target's own LM head
rows of V and the cached exact log-normaliser: exp(h . W_v - lse). TV_k = 1 - c*_k with
c*_k = sum_V min(p_d, p_t) the acceptance probability of draft k, which the confidence head
learns (BCE); CE_k is the hard-label cross-entropy on the sampled answer token (the old recipe:
ce 0.1, tv 0.9, kl 0).

The training state (weights, optimizer, schedule, RNG, step) goes to a separate resumable file
in the cache; the drafter checkpoint itself holds fp16 weights only.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dsim.errors import InputError
from dsim.fileio import atomic_path
from dsim.models.checkpoint import save_drafter
from dsim.models.data import TrainCache
from dsim.models.drafters import Drafter, DrafterConfig, History, config_dict

CONF_WEIGHT = 1.0


def draft_vocabulary(cache: TrainCache, size: int, vocab_size: int) -> torch.Tensor:
    """The `size` most frequent tokens of the target's answers (ties and unseen tokens by id:
    BPE ids roughly follow merge frequency), sorted by id."""
    answers = cache.token[cache.anchors(0)]
    counts = torch.bincount(answers, minlength=vocab_size).double()
    score = counts - torch.arange(vocab_size, dtype=torch.float64) / vocab_size  # tie-break
    return torch.sort(torch.topk(score, min(size, vocab_size)).indices).values


class TrainingData:
    """Batches of anchors with their features, history and the target's distribution on the
    draft vocabulary at each draft position (recomputed per batch, never stored)."""

    def __init__(self, cache: TrainCache, head: torch.Tensor, vocab: torch.Tensor, config):
        self.cache, self.gamma = cache, config.gamma
        self.layers, self.context = list(config.feature_layers), config.context
        self.anchors = cache.anchors(self.gamma)
        if len(self.anchors) == 0:
            raise InputError(
                None, None, f"no answer in the cache is longer than gamma={self.gamma}"
            )
        self.head = head.detach()[vocab]
        self.seq_start = cache.seq_start()
        sample = self.anchors[:: max(1, len(self.anchors) // 4096)]
        self.coverage = float(self.target_probs(sample).sum(-1).mean())  # p_t mass in V

    def target_probs(self, rows: torch.Tensor) -> torch.Tensor:
        """(..., V_draft) the target's probabilities on the draft vocabulary, exact."""
        with torch.no_grad():
            logits = self.cache.hidden[rows] @ self.head.T
            return torch.exp(logits - self.cache.lse[rows][..., None])

    def batch(self, rows: torch.Tensor) -> dict:
        ahead = rows[:, None] + torch.arange(1, self.gamma + 1)[None, :]
        out = {
            "hidden": self.cache.features(rows, self.layers),
            "anchor": self.cache.token[rows],
            "tokens": self.cache.token[ahead],
            "target_probs": self.target_probs(ahead),
            "history": None,
        }
        if self.context:
            past = rows[:, None] + torch.arange(-self.context, 0)[None, :]
            valid = past >= self.seq_start[rows][:, None]
            past = past.clamp(min=0)
            features = self.cache.features(past, self.layers)
            out["history"] = History(features, self.cache.token[past], valid)
        return out


@dataclass(frozen=True)
class LossWeights:
    kl: float = 1.0
    tv: float = 0.1
    ce: float = 0.0


def drafter_loss(
    drafter: Drafter, batch: dict, weights: LossWeights = LossWeights()
) -> tuple[torch.Tensor, dict]:
    """The position-weighted loss and its parts (floats, for the progress line)."""
    logits, conf_logits, _ = drafter(
        batch["hidden"], batch["anchor"], batch["tokens"], history=batch["history"]
    )
    log_p = torch.log_softmax(logits, dim=-1)
    p_target = batch["target_probs"]
    accept = torch.minimum(log_p.exp(), p_target).sum(-1)  # c*_k = 1 - TV
    mass = p_target.sum(-1)
    cross = torch.where(p_target > 0, p_target * log_p, 0.0)  # 0 log 0 = 0
    kl = (torch.xlogy(p_target, p_target) - cross).sum(-1) - torch.xlogy(mass, mass)
    target_idx = drafter.to_draft[batch["tokens"]]
    known = target_idx < len(drafter.vocab)
    nll = -log_p.gather(-1, target_idx.clamp(max=len(drafter.vocab) - 1)[..., None]).squeeze(-1)
    ce = torch.where(known, nll, torch.zeros_like(nll))
    bce = F.binary_cross_entropy_with_logits(conf_logits, accept.detach(), reduction="none")
    gamma = logits.shape[1]
    position = torch.exp(-torch.arange(gamma, dtype=logits.dtype) / gamma)
    per_pos = weights.kl * kl + weights.tv * (1 - accept) + weights.ce * ce + CONF_WEIGHT * bce
    loss = (per_pos * position).sum(-1).mean() / position.sum()
    parts = {
        "kl": float(kl.detach().mean()),
        "accept": float(accept.detach().mean()),
        "bce": float(bce.detach().mean()),
    }
    return loss, parts


@dataclass(frozen=True)
class TrainSettings:
    """One recipe; `block`, `feature_layers`, `context` and the loss weights are the ablation
    knobs (`block="encoder"` with no layers and no context is the dsim-drafter/1 drafter)."""

    steps: int
    batch_size: int = 64
    lr: float = 2e-3
    warmup: int = 300
    seed: int = 0
    vocab_size: int = 8192
    save_every: int = 200
    block: str = "llama"
    feature_layers: tuple[int, ...] | None = None  # None: the cache's layers + the final one
    context: int = 16
    parallel_layers: int = 2
    width: int = 256  # encoder block only (the llama block has the target's width)
    loss: LossWeights = LossWeights()


def drafter_config(kind: str, gamma: int, target, cache: TrainCache, s: TrainSettings):
    if s.block == "encoder":
        return DrafterConfig.default(kind, gamma, target.hidden_size, width=s.width)
    layers = s.feature_layers
    if layers is None:
        layers = (*cache.layer_ids, cache.final_layer)
    cfg = target.model.config
    return DrafterConfig.for_target(kind, gamma, cfg, list(layers), s.context, s.parallel_layers)


def train_drafter(
    kind: str,
    gamma: int,
    cache: TrainCache,
    target,
    settings: TrainSettings,
    out,
    state_path,
    resume: bool,
    progress: Callable[[int, float, dict], None] | None = None,
) -> dict:
    """Train one drafter; writes `out` (small checkpoint) and `state_path` (resumable)."""
    if cache.fingerprint != target.fingerprint:
        raise InputError(None, None, "training-data cache was made with another target")
    torch.manual_seed(settings.seed)
    config = drafter_config(kind, gamma, target, cache, settings)
    vocab = draft_vocabulary(cache, settings.vocab_size, target.vocab_size)
    drafter = Drafter(config, vocab)
    if config.block == "llama":
        drafter.init_from_target(target.model)
    drafter.attach(target.embedding.weight, target.lm_head_weight)
    data = TrainingData(cache, target.lm_head_weight, vocab, config)
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=settings.lr, weight_decay=0.0)
    factor = _warmup_cosine(settings.steps, settings.warmup)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    generator = torch.Generator().manual_seed(settings.seed)
    step = 0
    if resume and state_path.exists():
        step = _load_state(state_path, drafter, optimizer, schedule, generator, config)
    started, cpu, loss_value = time.perf_counter(), time.process_time(), float("nan")
    meta = {"target": target.name, "steps": settings.steps, "batch_size": settings.batch_size}
    meta |= {"lr": settings.lr, "warmup": settings.warmup, "seed": settings.seed}
    meta |= {"loss": vars(settings.loss), "vocab_coverage": data.coverage}
    meta |= {"answer_tokens": cache.answer_tokens, "sequences": len(cache.ids)}
    first = step
    while step < settings.steps:
        pick = torch.randint(len(data.anchors), (settings.batch_size,), generator=generator)
        loss, parts = drafter_loss(drafter, data.batch(data.anchors[pick]), settings.loss)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        step += 1
        loss_value = float(loss.detach())
        if progress is not None:
            progress(step, loss_value, parts)
        if step % settings.save_every == 0 or step == settings.steps:
            _save_state(state_path, drafter, optimizer, schedule, generator, step)
            save_drafter(out, drafter, target.fingerprint, meta | {"trained_steps": step})
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "steps": step,
        "final_loss": loss_value,
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, step - first),
        "cpu_seconds_per_step": cpu / max(1, step - first),  # = wall on an idle core
        "vocab_coverage": data.coverage,
        "parameters": sum(p.numel() for p in drafter.parameters()),
    }


def _warmup_cosine(steps: int, warmup: int) -> Callable[[int], float]:
    """Linear warm-up over `warmup` steps (at most a tenth of the run), cosine to 10%."""
    warm = max(1, min(warmup, steps // 10))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))

    return factor


def _save_state(path, drafter, optimizer, schedule, generator, step: int) -> None:
    blob = {
        "config": config_dict(drafter.config),
        "model": drafter.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "rng": generator.get_state(),
        "step": step,
    }
    with atomic_path(path) as tmp:
        torch.save(blob, tmp)


STATE_KEYS = {"config", "model", "optimizer", "schedule", "rng", "step"}


def is_training_state(path: str | os.PathLike) -> bool:
    """Whether `path` holds a training state dsim wrote (`_save_state`'s keys)."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many types for a file it cannot read
        return False
    return isinstance(blob, dict) and set(blob) == STATE_KEYS


def _load_state(path, drafter, optimizer, schedule, generator, config) -> int:
    try:
        blob = torch.load(path, weights_only=True)
        if blob["config"] != config_dict(config):
            raise InputError(path, None, "training state is for another drafter configuration")
        drafter.load_state_dict(blob["model"])
        optimizer.load_state_dict(blob["optimizer"])
        schedule.load_state_dict(blob["schedule"])
        generator.set_state(blob["rng"])
        return int(blob["step"])
    except (OSError, RuntimeError, KeyError, ValueError) as err:
        raise InputError(
            path, None, f"cannot resume from training state ({str(err).splitlines()[0]})"
        ) from err

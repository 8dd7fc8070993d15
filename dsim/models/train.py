"""Drafter training on the cached target hidden states (loss: docs/design.md, The drafter family).

loss = sum_k w_k (0.1 CE_k + 0.9 TV_k + BCE(c_k, c*_k)) / sum_k w_k, w_k = exp(-(k-1)/gamma),
with c*_k = sum_v min(p_d, p_t) the acceptance probability of draft k. Target probabilities on
the draft vocabulary are computed once from the cache (exp(h . W_v - lse), exact), so a training
step never touches the full LM head. Training state (weights, optimizer, step, RNG) goes to a
separate resumable file; the drafter checkpoint itself stays small.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dsim.errors import InputError
from dsim.fileio import atomic_path
from dsim.models.checkpoint import save_drafter
from dsim.models.data import HiddenCache
from dsim.models.drafters import Drafter, DrafterConfig, config_dict

CE_WEIGHT, TV_WEIGHT, CONF_WEIGHT = 0.1, 0.9, 1.0


def draft_vocabulary(cache: HiddenCache, size: int, vocab_size: int) -> torch.Tensor:
    """The `size` most frequent tokens of the target's answers (ties and unseen tokens by id:
    BPE ids roughly follow merge frequency), sorted by id."""
    counts = torch.bincount(cache.token, minlength=vocab_size).double()
    score = counts - torch.arange(vocab_size, dtype=torch.float64) / vocab_size  # tie-break
    return torch.sort(torch.topk(score, min(size, vocab_size)).indices).values


class TrainingData:
    """Anchors and per-row target probabilities over the draft vocabulary (fp16, in memory)."""

    def __init__(self, cache: HiddenCache, head: torch.Tensor, vocab: torch.Tensor, gamma: int):
        self.cache, self.gamma = cache, gamma
        self.anchors = cache.anchors(gamma)
        if len(self.anchors) == 0:
            raise InputError(None, None, f"no answer in the cache is longer than gamma={gamma}")
        rows = head[vocab]
        chunks = []
        for start in range(0, cache.hidden.shape[0], 4096):
            h = cache.hidden[start : start + 4096]
            lse = cache.lse[start : start + 4096, None]
            chunks.append(torch.exp(h @ rows.T - lse).to(torch.float16))
        self.target_probs = torch.cat(chunks)
        self.coverage = float(self.target_probs.float().sum(-1).mean())  # p_t mass in vocab

    def batch(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        ahead = rows[:, None] + torch.arange(1, self.gamma + 1)[None, :]
        return {
            "hidden": self.cache.hidden[rows],
            "anchor": self.cache.token[rows],
            "tokens": self.cache.token[ahead],
            "target_probs": self.target_probs[ahead].float(),
        }


def drafter_loss(drafter: Drafter, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
    """The position-weighted loss and its parts (floats, for the progress line)."""
    logits, conf_logits, _ = drafter(batch["hidden"], batch["anchor"], batch["tokens"])
    log_p = torch.log_softmax(logits, dim=-1)
    p_target = batch["target_probs"]
    accept = torch.minimum(log_p.exp(), p_target).sum(-1)  # c*_k = 1 - TV
    target_idx = drafter.to_draft[batch["tokens"]]
    known = target_idx < len(drafter.vocab)
    nll = -log_p.gather(-1, target_idx.clamp(max=len(drafter.vocab) - 1)[..., None]).squeeze(-1)
    ce = torch.where(known, nll, torch.zeros_like(nll))
    bce = F.binary_cross_entropy_with_logits(conf_logits, accept.detach(), reduction="none")
    gamma = logits.shape[1]
    weight = torch.exp(-torch.arange(gamma, dtype=logits.dtype) / gamma)
    per_pos = CE_WEIGHT * ce + TV_WEIGHT * (1 - accept) + CONF_WEIGHT * bce
    loss = (per_pos * weight).sum(-1).mean() / weight.sum()
    parts = {
        "ce": float(ce.detach().mean()),
        "accept": float(accept.detach().mean()),
        "bce": float(bce.detach().mean()),
    }
    return loss, parts


@dataclass
class TrainSettings:
    steps: int
    batch_size: int = 64
    lr: float = 1e-3
    seed: int = 0
    vocab_size: int = 8192
    width: int = 256
    save_every: int = 200


def train_drafter(
    kind: str,
    gamma: int,
    cache: HiddenCache,
    target,
    settings: TrainSettings,
    out: Path,
    state_path: Path,
    resume: bool,
    progress: Callable[[int, float, dict], None] | None = None,
) -> dict:
    """Train one drafter; writes `out` (small checkpoint) and `state_path` (resumable)."""
    if cache.fingerprint != target.fingerprint:
        raise InputError(None, None, "hidden-state cache was made with another target")
    torch.manual_seed(settings.seed)
    config = DrafterConfig.default(kind, gamma, target.hidden_size, width=settings.width)
    vocab = draft_vocabulary(cache, settings.vocab_size, target.vocab_size)
    drafter = Drafter(config, vocab).attach(target.embedding.weight, target.lm_head_weight)
    data = TrainingData(cache, target.lm_head_weight, vocab, config.gamma)
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=settings.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(settings.steps))
    generator = torch.Generator().manual_seed(settings.seed)
    step = 0
    if resume and state_path.exists():
        step = _load_state(state_path, drafter, optimizer, schedule, generator, config)
    started, loss_value = time.perf_counter(), float("nan")
    meta = {"target": target.name, "steps": settings.steps, "batch_size": settings.batch_size}
    meta |= {"lr": settings.lr, "seed": settings.seed, "vocab_coverage": data.coverage}
    while step < settings.steps:
        rows = data.anchors[
            torch.randint(len(data.anchors), (settings.batch_size,), generator=generator)
        ]
        loss, parts = drafter_loss(drafter, data.batch(rows))
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
    return {
        "steps": step,
        "final_loss": loss_value,
        "seconds": time.perf_counter() - started,
        "vocab_coverage": data.coverage,
        "parameters": sum(p.numel() for p in drafter.parameters()),
    }


def _warmup_cosine(steps: int) -> Callable[[int], float]:
    warm = max(1, min(100, steps // 10))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))

    return factor


def _save_state(path: Path, drafter, optimizer, schedule, generator, step: int) -> None:
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


def _load_state(path: Path, drafter, optimizer, schedule, generator, config) -> int:
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

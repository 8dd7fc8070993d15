"""Plain sampling from the target, batched over the ragged KV cache (`dsim.models.ragged`):
the answers and target states a training-data build (`dsim prepare-data`) learns from."""

from __future__ import annotations

import torch

from dsim.models.ragged import RaggedTarget
from dsim.models.sampling import sample
from dsim.models.speculative import emitted


def generate(
    target,
    prompts: list[list[int]],
    max_new_tokens: int,
    generator: torch.Generator,
    layers: tuple[int, ...] = (),
    tail: int = 0,
    repeats: int = 1,
) -> list[dict[str, torch.Tensor]]:
    """Plain sampling from the target at temperature 1, batched; `repeats` answers per prompt
    share its prefill (prompt-major order). Per answer: `tokens`, the
    answer (ending at EOS, included, or after `max_new_tokens`); `hidden` (n, H), the final
    hidden state that predicted each answer token; `lse` (n,), the log-partition of its
    full-vocabulary logits; `layers` (n, L, H), the states of the other target `layers` at the
    same positions; and for the last `tail` prompt positions before the one that predicts the
    answer: `tail_hidden`, `tail_layers` and `tail_tokens` (the prompt token after each).

    The states come from the KV-cached sampling passes; a teacher-forced pass over prompt +
    answer computes the same states (up to float rounding), so no second pass is run."""
    final = int(target.model.config.num_hidden_layers)
    keep = (*layers, final)
    passes = RaggedTarget(target, keep)
    hidden = passes.prefill(prompts, max_new_tokens)  # (P, H)
    starts = torch.cumsum(torch.tensor([len(p) for p in prompts]), 0).tolist()
    tails = []
    for b, ids in enumerate(prompts):
        at, lo = starts[b] - len(ids), max(0, len(ids) - 1 - tail)
        tail_pair = (passes.features[at + lo : starts[b] - 1], torch.tensor(ids[lo + 1 :]))
        tails += [tail_pair] * repeats
    feats = passes.features[torch.tensor(starts) - 1]  # (P, L * H)
    rids = list(range(len(prompts)))
    if repeats > 1:  # each answer continues its own copy of the prompt's cache
        rids = [len(prompts) + a for a in range(len(tails))]
        for a, rid in enumerate(rids):
            passes.store.fork(a // repeats, rid)
    hidden = hidden.repeat_interleave(repeats, dim=0)  # (A, H)
    feats = feats.repeat_interleave(repeats, dim=0)  # (A, L * H)
    done = torch.zeros(len(tails), dtype=torch.bool)
    tokens, states, log_z = [], [], []
    for _ in range(max_new_tokens):
        logits = hidden @ target.lm_head_weight.T
        lse = torch.logsumexp(logits, dim=-1)
        token = sample(torch.exp(logits - lse[:, None]), generator, greedy=False)
        token = torch.where(done, target.eos_id, token)
        tokens.append(token)
        states.append(feats)
        log_z.append(lse)
        done |= token == target.eos_id
        if bool(done.all()):
            break
        hidden = passes.forward(rids, [[t] for t in token.tolist()])
        feats = passes.features
        for rid in rids:
            passes.store.commit(rid, 1)
    answers = torch.stack(tokens, dim=1)  # (B, steps)
    lengths, _ = emitted(answers, torch.full((len(answers),), answers.shape[1]), target.eos_id)
    states_t, log_z_t = torch.stack(states, dim=1), torch.stack(log_z, dim=1)
    out = []
    for b, (row, n) in enumerate(zip(answers.tolist(), lengths.tolist(), strict=True)):
        split = _split_layers(states_t[b, :n], len(keep))
        tail_split = _split_layers(tails[b][0], len(keep))
        out.append(
            {
                "tokens": row[:n],
                "hidden": split[:, -1].clone(),
                "lse": log_z_t[b, :n].clone(),
                "layers": split[:, :-1].clone(),
                "tail_hidden": tail_split[:, -1].clone(),
                "tail_layers": tail_split[:, :-1].clone(),
                "tail_tokens": tails[b][1],
            }
        )
    return out


def _split_layers(features: torch.Tensor, n: int) -> torch.Tensor:
    """(..., n * H) concatenated layers -> (..., n, H)."""
    return features.reshape(*features.shape[:-1], n, features.shape[-1] // n)

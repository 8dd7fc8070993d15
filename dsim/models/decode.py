"""Batched target forward passes with per-sequence KV caches that can be trimmed.

Every pass appends the same number of cache slots to each sequence (the batch's widest query),
and a boolean `valid` matrix says which slots each sequence may attend to. Padding, ragged
query lengths and rejected drafts are all just invalid slots, so the cache never needs to be
rewritten: `commit` after verification marks the rejected tail invalid. Positions (RoPE) count
only valid tokens, so a sequence sees exactly what an unbatched run would.
"""

from __future__ import annotations

import torch

from dsim.models.sampling import sample
from dsim.models.speculative import emitted


class BatchDecoder:
    """The target's KV caches for a batch of sequences, and forward passes over them."""

    def __init__(self, target, layers: list[int] | tuple[int, ...] = ()) -> None:
        """`layers`: target hidden_states indices (num_hidden_layers = the final normed state)
        that each `extend` also keeps in `self.features` (B, q, len(layers) * H)."""
        self.target = target
        self.layers = tuple(layers)
        self.features: torch.Tensor | None = None
        self.cache = None
        self.valid = torch.zeros(0, 0, dtype=torch.bool)  # (B, slots)
        self.next_pos = torch.zeros(0, dtype=torch.long)  # (B,) valid tokens so far
        self._last = 0  # width of the last appended block

    @property
    def batch(self) -> int:
        return int(self.next_pos.shape[0])

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Run the prompts; returns the final hidden state at each prompt's last token (B, H)."""
        width = max(len(p) for p in prompts)
        self.cache = None
        self.valid = torch.zeros(len(prompts), 0, dtype=torch.bool)
        self.next_pos = torch.zeros(len(prompts), dtype=torch.long)
        tokens = torch.full((len(prompts), width), self.target.eos_id, dtype=torch.long)
        for row, ids in enumerate(prompts):
            tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
        hidden = self.extend(tokens, lengths)
        self.commit(lengths)
        return hidden[torch.arange(len(prompts)), lengths - 1]

    def extend(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Append `tokens` (B, q); only the first lengths[b] of row b are real. Returns the final
        hidden states (B, q, H). Call `commit` next to keep a prefix of the new slots."""
        batch, q = tokens.shape
        new_valid = torch.arange(q)[None, :] < lengths[:, None]
        slots, ar = self.valid.shape[1], torch.arange(q)
        allowed = torch.zeros(batch, q, slots + q, dtype=torch.bool)
        allowed[:, :, :slots] = self.valid[:, None, :]
        allowed[:, :, slots:] = torch.ones(q, q, dtype=torch.bool).tril() & new_valid[:, None, :]
        allowed[:, ar, slots + ar] = True  # padded queries see themselves: no empty softmax row
        mask = torch.zeros(allowed.shape, dtype=torch.float32)
        mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
        positions = self.next_pos[:, None] + torch.arange(q)[None, :]
        with torch.no_grad():
            out = self.target.model.model(
                input_ids=tokens,
                attention_mask=mask[:, None],
                position_ids=positions,
                cache=self.cache,
                use_cache=True,
                output_hidden_states=bool(self.layers),
            )
        self.cache = out.cache
        if self.layers:
            self.features = torch.cat([out.hidden_states[i] for i in self.layers], dim=-1)
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        self._last = q
        return out.last_hidden_state

    def score(self, block: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """`dsim.models.speculative.TargetPass`: extend, then the target's distributions."""
        return self.probs(self.extend(block, counts))

    def commit(self, keep: torch.Tensor) -> None:
        """Keep the first keep[b] slots of the last appended block for each sequence."""
        start = self.valid.shape[1] - self._last
        self.valid[:, start:] &= torch.arange(self._last)[None, :] < keep[:, None]
        self.next_pos += keep

    def select(self, rows: torch.Tensor) -> None:
        """Keep only sequences `rows` (e.g. drop finished ones)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.next_pos = self.next_pos[rows]

    def repeat(self, n: int) -> None:
        """Each sequence becomes n consecutive copies (several answers share one prefill)."""
        self.cache.batch_repeat_interleave(n)
        self.valid = self.valid.repeat_interleave(n, dim=0)
        self.next_pos = self.next_pos.repeat_interleave(n, dim=0)
        if self.features is not None:
            self.features = self.features.repeat_interleave(n, dim=0)

    def merge(self, other: BatchDecoder) -> None:
        """Append `other`'s sequences to this batch (continuous batching: prefill newcomers in
        their own decoder, then merge). The shorter cache is padded with invalid slots."""
        if self.cache is None or self.batch == 0:
            self.cache, self.valid, self.next_pos = other.cache, other.valid, other.next_pos
            self._last = 0
            return
        width = max(self.valid.shape[1], other.valid.shape[1])
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat([_pad_slots(mine.keys, width), _pad_slots(theirs.keys, width)])
            mine.values = torch.cat(
                [_pad_slots(mine.values, width), _pad_slots(theirs.values, width)]
            )
        self.valid = torch.cat([_pad_slots(self.valid, width), _pad_slots(other.valid, width)])
        self.next_pos = torch.cat([self.next_pos, other.next_pos])
        self._last = 0

    def probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's next-token distribution (temperature 1) from final hidden states."""
        return torch.softmax(hidden @ self.target.lm_head_weight.T, dim=-1)


def _pad_slots(x: torch.Tensor, width: int) -> torch.Tensor:
    """Pad the slot axis (dim 1 of `valid`, dim 2 of keys/values) with zeros up to `width`."""
    axis = 1 if x.dim() == 2 else 2
    missing = width - x.shape[axis]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[axis] = missing
    return torch.cat([x, x.new_zeros(shape)], dim=axis)


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
    decoder = BatchDecoder(target, keep)
    lengths = [len(p) for p in prompts]
    hidden = decoder.prefill(prompts)
    rows = torch.arange(len(prompts))
    feats = decoder.features[rows, torch.tensor(lengths) - 1]
    tails = []
    for b, ids in enumerate(prompts):
        lo = max(0, len(ids) - 1 - tail)
        tail_pair = (decoder.features[b, lo : len(ids) - 1], torch.tensor(ids[lo + 1 :]))
        tails += [tail_pair] * repeats
    decoder.repeat(repeats)
    hidden = hidden.repeat_interleave(repeats, dim=0)
    feats = feats.repeat_interleave(repeats, dim=0)
    ones = torch.ones(len(tails), dtype=torch.long)
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
        hidden = decoder.extend(token[:, None], ones)[:, 0]
        feats = decoder.features[:, 0]
        decoder.commit(ones)
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

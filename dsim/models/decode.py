"""Batched target forward passes with per-sequence KV caches that can be trimmed.

Every pass appends the same number of cache slots to each sequence (the batch's widest query),
and a boolean `valid` matrix says which slots each sequence may attend to. Padding, ragged
query lengths and rejected drafts are all just invalid slots, so the cache never needs to be
rewritten: `trim` after verification marks the rejected tail invalid. Positions (RoPE) count
only valid tokens, so a sequence sees exactly what an unbatched run would.
"""

from __future__ import annotations

import torch

from dsim.models.sampling import sample


class BatchDecoder:
    """The target's KV caches for a batch of sequences, and forward passes over them."""

    def __init__(self, target) -> None:
        self.target = target
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
        self.trim(lengths)
        return hidden[torch.arange(len(prompts)), lengths - 1]

    def extend(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Append `tokens` (B, q); only the first lengths[b] of row b are real. Returns the final
        hidden states (B, q, H). Call `trim` next to keep a prefix of the new slots."""
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
            )
        self.cache = out.cache
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        self._last = q
        return out.last_hidden_state

    def trim(self, keep: torch.Tensor) -> None:
        """Keep the first keep[b] slots of the last appended block for each sequence."""
        start = self.valid.shape[1] - self._last
        self.valid[:, start:] &= torch.arange(self._last)[None, :] < keep[:, None]
        self.next_pos += keep

    def select(self, rows: torch.Tensor) -> None:
        """Keep only sequences `rows` (e.g. drop finished ones)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.next_pos = self.next_pos[rows]

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
    target, prompts: list[list[int]], max_new_tokens: int, generator: torch.Generator
) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Plain sampling from the target at temperature 1, batched. Per prompt: the answer (ending
    at EOS, included, or after `max_new_tokens`), the final hidden state that predicted each
    answer token (n, H) and the log-partition of its full-vocabulary logits (n,)."""
    decoder = BatchDecoder(target)
    hidden = decoder.prefill(prompts)
    ones = torch.ones(len(prompts), dtype=torch.long)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    tokens, states, log_z = [], [], []
    for _ in range(max_new_tokens):
        logits = hidden @ target.lm_head_weight.T
        lse = torch.logsumexp(logits, dim=-1)
        token = sample(torch.exp(logits - lse[:, None]), generator, greedy=False)
        token = torch.where(done, target.eos_id, token)
        tokens.append(token)
        states.append(hidden)
        log_z.append(lse)
        done |= token == target.eos_id
        if bool(done.all()):
            break
        hidden = decoder.extend(token[:, None], ones)[:, 0]
        decoder.trim(ones)
    rows = torch.stack(tokens, dim=1).tolist()
    states_t, log_z_t = torch.stack(states, dim=1), torch.stack(log_z, dim=1)
    out = []
    for b, row in enumerate(rows):
        n = row.index(target.eos_id) + 1 if target.eos_id in row else len(row)
        out.append((row[:n], states_t[b, :n].clone(), log_z_t[b, :n].clone()))
    return out

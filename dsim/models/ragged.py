"""One target forward pass over a ragged batch, with a KV cache per request: the one KV cache of
the real models (serve's backend, collect, plain sampling for training data, CPU profiles).

Continuous batching changes the running set every step and each request verifies its own
number of tokens, so the pass is *flattened*: every request's query tokens sit side by side in
one row of B tokens (B = sum of 1 + l_r), and the linear layers (almost all of the work) see
exactly B tokens, no padding. Only attention is per request: a custom transformers attention
function writes the new keys and values into each request's slot of a KV pool, then attends
request by request over that slot's own keys (query i of request r sees keys 0..len_r + i), as
a serving engine's variable-length attention does: no query is padded to the widest block and
no request reads keys past its own cache, so a ragged batch costs its contexts' sum, as the
step-time model (fitted on uniform batches) assumes. Trimming after a rejection is lowering the
request's committed length: the rejected slots are overwritten by its next pass.

Request r's cache holds every token before its anchor (the last emitted token, whose keys the
next pass computes): `lengths[r] == prompt + generated - 1` between rounds.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ATTENTION = "dsim_ragged"


class KVPool:
    """Keys and values of all live requests: (layers, 2, slots, kv_heads, capacity, head_dim).

    A request takes the lowest free slot, so the running batch covers a compact slot range
    and attention reads the pool in place. Slots and capacity grow (by copying) on demand, or
    are reserved up front (`reserve`), as a serving engine preallocates its cache.
    """

    def __init__(self, config, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        self.layers = int(config.num_hidden_layers)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        shape = (self.layers, 2, 0, self.kv_heads, 0, self.head_dim)
        self.kv = torch.empty(shape, dtype=dtype, device=device)
        self.slot: dict[int, int] = {}
        self.lengths: dict[int, int] = {}

    def reserve(self, slots: int, capacity: int) -> None:
        """Allocate `slots` caches of `capacity` tokens now, so opening requests within them
        never copies the pool (a captured CUDA graph keeps pointing at the same memory)."""
        self._grow(slots, capacity)

    def open(self, rid: int, capacity: int) -> None:
        """An empty cache for request `rid` that can hold `capacity` tokens."""
        taken = set(self.slot.values())
        slot = next(s for s in range(len(taken) + 1) if s not in taken)
        self._grow(slot + 1, capacity)
        self.slot[rid], self.lengths[rid] = slot, 0

    def fork(self, rid: int, copy: int) -> None:
        """Request `copy` starts as a copy of request `rid`'s cache (answers sharing a prompt)."""
        self.open(copy, self.kv.shape[4])
        n = self.lengths[rid]
        self.kv[:, :, self.slot[copy], :, :n] = self.kv[:, :, self.slot[rid], :, :n]
        self.lengths[copy] = n

    def drop(self, rid: int) -> None:
        self.slot.pop(rid, None)
        self.lengths.pop(rid, None)

    def commit(self, rid: int, tokens: int) -> None:
        """Keep the first `tokens` positions written by the last pass (the rest are rejected)."""
        self.lengths[rid] += tokens

    def _grow(self, slots: int, capacity: int) -> None:
        old = self.kv
        if slots <= old.shape[2] and capacity <= old.shape[4]:
            return
        shape = list(old.shape)
        shape[2] = max(slots, 2 * old.shape[2]) if slots > old.shape[2] else old.shape[2]
        shape[4] = max(capacity, old.shape[4])
        # Attention reads only positions a pass has written (keys 0..len + i of its own slot).
        self.kv = torch.empty(shape, dtype=old.dtype, device=old.device)
        self.kv[:, :, : old.shape[2], :, : old.shape[4]] = old


@dataclass(frozen=True)
class Layout:
    """Where each flattened token's keys go (slot, cache position), and each request's part of
    the flattened queries with the keys it attends."""

    pool: KVPool
    slot: torch.Tensor  # (B,) slot of each token
    position: torch.Tensor  # (B,) cache position of each token
    # per request: (slot, first token, end token, keys, mask (n, keys) or None when n == 1)
    requests: list[tuple[int, int, int, int, torch.Tensor | None]]


def _ragged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """Write the new keys/values into the pool, then attend request by request.

    query: (1, heads, B, head_dim); key, value: (1, kv_heads, B, head_dim);
    returns (1, B, heads, head_dim), the layout transformers expects back."""
    lay: Layout = kw["layout"]
    kv = lay.pool.kv[module.layer_idx]
    kv[0][lay.slot, :, lay.position] = key[0].transpose(0, 1)
    kv[1][lay.slot, :, lay.position] = value[0].transpose(0, 1)
    out = torch.empty_like(query[0])  # (heads, B, head_dim)
    for slot, start, end, keys, mask in lay.requests:
        out[:, start:end] = F.scaled_dot_product_attention(
            query[:, :, start:end],
            kv[0][slot : slot + 1, :, :keys],
            kv[1][slot : slot + 1, :, :keys],
            attn_mask=mask,
            scale=scaling,
            enable_gqa=True,
        )[0]
    return out.transpose(0, 1)[None], None


@contextmanager
def _attention_swapped(config):
    from transformers import AttentionInterface

    if ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION, _ragged_attention)
    before = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


class RaggedTarget:
    """The target's body run over ragged per-request token blocks, with per-request caches."""

    def __init__(self, target, layers: list[int] | tuple[int, ...] = ()) -> None:
        """`layers`: target hidden_states indices (num_hidden_layers = the final normed state)
        that each `forward` also keeps in `self.features` (B, len(layers) * H): a drafter's
        input layers."""
        self.target = target
        self.store = KVPool(target.model.config, target.lm_head_weight.dtype)
        self.layers = tuple(layers)
        self.features: torch.Tensor | None = None
        # Only the final state: no need to record every layer's output.
        self._final_only = self.layers == (int(target.model.config.num_hidden_layers),)

    def layout(self, rids: list[int], counts: list[int]) -> Layout:
        store = self.store
        n = torch.tensor(counts)
        slots = [store.slot[r] for r in rids]
        cached = [store.lengths[r] for r in rids]
        starts = torch.cumsum(n, 0) - n
        column = torch.arange(int(n.sum())) - starts.repeat_interleave(n)
        slot = torch.tensor(slots).repeat_interleave(n)
        position = torch.tensor(cached).repeat_interleave(n) + column
        requests, start = [], 0
        for s, c, k in zip(slots, cached, counts, strict=True):
            # query i of this block (cache position c + i) sees keys 0..c + i
            mask = None if k == 1 else torch.arange(c + k) <= (c + torch.arange(k))[:, None]
            requests.append((s, start, start + k, c + k, mask))
            start += k
        return Layout(store, slot, position, requests)

    def forward(self, rids: list[int], blocks: list[list[int]]) -> torch.Tensor:
        """Final (normed) hidden states (B, H) of every token of `blocks`, request by request,
        appended after each request's committed cache; `store.commit` keeps a prefix. The
        kept layers' states of the same tokens go to `self.features`."""
        lay = self.layout(rids, [len(b) for b in blocks])
        ids = torch.tensor([[t for b in blocks for t in b]], dtype=torch.long)
        every_layer = bool(self.layers) and not self._final_only
        with _attention_swapped(self.target.model.config), torch.inference_mode():
            out = self.target.model.model(
                input_ids=ids,
                position_ids=lay.position[None],
                use_cache=False,
                output_hidden_states=every_layer,
                layout=lay,
            )
        final = out.last_hidden_state[0]
        if every_layer:
            self.features = torch.cat([out.hidden_states[i][0] for i in self.layers], dim=-1)
        elif self.layers:
            self.features = final
        return final

    def prefill(self, prompts: list[list[int]], room: int) -> torch.Tensor:
        """Open caches 0..B-1 for the prompts, with `room` tokens to grow, and run the prompts
        in one pass; returns the final states at each prompt's last token (B, H). The kept
        layers' states of every prompt token are in `self.features` (sum of lengths, F)."""
        rids = list(range(len(prompts)))
        for rid, ids in zip(rids, prompts, strict=True):
            self.store.open(rid, len(ids) + room)
        states = self.forward(rids, prompts)
        for rid, ids in zip(rids, prompts, strict=True):
            self.store.commit(rid, len(ids))
        return states[torch.cumsum(torch.tensor([len(p) for p in prompts]), 0) - 1]

    def probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's next-token distribution (temperature 1) at each hidden state."""
        return torch.softmax(hidden @ self.target.lm_head_weight.T, dim=-1)


class Requests:
    """Some of a `RaggedTarget`'s requests as a `dsim.models.speculative.TargetPass`: one
    flattened pass over their blocks, its states scattered back to one row per request."""

    def __init__(self, passes: RaggedTarget, rids: list[int]) -> None:
        self.passes, self.rids = passes, rids
        self.block_features: torch.Tensor | None = None  # (R, w + 1, F) after `score`

    def score(self, block: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """block (R, w + 1), counts (R,) -> p_target (R, w + 1, V); past counts[r]: junk."""
        blocks = [row[:n].tolist() for row, n in zip(block, counts.tolist(), strict=True)]
        states = self.passes.forward(self.rids, blocks)  # (B, H), B = sum of counts
        starts = torch.cumsum(counts, 0) - counts  # (R,)
        flat = (starts[:, None] + torch.arange(block.shape[1])).clamp(max=len(states) - 1)
        features = self.passes.features  # (B, F) or None
        self.block_features = None if features is None else features[flat]
        return self.passes.probs(states)[flat]

    def commit(self, kept: torch.Tensor) -> None:
        for rid, n in zip(self.rids, kept.tolist(), strict=True):
            self.passes.store.commit(rid, n)

"""The drafter family (docs/design.md, The drafter family), with one uniform entry point.

Every drafter reads the frozen target's final hidden state at the last accepted position plus
the token the target emitted there (the anchor), and proposes gamma tokens with confidences.
All share the target's frozen embedding and LM head; the LM head is restricted to a *draft
vocabulary* (the most frequent tokens of the target's own answers, as EAGLE-3 does), so the
drafter never pays for the full 49k-row softmax. Tokens outside it get draft probability 0,
which rejection sampling handles exactly.

- `ar` (Eagle-style): one small causal layer run gamma times, feeding back its own feature.
- `parallel` (DFlash-style): one pass of a deeper bidirectional block over anchor + gamma masks.
- `markov`: parallel logits + a rank-r transition bias W2(W1[x_{k-1}]), sampled left to right.
- `rnn`: parallel logits + a gated recurrent bias over the block.
- `mtp1`: the `ar` layer with gamma = 1 (one head, one token).
Confidence head (all kinds): c_k = sigmoid(w^T [h_k; W1[x_{k-1}]]) (llama block: h_k normed).

Two block types (`DrafterConfig.block`). `encoder` (the dsim-drafter/1 checkpoints): a small
torch encoder layer reading only the target's final hidden state. `llama` (EAGLE-3-style): the
input concatenates several target layers (`feature_layers`, low/mid/final), the block is a layer
of the target's own architecture at the target's width, initialised from the target's last
layer, and it also attends to the `context` most recent target positions before the anchor
(fused like the anchor: features + the token that followed), so drafts can copy from context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from dsim.models.sampling import sample

KINDS = ("ar", "parallel", "markov", "rnn", "mtp1")
PARALLEL_KINDS = ("parallel", "markov", "rnn")


@dataclass
class DrafterConfig:
    """Plain numbers only: stored verbatim in checkpoints (loadable with weights_only)."""

    kind: str
    gamma: int
    target_hidden: int
    width: int = 256
    layers: int = 1
    heads: int = 4
    rank: int = 64
    state: int = 128  # rnn only
    # Fields below came with the `llama` block; their defaults are what dsim-drafter/1 meant.
    block: str = "encoder"  # "encoder" or "llama"
    feature_layers: list[int] = field(default_factory=list)  # target hidden_states indices
    context: int = 0  # recent target positions the block attends to (llama only)
    kv_heads: int = 0  # llama only: the target's key/value heads
    ffn: int = 0  # llama only: the target's MLP width
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @classmethod
    def default(cls, kind: str, gamma: int, target_hidden: int, width: int = 256) -> DrafterConfig:
        """The depth budget of the paper: the parallel family may be deeper than `ar`."""
        layers = 3 if kind in PARALLEL_KINDS else 1
        gamma = 1 if kind == "mtp1" else gamma
        return cls(kind, gamma, target_hidden, width=width, layers=layers)

    @classmethod
    def for_target(
        cls,
        kind: str,
        gamma: int,
        target_config,
        feature_layers: list[int],
        context: int,
        parallel_layers: int = 2,
    ) -> DrafterConfig:
        """A `llama`-block drafter shaped like the target's layers (width, heads, MLP), so its
        block can start as a copy of the target's last layer. `feature_layers` index the
        target's hidden_states (0: embeddings, num_hidden_layers: final normed state)."""
        c = target_config
        layers = parallel_layers if kind in PARALLEL_KINDS else 1
        return cls(
            kind,
            1 if kind == "mtp1" else gamma,
            int(c.hidden_size),
            width=int(c.hidden_size),
            layers=layers,
            heads=int(c.num_attention_heads),
            block="llama",
            feature_layers=[int(i) for i in feature_layers],
            context=context,
            kv_heads=int(c.num_key_value_heads),
            ffn=int(c.intermediate_size),
            rope_theta=float(_rope_theta(c)),
            norm_eps=float(c.rms_norm_eps),
        )

    @property
    def feature_size(self) -> int:
        """Width of the per-position input: the concatenated target layers."""
        return self.target_hidden * max(1, len(self.feature_layers))


@dataclass
class Draft:
    """One round's proposal for B sequences."""

    tokens: torch.Tensor  # (B, gamma) int64, full-vocabulary ids
    probs: torch.Tensor  # (B, gamma, V_draft) distribution each token was drawn from
    conf: torch.Tensor  # (B, gamma) raw confidences in (0, 1)


class TargetLayer(nn.Module):
    """One decoder layer of the target's architecture (RMSNorm, GQA attention with RoPE,
    SwiGLU MLP) whose queries are the block's tokens and whose keys/values are a memory of
    recent target positions followed by the block itself. Parameter names follow the target's
    `LlamaDecoderLayer`, so `init_from` is a plain state-dict copy."""

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        d, heads, kv = config.width, config.heads, config.kv_heads
        self.heads, self.kv, self.head_dim, self.theta = heads, kv, d // heads, config.rope_theta
        self.input_layernorm = nn.RMSNorm(d, eps=config.norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(d, eps=config.norm_eps)
        self.q_proj = nn.Linear(d, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, d, bias=False)
        self.gate_proj = nn.Linear(d, config.ffn, bias=False)
        self.up_proj = nn.Linear(d, config.ffn, bias=False)
        self.down_proj = nn.Linear(config.ffn, d, bias=False)

    def init_from(self, layer: nn.Module) -> None:
        """Copy a target `LlamaDecoderLayer`'s weights (same shapes by construction)."""
        source = {k.split(".")[-2]: v for k, v in layer.state_dict().items()}
        with torch.no_grad():
            for name, param in self.named_parameters():
                param.copy_(source[name.split(".")[0]])

    def forward(self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """x (B, T, d) block tokens at positions M..M+T-1; memory (B, M, d) at 0..M-1;
        allowed (B, T, M + T) which keys each query may read."""
        batch, t, m = x.shape[0], x.shape[1], memory.shape[1]
        h = self.input_layernorm(torch.cat([memory, x], dim=1))
        q = self._split(self.q_proj(h[:, m:]), self.heads)
        k = self._split(self.k_proj(h), self.kv)
        v = self._split(self.v_proj(h), self.kv)
        cos, sin = self._rope(m + t, x.dtype)
        q, k = _rotate(q, cos[m:], sin[m:]), _rotate(k, cos, sin)
        repeat = self.heads // self.kv
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        x = x + self.o_proj(att.transpose(1, 2).reshape(batch, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], heads, self.head_dim).transpose(1, 2)

    def _rope(self, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        half = self.head_dim // 2
        inv = self.theta ** (-torch.arange(half, dtype=torch.float32) / half)
        angle = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
        angle = torch.cat([angle, angle], dim=-1)
        return angle.cos().to(dtype), angle.sin().to(dtype)


def _rope_theta(config) -> float:
    """RoPE base of a transformers config (a top-level field before transformers 5)."""
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("rope_theta") or getattr(config, "rope_theta", None) or 10000.0


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


@dataclass
class History:
    """The target positions before the anchor, oldest first: their features (B, M, F), the
    token that followed each (B, M) and which entries exist (B, M)."""

    features: torch.Tensor
    tokens: torch.Tensor
    valid: torch.Tensor


class Drafter(nn.Module):
    """A drafter of any kind; the frozen target tensors are attached, never saved."""

    def __init__(self, config: DrafterConfig, vocab: torch.Tensor) -> None:
        super().__init__()
        if config.kind not in KINDS:
            raise ValueError(f"unknown drafter kind {config.kind!r}")
        if config.block not in ("encoder", "llama"):
            raise ValueError(f"unknown drafter block {config.block!r}")
        self.config = config
        d, g, big = config.width, config.gamma, config.target_hidden
        n_vocab = int(vocab.shape[0])
        self.register_buffer("vocab", vocab.long().clone())
        self.fuse = nn.Linear(config.feature_size + big, d)
        self.position = nn.Parameter(torch.zeros(g + 1, d))
        self.mask_slot = nn.Parameter(torch.zeros(d))
        if config.block == "llama":
            self.blocks = nn.ModuleList(TargetLayer(config) for _ in range(config.layers))
        else:
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(
                    d, config.heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
                )
                for _ in range(config.layers)
            )
        self.out = nn.Sequential(nn.Linear(d, big), nn.RMSNorm(big))
        self.token_code = nn.Embedding(n_vocab + 1, config.rank)  # W1; row n_vocab: other
        self.conf = nn.Linear(d + config.rank, 1)
        if config.kind in ("markov", "rnn"):
            self.transition = nn.Linear(config.rank, n_vocab, bias=False)  # W2
        if config.kind == "rnn":
            z = config.state + config.rank + d
            self.cell = nn.Linear(z, config.state)  # W_c
            self.gate = nn.Linear(z, config.state)  # W_g
            self.emit = nn.Linear(z, config.rank)  # W_o
        # Frozen target tensors, attached by `attach` and excluded from the state dict.
        self.register_buffer("embed", torch.zeros(0, big), persistent=False)
        self.register_buffer("head", torch.zeros(0, big), persistent=False)
        self.register_buffer("to_draft", torch.zeros(0, dtype=torch.long), persistent=False)

    def init_from_target(self, target_model) -> Drafter:
        """Start a `llama` drafter from the target: every block a copy of its last layer, the
        output map the identity followed by the target's final norm (so the output starts in
        the LM head's input space)."""
        if self.config.block != "llama":
            raise ValueError("only llama-block drafters start from the target's last layer")
        for block in self.blocks:
            block.init_from(target_model.model.layers[-1])
        with torch.no_grad():
            self.out[0].weight.copy_(torch.eye(self.config.target_hidden, self.config.width))
            self.out[0].bias.zero_()
            self.out[1].weight.copy_(target_model.model.norm.weight)
        return self

    def attach(self, embedding: torch.Tensor, lm_head: torch.Tensor) -> Drafter:
        """Share the target's embedding and the draft-vocabulary rows of its LM head."""
        self.embed = embedding.detach()
        self.head = lm_head.detach()[self.vocab]
        to_draft = torch.full((embedding.shape[0],), len(self.vocab), dtype=torch.long)
        to_draft[self.vocab] = torch.arange(len(self.vocab))
        self.to_draft = to_draft
        return self

    @property
    def gamma(self) -> int:
        return self.config.gamma

    @property
    def feature_size(self) -> int:
        return self.config.feature_size

    def forward(
        self,
        hidden: torch.Tensor,
        anchor: torch.Tensor,
        tokens: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        greedy: bool = False,
        history: History | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draft logits (B, g, V_draft), confidence logits (B, g) and the tokens used (B, g).

        hidden (B, F): the target's features at the anchor position (F = H, the final hidden
        state, for the encoder block); anchor (B,): the token it emitted; history: the positions
        before it (llama block with `context` > 0; ignored otherwise). With `tokens` (B, g) the
        block is teacher-forced (training); without, each token is sampled from the drafter
        itself (temperature 1, or argmax if greedy)."""
        if hidden.shape[-1] != self.feature_size:
            raise ValueError(
                f"drafter reads {self.feature_size} features per position (target layers "
                f"{self.config.feature_layers or 'final'}), got {hidden.shape[-1]}"
            )
        batch, g = hidden.shape[0], self.gamma
        start = self._fuse(hidden, anchor)
        memory, mem_valid = self._memory(history, batch)
        parallel = self.config.kind in PARALLEL_KINDS
        if parallel:
            slots = self.mask_slot.expand(batch, g, -1)
            block_in = torch.cat([start[:, None], slots], dim=1)
            states, base_logits = self._readout(
                self._blocks(block_in, False, memory, mem_valid)[:, 1:]
            )
        sequence = [start]
        prev = self.to_draft[anchor]
        rnn_state = hidden.new_zeros(batch, self.config.state)
        logits, confs, chosen = [], [], []
        for k in range(g):
            if parallel:
                h_k, step_logits = states[:, k], base_logits[:, k]
            else:  # ar: rerun the one layer over the block so far; its last output drafts k
                h_k = self._blocks(torch.stack(sequence, dim=1), True, memory, mem_valid)[:, -1]
                h_k, step_logits = self._readout(h_k)
            code = self.token_code(prev)
            if self.config.kind == "markov":
                step_logits = step_logits + self.transition(code)
            elif self.config.kind == "rnn":
                z = torch.cat([rnn_state, code, h_k], dim=-1)
                g_k = torch.sigmoid(self.gate(z))
                rnn_state = g_k * rnn_state + (1 - g_k) * torch.tanh(self.cell(z))
                step_logits = step_logits + self.transition(torch.tanh(self.emit(z)))
            confs.append(self.conf(torch.cat([h_k, code], dim=-1)).squeeze(-1))
            logits.append(step_logits)
            if tokens is not None:
                token = tokens[:, k]
            else:
                token = self.vocab[sample(torch.softmax(step_logits, -1), generator, greedy)]
            chosen.append(token)
            prev = self.to_draft[token]
            if not parallel and k + 1 < g:
                # Its own guess of the target's next state, in the place of every input layer.
                guess = h_k if self.config.block == "llama" else self.out(h_k)
                feature = guess.repeat(1, max(1, len(self.config.feature_layers)))
                sequence.append(self._fuse(feature, token))
        return torch.stack(logits, 1), torch.stack(confs, 1), torch.stack(chosen, 1)

    @torch.no_grad()
    def draft(
        self,
        hidden: torch.Tensor,
        anchor: torch.Tensor,
        generator: torch.Generator | None = None,
        greedy: bool = False,
        history: History | None = None,
    ) -> Draft:
        """Propose gamma tokens for each of B sequences (inference)."""
        logits, conf_logits, tokens = self(hidden, anchor, None, generator, greedy, history)
        return Draft(tokens, torch.softmax(logits, -1), torch.sigmoid(conf_logits))

    def full_vocab(self, probs: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Scatter draft-vocabulary probabilities (..., V_draft) into the target's vocabulary."""
        out = probs.new_zeros(*probs.shape[:-1], vocab_size)
        return out.index_copy_(-1, self.vocab, probs)

    def _fuse(self, features: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        return self.fuse(torch.cat([features, self.embed[token]], dim=-1))

    def _memory(self, history: History | None, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused recent positions (B, M, d) and their validity (B, M); M = 0 without them."""
        keep = self.config.context if self.config.block == "llama" else 0
        if history is None or keep == 0:
            empty = self.position.new_zeros(batch, 0, self.config.width)
            return empty, torch.zeros(batch, 0, dtype=torch.bool)
        feats, toks, valid = (
            x[:, -keep:] for x in (history.features, history.tokens, history.valid)
        )
        return self._fuse(feats, toks), valid

    def _blocks(
        self, x: torch.Tensor, causal: bool, memory: torch.Tensor, mem_valid: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.position[: x.shape[1]]
        if self.config.block == "encoder":
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1]) if causal else None
            for block in self.blocks:
                x = block(x, src_mask=mask, is_causal=causal)
            return x
        t = x.shape[1]
        own = torch.ones(t, t, dtype=torch.bool)
        own = own.tril() if causal else own
        allowed = torch.cat(
            [mem_valid[:, None, :].expand(-1, t, -1), own.expand(x.shape[0], t, t)], 2
        )
        for block in self.blocks:
            x = block(x, memory, allowed)
        return x

    def _readout(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The state the confidence and rnn heads read, and the draft logits. A llama block
        works in the target's residual stream, whose scale is large: its heads read the
        normed output (the LM head's input) instead of the raw state."""
        if self.config.block == "llama":
            states = self.out(states)
            return states, states @ self.head.T
        return states, self._logits(states)

    def _logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.out(states) @ self.head.T


def config_dict(config: DrafterConfig) -> dict:
    return asdict(config)


def time_draft(drafter: Drafter, hidden_size: int, batch: int, repeats: int, seed: int = 0):
    """Wall times (seconds) of `repeats` batched draft() calls on random anchors (and a full
    context window, if the drafter reads one), after one warm-up call: the drafter's per-round
    cost at `batch` sequences. `hidden_size` is unused: the drafter knows its input width."""
    import time

    import numpy as np

    gen = torch.Generator().manual_seed(seed)
    draft = random_draft(drafter, batch, gen)
    draft()
    times = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        draft()
        times[i] = time.perf_counter() - start
    return times


def random_draft(drafter: Drafter, batch: int, gen: torch.Generator) -> Callable[[], Draft]:
    """One batched draft() of `batch` sequences on random anchors (and a full context window,
    if the drafter reads one), ready to call: what the drafter's timing runs."""
    hidden = torch.randn(batch, drafter.feature_size, generator=gen)
    anchor = torch.randint(0, 256, (batch,), generator=gen)
    m = drafter.config.context
    history = History(
        torch.randn(batch, m, drafter.feature_size, generator=gen),
        torch.randint(0, 256, (batch, m), generator=gen),
        torch.ones(batch, m, dtype=torch.bool),
    )
    return lambda: drafter.draft(hidden, anchor, gen, history=history)


# -- The drafter's inputs, shared by collection (`dsim.models.collect`) and real mode ---------
def input_layers(drafter: Drafter, target) -> list[int]:
    """The target hidden_states the drafter reads (the final normed state by default)."""
    return drafter.config.feature_layers or [int(target.model.config.num_hidden_layers)]


def prompt_history(features: torch.Tensor, prompts: list[list[int]], size: int) -> History:
    """The last `size` prompt positions before each prompt's final one (right-aligned):
    their features and the prompt token that followed each. `features[b]` may hold only the
    last positions of prompt b if `prompts[b]` holds the same last tokens."""
    batch = len(prompts)
    out = History(
        features.new_zeros(batch, size, features.shape[-1]),
        torch.zeros(batch, size, dtype=torch.long),
        torch.zeros(batch, size, dtype=torch.bool),
    )
    for b, ids in enumerate(prompts):
        lo = max(0, len(ids) - 1 - size)
        n = len(ids) - 1 - lo
        if n:
            out.features[b, size - n :] = features[b, lo : len(ids) - 1]
            out.tokens[b, size - n :] = torch.tensor(ids[lo + 1 :])
            out.valid[b, size - n :] = True
    return out


def push_history(
    history: History,
    hidden: torch.Tensor,
    anchor: torch.Tensor,
    accepted: torch.Tensor,
    drafts: torch.Tensor,
    block_features: torch.Tensor,
) -> History:
    """Slide each sequence's window past a round: the old anchor (with `hidden`, the features
    that predicted it), then the `accepted` drafts (B, gamma), each with the target's features
    at the position before it (`block_features` (B, >= gamma, F): at [anchor, drafts])."""
    size = history.features.shape[1]
    if size == 0:
        return history
    gamma = drafts.shape[1]
    feats = torch.cat([history.features, hidden[:, None], block_features[:, :gamma]], 1)
    tokens = torch.cat([history.tokens, anchor[:, None], drafts], 1)
    fresh = torch.arange(gamma)[None, :] < accepted[:, None]
    valid = torch.cat([history.valid, torch.ones_like(anchor[:, None], dtype=torch.bool), fresh], 1)
    idx = (size + 1 + accepted)[:, None] - size + torch.arange(size)[None, :]
    return History(
        feats.gather(1, idx[..., None].expand(-1, -1, feats.shape[-1])),
        tokens.gather(1, idx),
        valid.gather(1, idx),
    )

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
Confidence head (all kinds): c_k = sigmoid(w^T [h_k; W1[x_{k-1}]]).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
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

    @classmethod
    def default(cls, kind: str, gamma: int, target_hidden: int, width: int = 256) -> DrafterConfig:
        """The depth budget of the paper: the parallel family may be deeper than `ar`."""
        layers = 3 if kind in PARALLEL_KINDS else 1
        gamma = 1 if kind == "mtp1" else gamma
        return cls(kind, gamma, target_hidden, width=width, layers=layers)


@dataclass
class Draft:
    """One round's proposal for B sequences."""

    tokens: torch.Tensor  # (B, gamma) int64, full-vocabulary ids
    probs: torch.Tensor  # (B, gamma, V_draft) distribution each token was drawn from
    conf: torch.Tensor  # (B, gamma) raw confidences in (0, 1)


class Drafter(nn.Module):
    """A drafter of any kind; the frozen target tensors are attached, never saved."""

    def __init__(self, config: DrafterConfig, vocab: torch.Tensor) -> None:
        super().__init__()
        if config.kind not in KINDS:
            raise ValueError(f"unknown drafter kind {config.kind!r}")
        self.config = config
        d, g, big = config.width, config.gamma, config.target_hidden
        n_vocab = int(vocab.shape[0])
        self.register_buffer("vocab", vocab.long().clone())
        self.fuse = nn.Linear(2 * big, d)
        self.position = nn.Parameter(torch.zeros(g + 1, d))
        self.mask_slot = nn.Parameter(torch.zeros(d))
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

    def forward(
        self,
        hidden: torch.Tensor,
        anchor: torch.Tensor,
        tokens: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draft logits (B, g, V_draft), confidence logits (B, g) and the tokens used (B, g).

        hidden (B, H): the target's final hidden state at the anchor position; anchor (B,): the
        token it emitted. With `tokens` (B, g) the block is teacher-forced (training); without,
        each token is sampled from the drafter itself (temperature 1, or argmax if greedy)."""
        batch, g = hidden.shape[0], self.gamma
        start = self.fuse(torch.cat([hidden, self.embed[anchor]], dim=-1))
        parallel = self.config.kind in PARALLEL_KINDS
        if parallel:
            slots = self.mask_slot.expand(batch, g, -1)
            states = self._blocks(torch.cat([start[:, None], slots], dim=1), causal=False)[:, 1:]
            base_logits = self._logits(states)
        sequence = [start]
        prev = self.to_draft[anchor]
        rnn_state = hidden.new_zeros(batch, self.config.state)
        logits, confs, chosen = [], [], []
        for k in range(g):
            if parallel:
                h_k, step_logits = states[:, k], base_logits[:, k]
            else:  # ar: rerun the one layer over the block so far; its last output drafts k
                h_k = self._blocks(torch.stack(sequence, dim=1), causal=True)[:, -1]
                step_logits = self._logits(h_k)
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
                feature = self.out(h_k)  # its own guess of the target's next hidden state
                sequence.append(self.fuse(torch.cat([feature, self.embed[token]], dim=-1)))
        return torch.stack(logits, 1), torch.stack(confs, 1), torch.stack(chosen, 1)

    @torch.no_grad()
    def draft(
        self,
        hidden: torch.Tensor,
        anchor: torch.Tensor,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> Draft:
        """Propose gamma tokens for each of B sequences (inference)."""
        logits, conf_logits, tokens = self(hidden, anchor, None, generator, greedy)
        return Draft(tokens, torch.softmax(logits, -1), torch.sigmoid(conf_logits))

    def full_vocab(self, probs: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Scatter draft-vocabulary probabilities (..., V_draft) into the target's vocabulary."""
        out = probs.new_zeros(*probs.shape[:-1], vocab_size)
        return out.index_copy_(-1, self.vocab, probs)

    def _blocks(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        x = x + self.position[: x.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1]) if causal else None
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=causal)
        return x

    def _logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.out(states) @ self.head.T


def config_dict(config: DrafterConfig) -> dict:
    return asdict(config)


def time_draft(drafter: Drafter, hidden_size: int, batch: int, repeats: int, seed: int = 0):
    """Wall times (seconds) of `repeats` batched draft() calls on random anchors, after one
    warm-up call: the drafter's per-round cost at `batch` sequences."""
    import time

    import numpy as np

    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, hidden_size, generator=gen)
    anchor = torch.randint(0, 256, (batch,), generator=gen)
    drafter.draft(hidden, anchor, gen)
    times = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        drafter.draft(hidden, anchor, gen)
        times[i] = time.perf_counter() - start
    return times

"""The real backend: the engine's rounds run the actual drafter and target (issue 7).

Per running request it keeps the anchor (the last emitted token, not yet in the KV cache) and
the target's final hidden state that predicted it, which is what every drafter reads. A round:
`draw` runs the drafter's batched pass (confidences for the policy, drafts kept for `verify`);
`verify` runs ONE flattened target pass over [anchor, first l_r drafts] of every request,
rejection-samples with `dsim.models.sampling.verify`, commits the accepted prefix to the cache
and reports an end-of-sequence token as a stop. `prefilled` runs the prompt (plus the tokens
already generated, after a preemption) and samples the first new token there.

`verify` reports the tokens each request emitted (cut after an end-of-sequence token, which it
flags); output caps are the engine's: a request's text is its first `output_tokens` tokens
(`text_tokens`), the count the engine recorded.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from dsim.acceptance.calibration import apply_temperatures
from dsim.models.drafters import Draft
from dsim.models.sampling import sample, verify
from dsim.real.ragged import RaggedTarget


class DraftModel(Protocol):
    """What the backend needs of a drafter (`dsim.models.drafters.Drafter` is one)."""

    gamma: int

    def draft(
        self, hidden: torch.Tensor, anchor: torch.Tensor, generator: torch.Generator, greedy: bool
    ) -> Draft: ...

    def full_vocab(self, probs: torch.Tensor, vocab_size: int) -> torch.Tensor: ...


class RealBackend:
    """A `dsim.engine.backend.Backend` over a real target and drafter."""

    def __init__(
        self,
        target,
        drafter: DraftModel | None,
        prompts: list[list[int]],
        caps: np.ndarray,
        seed: int = 0,
        greedy: bool = False,
        gamma: int | None = None,
        temperatures: np.ndarray | None = None,
    ) -> None:
        """`prompts[i]` are request i's token ids and `caps[i]` its output-token cap. Without a
        drafter only `ar` can run (draw returns zero confidences; give `gamma` then). With
        `temperatures` (STS, one per position) the policy sees calibrated confidences."""
        self.target, self.drafter, self.greedy = target, drafter, greedy
        self.gamma = drafter.gamma if drafter is not None else int(gamma or 1)
        self.prompts, self.caps = prompts, np.asarray(caps, dtype=np.int64)
        self.generator = torch.Generator().manual_seed(seed)
        self.temperatures = temperatures
        self.passes = RaggedTarget(target)
        self.outputs: list[list[int]] = []
        self.hidden: dict[int, torch.Tensor] = {}
        self.anchor: dict[int, int] = {}
        self.drafting = np.zeros(0, dtype=np.int64)  # requests of the pending draft
        self._draft: Draft | None = None

    # -- Backend protocol ----------------------------------------------------------------
    def bind(self, n_requests: int, rng: np.random.Generator) -> None:
        if n_requests != len(self.prompts):
            raise ValueError(f"{n_requests} requests but {len(self.prompts)} prompts")
        self.outputs = [[] for _ in range(n_requests)]

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, None]:
        """The drafter's batched pass; its drafts wait for `verify`. No truth: the real
        accepted prefix is only known after the target's pass (the oracle cannot run)."""
        self.drafting = idx.copy()
        if self.drafter is None:
            self._draft = None
            return np.zeros((len(idx), self.gamma)), None
        hidden = torch.stack([self.hidden[int(i)] for i in idx])
        anchor = torch.tensor([self.anchor[int(i)] for i in idx], dtype=torch.long)
        self._draft = self.drafter.draft(hidden, anchor, self.generator, self.greedy)
        conf = self._draft.conf.double().numpy()
        if self.temperatures is not None:
            conf = apply_temperatures(conf, self.temperatures)
        return conf, None

    def verify(
        self, idx: np.ndarray, lengths: np.ndarray, truth: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One target pass over every request's anchor + first l_r drafts; rejection sampling."""
        if not np.array_equal(idx, self.drafting):
            raise RuntimeError("verify must follow draw for the same requests")
        rows = [int(i) for i in idx]
        widest = int(lengths.max()) if len(lengths) else 0
        if widest and self._draft is None:
            raise RuntimeError("a policy verified drafts but the backend has no drafter")
        if widest:
            drafts = self._draft.tokens[:, :widest]
        else:
            drafts = torch.zeros((len(rows), 0), dtype=torch.long)
        blocks = [[self.anchor[r], *drafts[k, : lengths[k]].tolist()] for k, r in enumerate(rows)]
        states = self.passes.forward(rows, blocks)
        # Scatter the flat states into (R, widest + 1) so sampling is vectorised over requests.
        lengths_t = torch.as_tensor(lengths, dtype=torch.long)
        starts = torch.cumsum(lengths_t + 1, 0) - (lengths_t + 1)
        flat = (starts[:, None] + torch.arange(widest + 1)).clamp(max=states.shape[0] - 1)
        p_target = self.passes.probs(states)[flat]  # padded slots hold junk that is never read
        p_draft = (
            self.drafter.full_vocab(self._draft.probs[:, :widest], p_target.shape[-1])
            if widest
            else p_target[:, :0]
        )
        verdict = verify(drafts, p_draft, p_target, lengths_t, self.generator, self.greedy)
        accepted = verdict.accepted.numpy()
        emitted = np.zeros(len(rows), dtype=np.int64)
        stop = np.zeros(len(rows), dtype=bool)
        for k, r in enumerate(rows):
            n = int(accepted[k])
            tokens = [*drafts[k, :n].tolist(), int(verdict.next_token[k])]
            emitted[k], stop[k] = self._emit(r, tokens)
            self.passes.store.commit(r, 1 + n)
            self.hidden[r] = states[int(starts[k]) + n].clone()
            self.anchor[r] = tokens[-1]
        self._draft = None
        return emitted, stop

    def prefilled(self, idx: np.ndarray) -> np.ndarray:
        """Run each request's prompt (+ tokens generated before a preemption) through the
        target in one pass and sample its next token; flags end-of-sequence tokens."""
        rows = [int(i) for i in idx]
        blocks = [self.prompts[r] + self.outputs[r] for r in rows]
        for r in rows:
            capacity = len(self.prompts[r]) + int(self.caps[r]) + self.gamma + 1
            self.passes.store.open(r, capacity)
        states = self.passes.forward(rows, blocks)
        last = torch.cumsum(torch.tensor([len(b) for b in blocks]), 0) - 1
        first = sample(self.passes.probs(states[last]), self.generator, self.greedy)
        stop = np.zeros(len(rows), dtype=bool)
        for k, (r, block) in enumerate(zip(rows, blocks, strict=True)):
            self.passes.store.commit(r, len(block))
            token = int(first[k])
            _, stop[k] = self._emit(r, [token])
            self.hidden[r], self.anchor[r] = states[int(last[k])].clone(), token
        return stop

    def released(self, idx: np.ndarray) -> None:
        for i in idx:
            self.passes.store.drop(int(i))
            self.hidden.pop(int(i), None)
            self.anchor.pop(int(i), None)

    # -- helpers ------------------------------------------------------------------------------
    def _emit(self, r: int, tokens: list[int]) -> tuple[int, bool]:
        """Append `tokens` to request r's output, cut after an end-of-sequence token; returns
        how many it emitted and whether an end-of-sequence token ended the request."""
        eos = self.target.eos_id
        ended = eos in tokens
        if ended:
            tokens = tokens[: tokens.index(eos) + 1]
        self.outputs[r].extend(tokens)
        return len(tokens), ended

    def text_tokens(self, r: int, n: int) -> list[int]:
        """Request r's output as the engine recorded it: its first n tokens (the engine cut the
        last round at the output cap)."""
        return self.outputs[r][:n]

    def history(self, r: int) -> list[int]:
        """Request r's full token sequence so far (prompt + output)."""
        return self.prompts[r] + self.outputs[r]

    def cache_length(self, r: int) -> int:
        return self.passes.store.lengths[r]

"""The real backend: the engine's rounds run the actual drafter and target.

Per running request it keeps the anchor (the last emitted token, not yet in the KV cache), the
drafter's input features at the position that predicted it (the target layers the drafter
reads: `dsim.models.drafters.input_layers`) and, for a drafter that attends to recent
positions (llama block, `context` > 0), the window of the last `context` target positions
(`History`), slid exactly as `dsim collect` slides it (`prompt_history`, `push_history`).
A round: `draw` runs the drafter's batched pass (confidences for the policy, drafts kept for
`verify`); `verify` runs the speculative round of `dsim.models.speculative` (the one collect
and the toy decoder run) with ONE flattened target pass over [anchor, first l_r drafts] of
every request (`dsim.models.ragged.Requests`) and reports an end-of-sequence token as a stop.
`prefill` runs the step's prefill chunks as the engine schedules them (the cache grows chunk by
chunk; a second pass of the step, after the verify pass) and samples the first new token when a
request's last chunk is done; after a preemption the prefilled context is the prompt plus the
tokens generated so far.

The backend reports the tokens each request emitted (cut after an end-of-sequence token, which
it flags, by `dsim.models.speculative.emitted`); output caps are the engine's alone: a
request's text is its first `output_tokens` tokens (`text_tokens`), the count the engine
recorded.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from dsim.acceptance.calibration import apply_temperatures
from dsim.models.drafters import (
    Draft,
    DrafterConfig,
    History,
    input_layers,
    prompt_history,
    push_history,
)
from dsim.models.ragged import RaggedTarget, Requests
from dsim.models.sampling import sample
from dsim.models.speculative import emitted, verify_round

HISTORY_FIELDS = ("features", "tokens", "valid")


class DraftModel(Protocol):
    """What the backend needs of a drafter (`dsim.models.drafters.Drafter` is one)."""

    gamma: int
    config: DrafterConfig

    def draft(
        self,
        hidden: torch.Tensor,
        anchor: torch.Tensor,
        generator: torch.Generator,
        greedy: bool,
        history: History | None = None,
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
        self.layers = input_layers(drafter, target) if drafter is not None else []
        config = drafter.config if drafter is not None else None
        self.context = config.context if config is not None and config.block == "llama" else 0
        self.passes = RaggedTarget(target, self.layers)
        self.outputs: list[list[int]] = []
        self.hidden: dict[int, torch.Tensor] = {}  # the drafter's input features at the anchor
        self.anchor: dict[int, int] = {}
        self.window: dict[int, History] = {}  # (1, context, F) recent positions per request
        self.pending: dict[int, list[int]] = {}  # context being prefilled, per request
        self.tail: dict[int, torch.Tensor] = {}  # its last context + 1 positions' features
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
        rows = [int(i) for i in idx]
        hidden = torch.stack([self.hidden[r] for r in rows])
        anchor = torch.tensor([self.anchor[r] for r in rows], dtype=torch.long)
        history = self._windows(rows)
        self._draft = self.drafter.draft(hidden, anchor, self.generator, self.greedy, history)
        conf = self._draft.conf.double().numpy()
        if self.temperatures is not None:
            conf = apply_temperatures(conf, self.temperatures)
        return conf, None

    def verify(
        self, idx: np.ndarray, lengths: np.ndarray, truth: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One target pass over every request's anchor + first l_r drafts (`verify_round`):
        the tokens each emitted, the accepted drafts among them and end-of-sequence flags."""
        if not np.array_equal(idx, self.drafting):
            raise RuntimeError("verify must follow draw for the same requests")
        rows = [int(i) for i in idx]
        widest = int(lengths.max()) if len(lengths) else 0
        if widest and self._draft is None:
            raise RuntimeError("a policy verified drafts but the backend has no drafter")
        anchor = torch.tensor([self.anchor[r] for r in rows], dtype=torch.long)  # (R,)
        passes = Requests(self.passes, rows)
        if widest:
            drafts = self._draft.tokens[:, :widest]  # (R, w)
            p_draft = self.drafter.full_vocab(self._draft.probs[:, :widest], self.target.vocab_size)
        else:
            drafts = torch.zeros((len(rows), 0), dtype=torch.long)
            p_draft = torch.zeros((len(rows), 0, self.target.vocab_size))
        lengths_t = torch.as_tensor(lengths, dtype=torch.long)
        done = verify_round(anchor, drafts, p_draft, lengths_t, passes, self.generator, self.greedy)
        accepted = done.verdict.accepted  # (R,)
        features = passes.block_features  # (R, w + 1, F) or None
        if self.context:  # slide the windows as dsim collect does (padded slots never read)
            old_hidden = torch.stack([self.hidden[r] for r in rows])
            moved = push_history(
                self._windows(rows), old_hidden, anchor, accepted, drafts, features
            )
        counts, stop = emitted(done.tokens, accepted + 1, self.target.eos_id)  # (R,), (R,)
        for k, r in enumerate(rows):
            n = int(counts[k])
            self.outputs[r].extend(done.tokens[k, :n].tolist())
            if features is not None:
                self.hidden[r] = features[k, int(accepted[k])].clone()
            self.anchor[r] = int(done.verdict.next_token[k])
            if self.context:
                self.window[r] = History(*(getattr(moved, f)[k : k + 1] for f in HISTORY_FIELDS))
        self._draft = None
        return counts.numpy(), torch.minimum(accepted, counts).numpy(), stop.numpy()

    def plain(
        self, idx: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A round that verifies no draft runs as any other round: `draw` (zero confidences
        without a drafter) then `verify` with zero lengths."""
        _, truth = self.draw(idx, rng)
        return self.verify(idx, np.zeros(len(idx), np.int64), truth)

    def prefill(self, idx: list[int], tokens: list[int], done: list[bool]) -> np.ndarray | None:
        """Run this step's prefill chunks (of the prompt, plus the tokens generated before a
        preemption) in one pass after the cached part; sample the first token of the requests
        whose context this completes, and flag end-of-sequence tokens."""
        rows, blocks = [int(i) for i in idx], []
        for r, n in zip(rows, tokens, strict=True):
            if r not in self.pending:  # its first chunk: a fresh cache
                self.pending[r] = self.prompts[r] + self.outputs[r]
                capacity = len(self.prompts[r]) + int(self.caps[r]) + self.gamma + 1
                self.passes.store.open(r, capacity)
            at = self.passes.store.lengths[r]
            blocks.append(self.pending[r][at : at + n])
        states = self.passes.forward(rows, blocks)
        features = self.passes.features
        ends = np.cumsum([len(b) for b in blocks])
        for k, (r, block) in enumerate(zip(rows, blocks, strict=True)):
            self.passes.store.commit(r, len(block))
            if self.context:
                chunk = features[ends[k] - len(block) : ends[k]]
                kept = torch.cat([self.tail.get(r, chunk[:0]), chunk])
                self.tail[r] = kept[-(self.context + 1) :]
        finished = np.flatnonzero(np.asarray(done, dtype=bool))
        if not len(finished):
            return None
        last = torch.as_tensor(ends[finished] - 1)
        first = sample(self.passes.probs(states[last]), self.generator, self.greedy)
        stop = np.zeros(len(finished), dtype=bool)
        for j, k in enumerate(finished.tolist()):
            r = rows[k]
            seq = self.pending.pop(r)
            if self.passes.store.lengths[r] != len(seq):
                raise RuntimeError(f"request {r}: prefill chunks do not add up to its context")
            token = int(first[j])
            self.outputs[r].append(token)
            stop[j] = token == self.target.eos_id
            if features is not None:
                self.hidden[r] = features[int(last[j])].clone()
            self.anchor[r] = token
            if self.context:
                tail = self.tail.pop(r)
                self.window[r] = prompt_history(tail[None], [seq[-len(tail) :]], self.context)
        return stop

    def released(self, idx: np.ndarray) -> None:
        for i in idx:
            r = int(i)
            self.passes.store.drop(r)
            for state in (self.hidden, self.anchor, self.window, self.pending, self.tail):
                state.pop(r, None)

    # -- helpers ------------------------------------------------------------------------------
    def _windows(self, rows: list[int]) -> History | None:
        """The requests' recent-position windows as one batch (None: the drafter reads none)."""
        if not self.context:
            return None
        w = [self.window[r] for r in rows]
        return History(*(torch.cat([getattr(h, f) for h in w]) for f in HISTORY_FIELDS))

    def text_tokens(self, r: int, n: int) -> list[int]:
        """Request r's output as the engine recorded it: its first n tokens (the engine cut the
        last round at the output cap)."""
        return self.outputs[r][:n]

    def history(self, r: int) -> list[int]:
        """Request r's full token sequence so far (prompt + output)."""
        return self.prompts[r] + self.outputs[r]

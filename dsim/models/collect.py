"""Real speculative decoding with a trained drafter, recorded as an acceptance trace.

`spec_round` is one batched round (the drafter's pass, then the speculative round of
`dsim.models.speculative`); `collect` drives it over prompts with full-block verification and
keeps, per round, the drafter's raw confidences, the accepted prefix and the soft labels
sum_v min(p_d, p_t). The target pass also yields the drafter's input features (its chosen target
layers) and, for drafters that attend to recent positions, the history of the last `context`
positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.nn.utils.rnn import pad_sequence

from dsim.models.data import Prompt
from dsim.models.drafters import Draft, Drafter, History, input_layers, prompt_history, push_history
from dsim.models.ragged import RaggedTarget, Requests
from dsim.models.sampling import overlap, sample
from dsim.models.speculative import Round, emitted, verify_round


@dataclass
class Collected:
    """What one round produced for each of B sequences, as the trace records it."""

    draft: Draft
    round: Round
    soft_labels: torch.Tensor  # (B, gamma) sum_v min(p_d, p_t) at each draft position
    hidden: torch.Tensor  # (B, F) drafter features at the new anchor (predicted next_token)
    block_features: torch.Tensor  # (B, gamma + 1, F) features at [anchor, drafts]


def spec_round(
    passes: Requests,
    drafter: Drafter,
    hidden: torch.Tensor,
    anchor: torch.Tensor,
    generator: torch.Generator,
    greedy: bool = False,
    history: History | None = None,
) -> Collected:
    """Draft gamma tokens and verify all of them (`verify_round`). The ragged pass must keep
    the drafter's input layers (`RaggedTarget(target, input_layers(drafter, target))`)."""
    draft = drafter.draft(hidden, anchor, generator, greedy, history)
    p_draft = drafter.full_vocab(draft.probs, passes.passes.target.vocab_size)
    full = torch.full((len(anchor),), drafter.gamma, dtype=torch.long)
    done = verify_round(anchor, draft.tokens, p_draft, full, passes, generator, greedy)
    features = passes.block_features  # (B, gamma + 1, F)
    return Collected(
        draft=draft,
        round=done,
        soft_labels=overlap(p_draft, done.p_target[:, :-1]),
        hidden=features[torch.arange(len(anchor)), done.verdict.accepted],
        block_features=features,
    )


def collect(
    target,
    drafter: Drafter,
    prompts: list[Prompt],
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    greedy: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, list[list[int]]]:
    """Decode every prompt speculatively (all gamma drafts verified each round); returns the
    acceptance-trace rows and the generated token ids (in prompt order)."""
    generator = torch.Generator().manual_seed(seed)
    encoded = [target.encode_chat(p.prompt) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    frames: list[pd.DataFrame] = []
    generated: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), batch_size):
        ids = order[start : start + batch_size]
        frame, outputs = _decode_batch(
            target, drafter, [encoded[i] for i in ids], max_new_tokens, generator, greedy
        )
        frame["seq_id"] = np.asarray(ids, dtype=np.int64)[frame["seq_id"].to_numpy()]
        frame["domain"] = [prompts[i].domain for i in frame["seq_id"]]
        frames.append(frame)
        for i, out in zip(ids, outputs, strict=True):
            generated[i] = out
        if progress is not None:
            progress(len(ids))
    df = pd.concat(frames, ignore_index=True).sort_values(["seq_id", "round"], kind="stable")
    return df.reset_index(drop=True), generated


def _decode_batch(
    target,
    drafter: Drafter,
    prompts: list[list[int]],
    max_new_tokens: int,
    generator: torch.Generator,
    greedy: bool,
) -> tuple[pd.DataFrame, list[list[int]]]:
    gamma = drafter.gamma
    passes = RaggedTarget(target, input_layers(drafter, target))
    lengths = [len(p) for p in prompts]
    final = passes.prefill(prompts, max_new_tokens + gamma + 1)  # (B, H)
    anchor = sample(passes.probs(final), generator, greedy)  # prefill emits the first token
    by_prompt = pad_sequence(passes.features.split(lengths), batch_first=True)  # (B, M, F)
    hidden = by_prompt[torch.arange(len(prompts)), torch.tensor(lengths) - 1]
    history = prompt_history(by_prompt, prompts, drafter.config.context)
    outputs = [[int(t)] for t in anchor]
    live = torch.tensor([int(t) != target.eos_id for t in anchor])
    alive = torch.arange(len(prompts))  # batch row -> prompt index (and its cache)
    records: list[dict[str, np.ndarray]] = []
    rounds = np.zeros(len(prompts), dtype=np.int32)
    while True:
        if not bool(live.all()):
            for rid in alive[~live].tolist():
                passes.store.drop(rid)
            keep = torch.nonzero(live).squeeze(1)
            alive, hidden, anchor = alive[keep], hidden[keep], anchor[keep]
            history = History(history.features[keep], history.tokens[keep], history.valid[keep])
        if len(alive) == 0:
            break
        requests = Requests(passes, alive.tolist())
        result = spec_round(requests, drafter, hidden, anchor, generator, greedy, history)
        accepted = result.round.verdict.accepted
        history = push_history(
            history, hidden, anchor, accepted, result.draft.tokens, result.block_features
        )
        seq = alive.numpy()
        records.append(
            {
                "seq_id": seq,
                "round": rounds[seq].copy(),
                "accepted": accepted.numpy().copy(),
                "conf": result.draft.conf.numpy().copy(),
                "tv": result.soft_labels.numpy().copy(),
            }
        )
        rounds[seq] += 1
        room = max_new_tokens - torch.tensor([len(outputs[i]) for i in seq])
        tokens = result.round.tokens
        counts, ended = emitted(tokens, accepted + 1, target.eos_id, room)
        for row, prompt_idx in enumerate(seq):
            outputs[prompt_idx].extend(tokens[row, : counts[row]].tolist())
        live = ~ended & (counts < room)
        hidden, anchor = result.hidden, result.round.verdict.next_token
    return _trace_frame(records, gamma), outputs


def _trace_frame(records: list[dict[str, np.ndarray]], gamma: int) -> pd.DataFrame:
    """The rounds as trace rows; a batch whose every prompt ended on its first token has none,
    and gives the same columns with no rows (so batches concatenate whatever they held)."""
    if not records:  # shape [0] and [0, gamma]: the columns of a batch without rounds
        empty = np.zeros(0, np.int64)
        records = [{"seq_id": empty, "round": empty, "accepted": empty,
                    "conf": np.zeros((0, gamma)), "tv": np.zeros((0, gamma))}]  # fmt: skip
    cat = {key: np.concatenate([r[key] for r in records]) for key in records[0]}
    frame = pd.DataFrame(
        {
            "seq_id": cat["seq_id"].astype(np.int64),
            "round": cat["round"].astype(np.int32),
            "gamma": np.full(len(cat["seq_id"]), gamma, dtype=np.int32),
            "accepted": cat["accepted"].astype(np.int32),
        }
    )
    for k in range(gamma):
        frame[f"conf_{k + 1}"] = cat["conf"][:, k].astype(np.float64)
    for k in range(gamma):
        frame[f"tv_{k + 1}"] = np.clip(cat["tv"][:, k].astype(np.float64), 0.0, 1.0)
    return frame

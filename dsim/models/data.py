"""Training and evaluation data for drafters: prompts by domain, a deterministic split, the
target's own responses (temperature 1), and a cache of its final hidden states.

The cache keeps, for every response position, the final-normed hidden state (the input of the
LM head) and the log-partition of the full 49k-vocabulary softmax. Training then gets exact
target probabilities on the drafter's vocabulary as exp(h . W_v - lse) from one small matmul,
never touching the full LM head again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from dsim.errors import InputError
from dsim.fileio import atomic_path
from dsim.models.decode import generate

PROMPTS_DIR = Path("traces/prompts")
SPLIT_FILES = {"train": "train.jsonl", "heldout": "heldout.jsonl"}

# Spec-Bench's eight MT-Bench categories repeat the MT-Bench questions: those come from MT-Bench.
SPECBENCH_DOMAINS = {
    "math_reasoning": "math",
    "translation": "translation",
    "summarization": "summarization",
    "qa": "qa",
    "rag": "rag",
}
MTBENCH_DOMAINS = {"coding": "code", "math": "math"}  # other MT-Bench categories are chat
CODE_INSTRUCTION = "Complete this Python function.\n\n"


@dataclass(frozen=True)
class Prompt:
    id: str
    domain: str
    prompt: str


def source_prompts(folder: Path = PROMPTS_DIR) -> list[Prompt]:
    """Every prompt of the three public files (first turn only), tagged with its domain."""
    out: list[Prompt] = []
    for row in _jsonl(folder / "HumanEval.jsonl.gz"):
        out.append(Prompt(f"humaneval/{row['task_id']}", "code", CODE_INSTRUCTION + row["prompt"]))
    for row in _jsonl(folder / "mtbench_question.jsonl"):
        domain = MTBENCH_DOMAINS.get(row["category"], "chat")
        out.append(Prompt(f"mtbench/{row['question_id']}", domain, row["turns"][0]))
    for row in _jsonl(folder / "specbench_question.jsonl"):
        if row["category"] in SPECBENCH_DOMAINS:
            domain = SPECBENCH_DOMAINS[row["category"]]
            out.append(Prompt(f"specbench/{row['question_id']}", domain, row["turns"][0]))
    return out


def split_prompts(
    prompts: list[Prompt], per_domain: dict[str, int], heldout: dict[str, int]
) -> dict[str, list[Prompt]]:
    """Deterministic split by prompt: within each domain, order prompts by a hash of their id,
    take the first `heldout[d]` as held-out and the next `per_domain[d] - heldout[d]` as train."""
    split: dict[str, list[Prompt]] = {"train": [], "heldout": []}
    for domain in sorted({p.domain for p in prompts}):
        if domain not in per_domain:
            continue
        ranked = sorted((p for p in prompts if p.domain == domain), key=lambda p: _hash(p.id))
        ranked = ranked[: per_domain[domain]]
        n_held = heldout.get(domain, 0)
        split["heldout"] += ranked[:n_held]
        split["train"] += ranked[n_held:]
    return split


def write_prompt_file(path: Path, prompts: list[Prompt]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(asdict(p)) + "\n" for p in prompts))


def read_prompt_file(path: str | Path) -> list[Prompt]:
    """A split file (one JSON object a line: id, domain, prompt); InputError names a bad row."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "prompt file not found")
    prompts = []
    for row_no, row in enumerate(_jsonl(path), start=1):
        if not isinstance(row, dict) or not {"id", "domain", "prompt"} <= row.keys():
            raise InputError(path, row_no, "expected an object with id, domain, prompt")
        prompts.append(Prompt(str(row["id"]), str(row["domain"]), str(row["prompt"])))
    if not prompts:
        raise InputError(path, None, "no prompts")
    return prompts


def generate_responses(
    target,
    prompts: list[Prompt],
    max_new_tokens: int,
    max_prompt_tokens: int,
    batch_size: int,
    seed: int,
    progress=None,
) -> list[dict]:
    """The target's own answers at temperature 1 (no top-k/top-p), batched with KV caches,
    with the hidden states and log-partitions the sampling computed anyway.

    Prompts longer than `max_prompt_tokens` are skipped (they are not returned)."""
    encoded = [(p, target.encode_chat(p.prompt)) for p in prompts]
    encoded = [(p, ids) for p, ids in encoded if len(ids) <= max_prompt_tokens]
    encoded.sort(key=lambda item: len(item[1]))  # similar lengths batch with little padding
    out = []
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        answers = generate(target, [ids for _, ids in chunk], max_new_tokens, generator)
        for (prompt, _), (response, hidden, lse) in zip(chunk, answers, strict=True):
            out.append({"prompt": prompt, "tokens": response, "hidden": hidden, "lse": lse})
        if progress is not None:
            progress(len(chunk))
    return out


@dataclass
class HiddenCache:
    """Final hidden states of the target over its own responses, flattened over sequences.

    Row j of sequence s sits at offsets[s] + j: `hidden` there is the target's state at the
    position that predicts response token j, `token` is response token j, `lse` the full-vocab
    log-partition of that position's logits."""

    hidden: torch.Tensor  # (N, H) float32
    lse: torch.Tensor  # (N,) float32
    token: torch.Tensor  # (N,) int64
    offsets: torch.Tensor  # (S + 1,) int64
    domains: list[str]
    ids: list[str]
    fingerprint: str

    def save(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            torch.save(asdict(self), tmp)

    @classmethod
    def load(cls, path: Path) -> HiddenCache:
        try:
            blob = torch.load(path, weights_only=True)
            return cls(**blob)
        except (OSError, RuntimeError, TypeError, KeyError) as err:
            raise InputError(
                path, None, f"not a hidden-state cache ({str(err).splitlines()[0]})"
            ) from err

    def anchors(self, gamma: int) -> torch.Tensor:
        """Rows j whose next `gamma` response tokens exist: training anchors."""
        bounds = self.offsets.tolist()
        rows = [torch.arange(lo, hi - gamma) for lo, hi in zip(bounds, bounds[1:], strict=False)]
        return torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)


def hidden_cache(target, responses: list[dict]) -> HiddenCache:
    """Flatten generated responses into the cache training reads."""
    lengths = torch.tensor([len(r["tokens"]) for r in responses], dtype=torch.long)
    offsets = torch.zeros(len(responses) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(lengths, 0)
    return HiddenCache(
        hidden=torch.cat([r["hidden"] for r in responses]).float().contiguous(),
        lse=torch.cat([r["lse"] for r in responses]).float(),
        token=torch.tensor([t for r in responses for t in r["tokens"]], dtype=torch.long),
        offsets=offsets,
        domains=[r["prompt"].domain for r in responses],
        ids=[r["prompt"].id for r in responses],
        fingerprint=target.fingerprint,
    )


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for row_no, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as err:
                        raise InputError(path, row_no, f"bad JSON ({err.msg})") from err
    except OSError as err:
        raise InputError(path, None, f"cannot read ({str(err).splitlines()[0]})") from err


def prepare_data(
    target,
    cache_path: Path,
    per_domain: dict[str, int],
    heldout: dict[str, int],
    max_new_tokens: int,
    max_prompt_tokens: int,
    batch_size: int,
    seed: int,
    folder: Path = PROMPTS_DIR,
    progress=None,
) -> dict[str, int]:
    """Write the split files beside the prompts and the hidden-state cache of the train split.

    `progress(n)` is called after each batch of n prompts. Returns counts for the report."""
    split = split_prompts(source_prompts(folder), per_domain, heldout)
    for name, prompts in split.items():
        write_prompt_file(folder / SPLIT_FILES[name], prompts)
    train = split["train"]

    responses = generate_responses(
        target, train, max_new_tokens, max_prompt_tokens, batch_size, seed, progress
    )
    cache = hidden_cache(target, responses)
    cache.save(cache_path)
    return {
        "train_prompts": len(train),
        "heldout_prompts": len(split["heldout"]),
        "skipped_long": len(train) - len(responses),
        "response_tokens": int(cache.offsets[-1]),
    }

"""Training and evaluation data for drafters: prompts by domain, the held-out split, and the
training-data cache: the target's own answers (temperature 1) with its states at every answer
position.

The cache keeps, per answer position, the final-normed hidden state (the LM head's input, fp32),
the log-partition of the full 49k-vocabulary softmax, and the states of a few other target
layers (fp16), plus the last `context` prompt positions before each answer (context for the
drafter's attention). The target's full distribution (300k positions x 49k tokens) is never
stored: training recomputes it on the draft vocabulary as exp(h . W_v - lse), exact.

It is built resumably: one file per batch of prompts in a folder whose meta.json names the
target fingerprint and the settings; a rerun skips the batches already written. Each batch's
sampling seed depends only on the seed and the batch number, so a resumed build writes the same
bytes as an uninterrupted one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from dsim.errors import InputError
from dsim.fileio import atomic_path, write_json
from dsim.models.decode import generate

PROMPTS_DIR = Path("traces/prompts")
HELDOUT_FILE = PROMPTS_DIR / "heldout.jsonl"
DATA_FORMAT = "dsim-train-data/1"

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


def training_prompts(folder: Path, heldout: list[Prompt], limit: int | None = None) -> list[Prompt]:
    """Every public prompt except the held-out ones; with `limit`, a fixed subset that takes
    the domains in turn (each in the order of a hash of the ids), for smoke runs."""
    held = {p.id for p in heldout}
    prompts = [p for p in source_prompts(folder) if p.id not in held]
    if limit is None:
        return prompts
    ranked = sorted(prompts, key=lambda p: _hash(p.id))
    turn = {p.id: sum(q.domain == p.domain for q in ranked[:i]) for i, p in enumerate(ranked)}
    return sorted(ranked, key=lambda p: (turn[p.id], p.domain))[:limit]


@dataclass(frozen=True)
class DataSpec:
    """What a training-data cache holds; kept in its meta.json and checked on resume."""

    samples: int = 5  # temperature-1 answers per prompt (~550 prompts x 5 x ~115 = 300k tokens)
    max_new_tokens: int = 160
    max_prompt_tokens: int = 1024
    batch_size: int = 32  # answers sampled together (one cache file each; whole prompts)
    seed: int = 0
    layers: tuple[int, ...] = (2, 15)  # target hidden_states kept besides the final one
    context: int = 16  # prompt positions kept before each answer


def default_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low and middle layers (the final state is always kept)."""
    return tuple(sorted({min(2, num_layers - 1), num_layers // 2}))


def build_data(
    target,
    prompts: list[Prompt],
    spec: DataSpec,
    folder: Path,
    progress: Callable[[int, int], None] | None = None,
    stop_after: int | None = None,
    shard: tuple[int, int] = (0, 1),
) -> dict[str, int]:
    """Sample `spec.samples` answers per prompt and write one cache file per batch under
    `folder` (skipping files already there). `progress(done, total)` counts answers;
    `stop_after` batches written ends the call early (tests interrupt builds with it).
    With `shard=(k, n)` only batches k, k + n, ... are built, so n processes can share a build
    (the files do not depend on who wrote them)."""
    jobs = [(p, target.encode_chat(p.prompt)) for p in prompts]
    skipped = sum(len(ids) > spec.max_prompt_tokens for _, ids in jobs)
    jobs = [job for job in jobs if len(job[1]) <= spec.max_prompt_tokens]
    jobs.sort(key=lambda job: (len(job[1]), job[0].id))  # little padding per batch
    per = max(1, spec.batch_size // spec.samples)  # the samples of a prompt share its prefill
    batches = [jobs[i : i + per] for i in range(0, len(jobs), per)]
    meta = {
        "format": DATA_FORMAT,
        "target": target.fingerprint,
        "spec": asdict(spec),
        "prompts": _hash("\n".join(sorted(p.id for p in prompts))),
        "batches": len(batches),
        "final_layer": int(target.model.config.num_hidden_layers),
    }
    _claim(folder, meta)
    written = new_tokens = done = 0
    mine = [(i, b) for i, b in enumerate(batches) if i % shard[1] == shard[0]]
    total = sum(len(b) for _, b in mine) * spec.samples
    for index, batch in mine:
        path = _part(folder, index)
        if not path.exists():
            if stop_after is not None and written == stop_after:
                break
            blob = _sample_batch(target, batch, spec, index)
            _save(path, blob)
            written += 1
            new_tokens += len(blob["token"]) - int(blob["answer_start"].sum())
        done += len(batch) * spec.samples
        if progress is not None:
            progress(done, total)
    return {
        "prompts": len(prompts),
        "skipped_long": skipped,
        "batches": len(batches),
        "batches_written": written,
        "new_answer_tokens": new_tokens,
    }


def _claim(folder: Path, meta: dict) -> None:
    """Start or resume the cache in `folder`; refuse one made for other settings."""
    path = folder / "meta.json"
    if path.exists():
        if json.loads(path.read_text()) != json.loads(json.dumps(meta)):
            raise InputError(
                path, None, "cache was built for another target, settings or prompt set"
            )
        return
    write_json(path, meta)


def _sample_batch(target, batch, spec: DataSpec, index: int) -> dict:
    generator = torch.Generator().manual_seed(spec.seed * 1_000_003 + index)
    answers = generate(
        target, [ids for _, ids in batch], spec.max_new_tokens, generator, spec.layers,
        spec.context, spec.samples,
    )  # fmt: skip
    lengths = [len(a["tail_tokens"]) + len(a["tokens"]) for a in answers]
    offsets = torch.zeros(len(answers) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return {
        "ids": [p.id for p, _ in batch for _ in range(spec.samples)],
        "domains": [p.domain for p, _ in batch for _ in range(spec.samples)],
        "samples": [s for _ in batch for s in range(spec.samples)],
        "offsets": offsets,
        "answer_start": torch.tensor([len(a["tail_tokens"]) for a in answers], dtype=torch.long),
        "hidden": torch.cat([t for a in answers for t in (a["tail_hidden"], a["hidden"])]).float(),
        "layers": torch.cat([t for a in answers for t in (a["tail_layers"], a["layers"])]).to(
            torch.float16
        ),
        "lse": torch.cat(
            [t for a in answers for t in (torch.zeros(len(a["tail_tokens"])), a["lse"])]
        ).float(),
        "token": torch.cat(
            [t for a in answers for t in (a["tail_tokens"], torch.tensor(a["tokens"]))]
        ).long(),
    }


def _part(folder: Path, index: int) -> Path:
    return folder / f"part-{index:05d}.pt"


def _save(path: Path, blob: dict) -> None:
    """torch.save into memory first: the bytes then do not depend on the temporary file name."""
    buffer = io.BytesIO()
    torch.save(blob, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


@dataclass
class TrainCache:
    """A complete training-data cache, flattened over sequences.

    Row r of sequence s sits at offsets[s] + r. Rows before answer_start[s] are prompt
    positions (context only); from there on, row j holds the target's state at the position
    that predicts answer token j, `token` is that answer token and `lse` the log-partition of
    that position's logits. For every row, `token` is the token that followed its position."""

    hidden: torch.Tensor  # (N, H) float32, final normed state
    layers: torch.Tensor  # (N, L, H) float16, the other kept layers
    lse: torch.Tensor  # (N,) float32 (0 on prompt rows)
    token: torch.Tensor  # (N,) int64
    offsets: torch.Tensor  # (S + 1,) int64
    answer_start: torch.Tensor  # (S,) int64, relative to offsets[s]
    domains: list[str]
    ids: list[str]
    fingerprint: str
    layer_ids: tuple[int, ...]  # hidden_states index of each column of `layers`
    final_layer: int  # hidden_states index of `hidden`

    @classmethod
    def load(cls, folder: Path) -> TrainCache:
        """All batch files of a finished build; InputError if missing or unfinished."""
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            raise InputError(folder, None, "no training-data cache here (run dsim prepare-data)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != DATA_FORMAT:
            raise InputError(meta_path, None, f"not a {DATA_FORMAT} cache")
        missing = [i for i in range(meta["batches"]) if not _part(folder, i).exists()]
        if missing:
            raise InputError(
                folder, None, f"{len(missing)} of {meta['batches']} batches missing: rerun "
                "the same dsim prepare-data command to finish the build",
            )  # fmt: skip
        blobs = []
        for i in range(meta["batches"]):
            try:
                blobs.append(torch.load(_part(folder, i), weights_only=True))
            except Exception as err:  # torch raises many types for a damaged file
                raise InputError(
                    _part(folder, i), None, f"unreadable cache file ({str(err).splitlines()[0]})"
                ) from err
        sizes = torch.tensor([int(b["offsets"][-1]) for b in blobs])
        shift = torch.cumsum(sizes, 0) - sizes
        offsets = torch.cat([b["offsets"][:-1] + d for b, d in zip(blobs, shift, strict=True)])
        return cls(
            hidden=torch.cat([b["hidden"] for b in blobs]),
            layers=torch.cat([b["layers"] for b in blobs]),
            lse=torch.cat([b["lse"] for b in blobs]),
            token=torch.cat([b["token"] for b in blobs]),
            offsets=torch.cat([offsets, sizes.sum()[None]]),
            answer_start=torch.cat([b["answer_start"] for b in blobs]),
            domains=[d for b in blobs for d in b["domains"]],
            ids=[i for b in blobs for i in b["ids"]],
            fingerprint=meta["target"],
            layer_ids=tuple(meta["spec"]["layers"]),
            final_layer=int(meta["final_layer"]),
        )

    @property
    def answer_tokens(self) -> int:
        return int(self.offsets[-1]) - int(self.answer_start.sum())

    def anchors(self, gamma: int) -> torch.Tensor:
        """Answer rows j whose next `gamma` answer tokens exist: training anchors (none from an
        answer of `gamma` tokens or fewer, e.g. one the target ended early)."""
        starts = (self.offsets[:-1] + self.answer_start).tolist()
        ends = self.offsets[1:].tolist()
        rows = [torch.arange(lo, max(lo, hi - gamma)) for lo, hi in zip(starts, ends, strict=True)]
        return torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)

    def seq_start(self) -> torch.Tensor:
        """(N,) first row of each row's sequence: history never crosses sequences."""
        lengths = self.offsets.diff()
        return torch.repeat_interleave(self.offsets[:-1], lengths)

    def features(self, rows: torch.Tensor, layers: list[int]) -> torch.Tensor:
        """(..., len(layers) * H) float32: the requested hidden_states of `rows`, concatenated
        (no layers: the final state only)."""
        cols = []
        for layer in layers or [self.final_layer]:
            if layer == self.final_layer:
                cols.append(self.hidden[rows])
            elif layer in self.layer_ids:
                cols.append(self.layers[rows, self.layer_ids.index(layer)].float())
            else:
                raise InputError(None, None, f"target layer {layer} is not in the data cache")
        return torch.cat(cols, dim=-1)

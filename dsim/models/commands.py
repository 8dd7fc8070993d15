"""CLI for the real-model side: prepare-data, train, collect. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim import spec_grammar
from dsim.errors import InputError
from dsim.fileio import check_output_dir, check_output_file
from dsim.force_option import FORCE
from dsim.lab import require_lab
from dsim.models.target import SMOLLM2, TINY
from dsim.report import progress_bar

PROMPTS_DIR = Path("traces/prompts")
DEFAULT_DATA = Path(".cache/dsim/data/main")
DEFAULT_LOSS = "kl=1,tv=0.1,ce=0"
TARGET_HELP = f"{SMOLLM2}, {TINY}, or a HF folder"
RECIPE, ARCHITECTURE = "Training recipe", "Drafter architecture"


def parse_counts(text: str, option: str) -> dict[str, float]:
    """`kl=1,tv=0.1` -> {"kl": 1.0, "tv": 0.1}."""
    pairs = spec_grammar.key_values(text, option, "NAME=NUMBER")
    return {name: spec_grammar.number(v, f"{option}: {name}") for name, v in pairs.items()}


def register(app: typer.Typer) -> None:
    """Add prepare-data, train and collect to the dsim app."""
    app.command("prepare-data")(prepare_data_cmd)
    app.command("train")(train_cmd)
    app.command("collect")(collect_cmd)


def _shard(text: str) -> tuple[int, int]:
    """`--shard K/N` -> (K, N), K < N."""
    part, _, parts = text.partition("/")
    if not (part.isdigit() and parts.isdigit() and int(part) < int(parts)):
        raise InputError(None, None, f"--shard: expected K/N with K < N, got {text!r}")
    return int(part), int(parts)


def _kept_layers(text: str | None, n_layers: int) -> tuple[int, ...]:
    """`--layers` of prepare-data: target layers kept besides the final one."""
    from dsim.models.data import default_layers

    kept = spec_grammar.ints(text, "--layers", minimum=0) if text else default_layers(n_layers)
    if any(not 0 <= i < n_layers for i in kept):
        raise InputError(None, None, f"--layers must lie in 0..{n_layers - 1}")
    return kept


def prepare_data_cmd(
    target: str = typer.Option(SMOLLM2, help=TARGET_HELP),
    out: Path = typer.Option(DEFAULT_DATA, help="cache folder (resumable; not committed)"),
    heldout: Path = typer.Option(PROMPTS_DIR / "heldout.jsonl", help="prompts never trained on"),
    prompts_dir: Path = typer.Option(PROMPTS_DIR, help="the public prompt files"),
    samples: int = typer.Option(5, help="temperature-1 answers per prompt"),
    max_new_tokens: int = typer.Option(160, help="answer length cap"),
    max_prompt_tokens: int = typer.Option(1024, help="longer prompts are skipped"),
    batch_size: int = typer.Option(32, help="answers sampled together (one cache file)"),
    seed: int = typer.Option(0, help="sampling seed"),
    layers: str | None = typer.Option(
        None, help="target layers kept besides the final one (default: low and middle)"
    ),
    context: int = typer.Option(16, help="prompt positions kept before each answer"),
    limit: int | None = typer.Option(None, help="only this many prompts (smoke runs)"),
    shard: str = typer.Option("0/1", help="K/N: build batches K, K+N, ... (N processes)"),
    threads: int = typer.Option(1, help="torch CPU threads"),
) -> None:
    """Let the target answer every public prompt except the held-out ones at temperature 1
    and cache its states for training; rerun the same command to resume a build."""
    require_lab("dsim prepare-data")
    import torch

    from dsim.models.data import (
        DataSpec,
        build_data,
        read_prompt_file,
        training_prompts,
        write_prompt_file,
    )
    from dsim.models.target import load_target

    shards = _shard(shard)
    check_output_dir(out, "meta.json")  # a cache folder dsim started, or a new or empty one
    torch.set_num_threads(threads)
    model = load_target(target)
    kept = _kept_layers(layers, int(model.model.config.num_hidden_layers))
    spec = DataSpec(samples, max_new_tokens, max_prompt_tokens, batch_size, seed, kept, context)
    prompts = training_prompts(prompts_dir, read_prompt_file(heldout), limit)
    if limit is None:
        write_prompt_file(prompts_dir / "train.jsonl", prompts)
    with progress_bar("generating answers", None) as bar:
        stats = build_data(model, prompts, spec, out, progress=bar, shard=shards)
    typer.echo(" ".join(f"{k}={v}" for k, v in stats.items()) + f" out={out}")


def _check_kinds(drafter: str, block: str) -> None:
    from dsim.models.drafters import KINDS

    if drafter not in KINDS:
        raise InputError(None, None, f"--drafter must be one of {', '.join(KINDS)}")
    if block not in ("llama", "encoder"):
        raise InputError(None, None, "--block must be llama or encoder")


def _loss_weights(text: str):
    """`--loss kl=1,tv=0.1`: the loss weights (unnamed ones are 0)."""
    from dsim.models.train import LossWeights

    weights = parse_counts(text, "--loss")
    if not weights.keys() <= {"kl", "tv", "ce"}:
        raise InputError(None, None, "--loss names must be kl, tv or ce")
    return LossWeights(**{k: weights.get(k, 0.0) for k in ("kl", "tv", "ce")})


def train_cmd(
    drafter: str = typer.Option(..., help="ar, parallel, markov, rnn or mtp1"),
    out: Path = typer.Option(..., help="drafter checkpoint to write (small, committable)"),
    gamma: int = typer.Option(7, help="draft block length (mtp1 always drafts 1)"),
    steps: int = typer.Option(8000, help="optimizer steps", rich_help_panel=RECIPE),
    batch_size: int = typer.Option(64, help="anchors per step", rich_help_panel=RECIPE),
    lr: float = typer.Option(
        2e-3, help="peak learning rate (warm-up, cosine to 10%)", rich_help_panel=RECIPE
    ),
    warmup: int = typer.Option(
        300, help="warm-up steps (at most a tenth of the run)", rich_help_panel=RECIPE
    ),
    seed: int = typer.Option(0, help="seed for init and batch sampling", rich_help_panel=RECIPE),
    vocab_size: int = typer.Option(8192, help="draft vocabulary size", rich_help_panel=RECIPE),
    loss: str = typer.Option(DEFAULT_LOSS, help="loss weights kl, tv, ce", rich_help_panel=RECIPE),
    block: str = typer.Option(
        "llama",
        help="llama (target-width layer) or encoder (old)",
        rich_help_panel=ARCHITECTURE,
    ),
    layers: str | None = typer.Option(
        None,
        help="target layers read (default: all in the cache); encoder: final only",
        rich_help_panel=ARCHITECTURE,
    ),
    context: int = typer.Option(
        16, help="recent target positions attended to (llama)", rich_help_panel=ARCHITECTURE
    ),
    parallel_layers: int = typer.Option(
        2, help="block depth of parallel/markov/rnn", rich_help_panel=ARCHITECTURE
    ),
    width: int = typer.Option(
        256, help="encoder block width (llama: the target's)", rich_help_panel=ARCHITECTURE
    ),
    target: str = typer.Option(SMOLLM2, help=TARGET_HELP),
    data: Path = typer.Option(DEFAULT_DATA, help="training-data cache (dsim prepare-data)"),
    state: Path | None = typer.Option(
        None, help="training state file (default .cache/dsim/OUTNAME.state.pt)"
    ),
    resume: bool = typer.Option(False, help="continue from the training state if present"),
    threads: int = typer.Option(1, help="torch CPU threads"),
    force: bool = FORCE,
) -> None:
    """Train a drafter on cached target states (docs/design.md, The drafter family)."""
    require_lab("dsim train")
    import torch

    from dsim.models.data import TrainCache
    from dsim.models.target import load_target
    from dsim.models.train import TrainSettings, train_drafter

    _check_kinds(drafter, block)
    weights = _loss_weights(loss)
    settings = TrainSettings(
        steps,
        batch_size,
        lr,
        warmup,
        seed,
        vocab_size,
        block=block,
        feature_layers=None if layers is None else spec_grammar.ints(layers, "--layers", minimum=0),
        context=context,
        parallel_layers=parallel_layers,
        width=width,
        loss=weights,
    )
    torch.set_num_threads(threads)
    state = _train_outputs(out, state, resume, force)
    cache = TrainCache.load(data)
    model = load_target(target)
    with progress_bar(f"train {drafter}", steps) as bar:

        def report(step: int, loss: float, parts: dict) -> None:
            shown = " ".join(f"{k}={v:.3f}" for k, v in parts.items())
            bar.describe(f"{drafter} loss={loss:.3f} {shown}")
            bar(step)

        stats = train_drafter(drafter, gamma, cache, model, settings, out, state, resume, report)
    typer.echo(" ".join(f"{k}={v:.4g}" for k, v in stats.items()) + f" out={out}")


def _train_outputs(out: Path, state: Path | None, resume: bool, force: bool) -> Path:
    """The training state's path; both outputs checked before the training, not after it (a
    resumed state is read, and refused if it is not one)."""
    from dsim.models.checkpoint import is_checkpoint
    from dsim.models.train import is_training_state

    state = state or Path(".cache/dsim") / f"{out.stem}.state.pt"
    check_output_file(out, force, ours=is_checkpoint)
    if not (resume and state.exists()):
        check_output_file(state, force, ours=is_training_state)
    return state


def collect_cmd(
    drafter: Path = typer.Option(..., help="drafter checkpoint (dsim train)"),
    prompts: Path = typer.Option(..., help="prompt file: JSON lines with id, domain, prompt"),
    out: Path = typer.Option(..., help="acceptance trace to write (NAME.parquet + NAME.json)"),
    target: str = typer.Option(SMOLLM2, help=TARGET_HELP),
    greedy: bool = typer.Option(False, help="greedy drafting and verification"),
    max_new_tokens: int = typer.Option(128, help="answer length cap"),
    limit: int | None = typer.Option(None, help="use only the first N prompts"),
    batch_size: int = typer.Option(16, help="sequences decoded together"),
    seed: int = typer.Option(0, help="sampling seed"),
    threads: int = typer.Option(1, help="torch CPU threads"),
    force: bool = FORCE,
) -> None:
    """Speculative decoding with full-block verification; records an acceptance trace."""
    import shlex
    import sys

    require_lab("dsim collect")
    import torch

    from dsim.acceptance.trace import write_acceptance_trace
    from dsim.models.checkpoint import load_drafter
    from dsim.models.collect import collect
    from dsim.models.data import read_prompt_file
    from dsim.models.target import load_target

    check_output_file(out, force, sidecar=True)  # before the decoding, not after it
    torch.set_num_threads(threads)
    chosen = read_prompt_file(prompts)[:limit]
    model = load_target(target)
    draft_model = load_drafter(drafter, model)
    with progress_bar(f"collect {drafter.stem}", len(chosen)) as bar:
        df, _ = collect(
            model, draft_model, chosen, max_new_tokens, batch_size, seed, greedy, bar.advance
        )
    meta = {
        "target": model.fingerprint,
        "drafter": str(drafter),
        "dataset": str(prompts),
        "temperature": 0.0 if greedy else 1.0,
        "command": shlex.join(["dsim", *sys.argv[1:]]),
    }
    write_acceptance_trace(df, out, meta)
    tau = 1 + df["accepted"].mean()
    typer.echo(f"rounds={len(df)} sequences={df['seq_id'].nunique()} tau={tau:.3f} out={out}")

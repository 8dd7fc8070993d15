"""CLI for the real-model side: prepare-data, train, collect. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim import spec_grammar
from dsim.errors import InputError
from dsim.report import progress_bar

PROMPTS_DIR = Path("traces/prompts")
DEFAULT_DATA = Path(".cache/dsim/data/main")
DEFAULT_LOSS = "kl=1,tv=0.1,ce=0"


def parse_counts(text: str, option: str) -> dict[str, float]:
    """`kl=1,tv=0.1` -> {"kl": 1.0, "tv": 0.1}."""
    pairs = spec_grammar.key_values(text, option, "NAME=NUMBER")
    return {name: spec_grammar.number(v, f"{option}: {name}") for name, v in pairs.items()}


def _layers(text: str) -> tuple[int, ...]:
    """`--layers 2,15,30`: target layer indices (an empty list keeps none)."""
    return spec_grammar.ints(text, "--layers", minimum=0) if text.strip() else ()


def register(app: typer.Typer) -> None:
    """Add prepare-data, train and collect to the dsim app."""

    @app.command("prepare-data")
    def prepare_data_cmd(
        target: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny, or a HF folder"),
        out: Path = typer.Option(DEFAULT_DATA, help="cache folder (resumable; not committed)"),
        heldout: Path = typer.Option(
            PROMPTS_DIR / "heldout.jsonl", help="prompts never trained on"
        ),
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
        import torch

        from dsim.models.data import (
            DataSpec,
            build_data,
            default_layers,
            read_prompt_file,
            training_prompts,
            write_prompt_file,
        )
        from dsim.models.target import load_target

        part, _, parts = shard.partition("/")
        if not (part.isdigit() and parts.isdigit() and int(part) < int(parts)):
            raise InputError(None, None, f"--shard: expected K/N with K < N, got {shard!r}")
        torch.set_num_threads(threads)
        model = load_target(target)
        n_layers = int(model.model.config.num_hidden_layers)
        kept = (
            spec_grammar.ints(layers, "--layers", minimum=0) if layers else default_layers(n_layers)
        )
        if any(not 0 <= i < n_layers for i in kept):
            raise InputError(None, None, f"--layers must lie in 0..{n_layers - 1}")
        spec = DataSpec(samples, max_new_tokens, max_prompt_tokens, batch_size, seed, kept, context)
        prompts = training_prompts(prompts_dir, read_prompt_file(heldout), limit)
        if limit is None:
            write_prompt_file(prompts_dir / "train.jsonl", prompts)
        with progress_bar("generating answers", None) as bar:
            stats = build_data(
                model, prompts, spec, out, progress=bar, shard=(int(part), int(parts))
            )
        typer.echo(" ".join(f"{k}={v}" for k, v in stats.items()) + f" out={out}")

    @app.command("train")
    def train_cmd(
        drafter: str = typer.Option(..., help="ar, parallel, markov, rnn or mtp1"),
        out: Path = typer.Option(..., help="drafter checkpoint to write (small, committable)"),
        gamma: int = typer.Option(7, help="draft block length (mtp1 always drafts 1)"),
        steps: int = typer.Option(8000, help="optimizer steps"),
        batch_size: int = typer.Option(64, help="anchors per step"),
        lr: float = typer.Option(2e-3, help="peak learning rate (warm-up, cosine to 10%)"),
        warmup: int = typer.Option(300, help="warm-up steps (at most a tenth of the run)"),
        seed: int = typer.Option(0, help="seed for init and batch sampling"),
        vocab_size: int = typer.Option(8192, help="draft vocabulary size"),
        block: str = typer.Option("llama", help="llama (target-width layer) or encoder (old)"),
        layers: str | None = typer.Option(
            None, help="target layers read (default: all in the cache); encoder: final only"
        ),
        context: int = typer.Option(16, help="recent target positions attended to (llama)"),
        parallel_layers: int = typer.Option(2, help="block depth of parallel/markov/rnn"),
        width: int = typer.Option(256, help="encoder block width (llama: the target's)"),
        loss: str = typer.Option(DEFAULT_LOSS, help="loss weights kl, tv, ce"),
        target: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny, or a HF folder"),
        data: Path = typer.Option(DEFAULT_DATA, help="training-data cache (dsim prepare-data)"),
        state: Path | None = typer.Option(
            None, help="training state file (default .cache/dsim/OUTNAME.state.pt)"
        ),
        resume: bool = typer.Option(False, help="continue from the training state if present"),
        threads: int = typer.Option(1, help="torch CPU threads"),
    ) -> None:
        """Train a drafter on cached target states (docs/design.md, The drafter family)."""
        import torch

        from dsim.models.data import TrainCache
        from dsim.models.drafters import KINDS
        from dsim.models.target import load_target
        from dsim.models.train import LossWeights, TrainSettings, train_drafter

        if drafter not in KINDS:
            raise InputError(None, None, f"--drafter must be one of {', '.join(KINDS)}")
        if block not in ("llama", "encoder"):
            raise InputError(None, None, "--block must be llama or encoder")
        weights = parse_counts(loss, "--loss")
        if not weights.keys() <= {"kl", "tv", "ce"}:
            raise InputError(None, None, "--loss names must be kl, tv or ce")
        torch.set_num_threads(threads)
        state = state or Path(".cache/dsim") / f"{out.stem}.state.pt"
        settings = TrainSettings(
            steps,
            batch_size,
            lr,
            warmup,
            seed,
            vocab_size,
            block=block,
            feature_layers=spec_grammar.ints(layers, "--layers", minimum=0)
            if layers is not None
            else None,
            context=context,
            parallel_layers=parallel_layers,
            width=width,
            loss=LossWeights(**{k: weights.get(k, 0.0) for k in ("kl", "tv", "ce")}),
        )
        cache = TrainCache.load(data)
        model = load_target(target)
        with progress_bar(f"train {drafter}", steps) as bar:

            def report(step: int, loss: float, parts: dict) -> None:
                shown = " ".join(f"{k}={v:.3f}" for k, v in parts.items())
                bar.describe(f"{drafter} loss={loss:.3f} {shown}")
                bar(step)

            stats = train_drafter(
                drafter, gamma, cache, model, settings, out, state, resume, report
            )
        typer.echo(" ".join(f"{k}={v:.4g}" for k, v in stats.items()) + f" out={out}")

    @app.command("collect")
    def collect_cmd(
        drafter: Path = typer.Option(..., help="drafter checkpoint (dsim train)"),
        prompts: Path = typer.Option(..., help="prompt file: JSON lines with id, domain, prompt"),
        out: Path = typer.Option(..., help="acceptance trace to write (NAME.parquet + NAME.json)"),
        target: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny, or a HF folder"),
        greedy: bool = typer.Option(False, help="greedy drafting and verification"),
        max_new_tokens: int = typer.Option(128, help="answer length cap"),
        limit: int | None = typer.Option(None, help="use only the first N prompts"),
        batch_size: int = typer.Option(16, help="sequences decoded together"),
        seed: int = typer.Option(0, help="sampling seed"),
        threads: int = typer.Option(1, help="torch CPU threads"),
    ) -> None:
        """Speculative decoding with full-block verification; records an acceptance trace."""
        import shlex
        import sys

        import torch

        from dsim.acceptance.trace import write_acceptance_trace
        from dsim.models.checkpoint import load_drafter
        from dsim.models.collect import collect
        from dsim.models.data import read_prompt_file
        from dsim.models.target import load_target

        torch.set_num_threads(threads)
        chosen = read_prompt_file(prompts)[:limit]
        model = load_target(target)
        draft_model = load_drafter(drafter, model)
        with progress_bar(f"collect {drafter.stem}", len(chosen)) as bar:
            df, _ = collect(
                model,
                draft_model,
                chosen,
                max_new_tokens,
                batch_size,
                seed,
                greedy,
                progress=bar.advance,
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

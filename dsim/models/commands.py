"""CLI for the real-model side: prepare-data, train, collect. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim.errors import InputError
from dsim.report import progress_bar

PROMPTS_DIR = Path("traces/prompts")
DEFAULT_CACHE = Path(".cache/dsim/train-hidden.pt")
DEFAULT_PER_DOMAIN = "code=56,math=56,chat=60,translation=24,qa=24,summarization=12,rag=12"
DEFAULT_HELDOUT = "code=16,math=16,chat=16,translation=8,qa=8,summarization=4,rag=4"


def parse_counts(text: str, option: str) -> dict[str, int]:
    """`code=56,math=40` -> {"code": 56, "math": 40}."""
    out = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if not value.strip().isdigit():
            raise InputError(None, None, f"{option}: expected DOMAIN=COUNT, got {part!r}")
        out[name.strip()] = int(value)
    return out


def register(app: typer.Typer) -> None:
    """Add prepare-data, train and collect to the dsim app."""

    @app.command("prepare-data")
    def prepare_data_cmd(
        target: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny, or a HF folder"),
        cache: Path = typer.Option(DEFAULT_CACHE, help="hidden-state cache to write"),
        per_domain: str = typer.Option(DEFAULT_PER_DOMAIN, help="prompts kept per domain"),
        heldout: str = typer.Option(DEFAULT_HELDOUT, help="of which held out, per domain"),
        max_new_tokens: int = typer.Option(160, help="response length cap"),
        max_prompt_tokens: int = typer.Option(1024, help="longer prompts are skipped"),
        batch_size: int = typer.Option(32, help="prompts generated together"),
        seed: int = typer.Option(0, help="sampling seed"),
        prompts_dir: Path = typer.Option(PROMPTS_DIR, help="public prompt files; splits go here"),
        threads: int = typer.Option(1, help="torch CPU threads"),
    ) -> None:
        """Split prompts (traces/prompts/{train,heldout}.jsonl), let the target answer the train
        split at temperature 1 and cache its hidden states for training."""
        import torch

        from dsim.models.data import prepare_data
        from dsim.models.target import load_target

        torch.set_num_threads(threads)
        counts = parse_counts(per_domain, "--per-domain")
        held = parse_counts(heldout, "--heldout")
        model = load_target(target)
        total = sum(counts.values()) - sum(held.values())
        with progress_bar("generating", total) as bar:
            stats = prepare_data(
                model,
                cache,
                counts,
                held,
                max_new_tokens,
                max_prompt_tokens,
                batch_size,
                seed,
                prompts_dir,
                progress=bar.advance,
            )
        typer.echo(" ".join(f"{k}={v}" for k, v in stats.items()) + f" cache={cache}")

    @app.command("train")
    def train_cmd(
        drafter: str = typer.Option(..., help="ar, parallel, markov, rnn or mtp1"),
        out: Path = typer.Option(..., help="drafter checkpoint to write (small, committable)"),
        gamma: int = typer.Option(7, help="draft block length (mtp1 always drafts 1)"),
        steps: int = typer.Option(1000, help="optimizer steps"),
        batch_size: int = typer.Option(64, help="anchors per step"),
        lr: float = typer.Option(1e-3, help="peak learning rate (warmup, cosine decay)"),
        seed: int = typer.Option(0, help="seed for init and batch sampling"),
        vocab_size: int = typer.Option(8192, help="draft vocabulary size"),
        width: int = typer.Option(256, help="drafter's internal width"),
        target: str = typer.Option("smollm2-135m", help="smollm2-135m, tiny, or a HF folder"),
        cache: Path = typer.Option(DEFAULT_CACHE, help="hidden-state cache (dsim prepare-data)"),
        state: Path | None = typer.Option(
            None, help="training state file (default .cache/dsim/OUTNAME.state.pt)"
        ),
        resume: bool = typer.Option(False, help="continue from the training state if present"),
        threads: int = typer.Option(1, help="torch CPU threads"),
    ) -> None:
        """Train a drafter on cached target hidden states (docs/design.md, The drafter family)."""
        import torch

        from dsim.models.data import HiddenCache
        from dsim.models.drafters import KINDS
        from dsim.models.target import load_target
        from dsim.models.train import TrainSettings, train_drafter

        if drafter not in KINDS:
            raise InputError(None, None, f"--drafter must be one of {', '.join(KINDS)}")
        if not cache.is_file():
            raise InputError(cache, None, "hidden-state cache not found (run dsim prepare-data)")
        torch.set_num_threads(threads)
        state = state or Path(".cache/dsim") / f"{out.stem}.state.pt"
        settings = TrainSettings(steps, batch_size, lr, seed, vocab_size, width)
        model = load_target(target)
        with progress_bar(f"train {drafter}", steps) as bar:

            def report(step: int, loss: float, parts: dict) -> None:
                shown = " ".join(f"{k}={v:.3f}" for k, v in parts.items())
                bar.describe(f"{drafter} loss={loss:.3f} {shown}")
                bar(step)

            stats = train_drafter(
                drafter, gamma, HiddenCache.load(cache), model, settings, out, state, resume, report
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

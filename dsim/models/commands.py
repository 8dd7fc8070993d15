"""CLI for the real-model side: prepare-data, train, collect. Heavy imports stay inside."""

from __future__ import annotations

from pathlib import Path

import typer

from dsim.errors import InputError

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


def _progress(description: str, total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    return bar, bar.add_task(description, total=total)


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
        bar, task = _progress("generating", sum(counts.values()) - sum(held.values()))
        with bar:
            stats = prepare_data(
                model,
                cache,
                counts,
                held,
                max_new_tokens,
                max_prompt_tokens,
                batch_size,
                seed,
                progress=lambda n: bar.advance(task, n),
            )
        typer.echo(" ".join(f"{k}={v}" for k, v in stats.items()) + f" cache={cache}")

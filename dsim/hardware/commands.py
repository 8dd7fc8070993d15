"""`dsim profile`: measure a hardware load profile, estimate one by roofline, or show one."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from dsim.errors import InputError
from dsim.hardware.engines import DEFAULT_ENGINE, ENGINES

ENGINE_NAMES = ", ".join(ENGINES)

SEQS = "1,4,16,64"
TOKENS_PER_SEQ = "1,2,4,8"
CPU_CONTEXTS = "128,512,1024"
PREFILL_SEQS = "1,4"
PREFILL_CHUNKS = "32,128"

profile_app = typer.Typer(
    help="Hardware load profiles: measure (random weights, real forward passes), estimate "
    "(--roofline GPU), or show one (profile show FILE).",
    invoke_without_command=True,
    no_args_is_help=False,
)


def parse_ints(text: str, option: str, allow_zero: bool = False) -> tuple[int, ...]:
    """A comma-separated list of positive (or non-negative) integers."""
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = int(item)
        except ValueError:
            value = -1
        if value < 0 or (value == 0 and not allow_zero):
            kind = "non-negative" if allow_zero else "positive"
            raise InputError(None, None, f"{option}: {item!r} is not a {kind} integer")
        values.append(value)
    return tuple(sorted(set(values)))


@profile_app.callback()
def profile(
    ctx: typer.Context,
    model: str = typer.Option(
        "smollm2-135m",
        help="Zoo name (smollm2-135m, qwen3-4b, qwen3-8b, qwen3-14b, llama3-8b, llama3.1-8b, "
        "llama3.3-70b; --roofline also: qwen3-30b-a3b, deepseek-v3, llama2-70b, bloom-176b) "
        "or a path to a Hugging Face config.json.",
    ),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    dtype: str = typer.Option(
        "auto",
        help="auto (float32 on cpu, bfloat16 on cuda), float32, float16 or bfloat16; "
        "with --roofline: bf16 (auto) or fp8 (8-bit weights).",
    ),
    seqs: str = typer.Option(SEQS, help="Sequence counts R to measure (verify rows)."),
    tokens_per_seq: str = typer.Option(
        TOKENS_PER_SEQ, help="Tokens per sequence q (verify rows: B = R*q for every R and q)."
    ),
    contexts: str = typer.Option(
        None,
        help=f"KV context per sequence (default: {CPU_CONTEXTS}; "
        "roofline: 512,1024,2048,4096,8192,16384).",
    ),
    prefill_seqs: str = typer.Option(
        PREFILL_SEQS, help="Prefilling sequences of the prefill rows ('' for none)."
    ),
    prefill_chunks: str = typer.Option(
        PREFILL_CHUNKS, help="Prefill tokens per sequence of the prefill rows ('' for none)."
    ),
    repeats: int = typer.Option(5, help="Timed steps per point (median, p10, p90)."),
    warmup: int = typer.Option(2, help="Untimed steps per point before timing."),
    threads: int = typer.Option(None, help="torch CPU threads (default: torch's choice)."),
    timer: str = typer.Option(
        None,
        help="--device cpu: wall (wall time, default) or cpu (the thread's CPU time, 1 thread: "
        "for a machine shared with other load); --device cuda: events (elapsed time, default) "
        "or kernels (the kernels' summed durations: GPU work with launch gaps hidden).",
    ),
    roofline: str = typer.Option(
        None,
        help="Estimate for this GPU (h100, h200, a100) instead of measuring: calibrated on "
        "measured operator and end-to-end GPU data (profiles/README.md).",
    ),
    tp: int = typer.Option(1, help="With --roofline: tensor-parallel GPUs per replica."),
    ep: int = typer.Option(
        1, help="With --roofline: expert-parallel GPUs (MoE; 1 or equal to --tp)."
    ),
    engine: str = typer.Option(
        None,
        help=f"With --roofline: the serving engine whose step terms are added to the GPU work: "
        f"{ENGINE_NAMES} (default {DEFAULT_ENGINE}: vLLM V1 with CUDA graphs; "
        "profiles/README.md, Engine presets).",
    ),
    kv_dtype: str = typer.Option(
        "bf16", help="With --roofline: KV-cache dtype, bf16 or fp8 (bytes read and held)."
    ),
    overhead_scale: float = typer.Option(
        1.0,
        help="With --roofline: multiply the chosen engine's step terms by this; 0 keeps only "
        "GPU work.",
    ),
    drafter: bool = typer.Option(
        False,
        help="Profile a drafter stand-in (one layer of the target's width): rows price one "
        "drafter pass, usable as --draft-cost CSV.",
    ),
    out: Path = typer.Option(None, help="Output CSV (a NAME.json sidecar goes beside it)."),
) -> None:
    """Measure a profile (or estimate it with --roofline) and write CSV + JSON sidecar."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None:
        raise InputError(None, None, "--out PATH is required (or use: dsim profile show FILE)")
    command = shlex.join(["dsim", *sys.argv[1:]])
    if roofline is not None:
        from dsim.hardware.roofline import CONTEXTS, write_roofline

        c = CONTEXTS if contexts is None else parse_ints(contexts, "--contexts")
        if drafter:
            raise InputError(None, None, "--drafter is not supported with --roofline")
        name = DEFAULT_ENGINE if engine is None else engine
        options = dict(
            tp=tp, ep=ep, dtype=dtype, overhead_scale=overhead_scale, engine=name, kv_dtype=kv_dtype
        )
        df = write_roofline(roofline, model, out, c, command=command, **options)
        chosen = f"engine {name}" + (" (the default)" if engine is None else "")
        typer.echo(f"wrote {out} ({len(df)} points, calibrated GPU ESTIMATE, {chosen})")
        return
    if engine is not None:
        raise InputError(None, None, "--engine goes with --roofline (a measurement has no preset)")
    from dsim.hardware.measure import Grid

    grid = Grid(
        seqs=parse_ints(seqs, "--seqs"),
        tokens_per_seq=parse_ints(tokens_per_seq, "--tokens-per-seq"),
        contexts=parse_ints(contexts or CPU_CONTEXTS, "--contexts", allow_zero=True),
        prefill_seqs=parse_ints(prefill_seqs, "--prefill-seqs") if prefill_seqs else (),
        prefill_chunks=parse_ints(prefill_chunks, "--prefill-chunks") if prefill_chunks else (),
    )
    options = dict(repeats=repeats, warmup=warmup, threads=threads, drafter=drafter)
    if device == "cpu":  # real mode's own pass (dsim.models.cpu_profile), float32 as real mode
        if dtype not in ("auto", "float32"):
            raise InputError(None, None, f"--device cpu measures float32 (real mode), got {dtype}")
        from dsim.models.cpu_profile import profile_cpu

        df = profile_cpu(model, grid, out, **options, timer=timer or "wall", command=command)
    else:
        from dsim.hardware.measure import profile_model

        gpu = dict(device=device, dtype=dtype, timer=timer or "events")
        df = profile_model(model, grid, out, **gpu, **options, command=command)
    typer.echo(f"wrote {out} ({len(df)} measured points)")


@profile_app.command("show")
def show(
    file: Path = typer.Argument(..., help="Profile CSV."),
    out: Path = typer.Option(None, help="PNG to write (default: FILE with .png)."),
) -> None:
    """Print the curve and plot SPS(B) and tokens/s against B per context, knee marked."""
    from dsim.hardware.show import show_profile

    png = show_profile(file, out)
    typer.echo(f"wrote {png}")


def register(app: typer.Typer) -> None:
    """Add `dsim profile` (and `dsim profile show`) to the dsim app."""
    app.add_typer(profile_app, name="profile")

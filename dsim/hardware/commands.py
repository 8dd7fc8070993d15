"""`dsim profile`: measure a hardware load profile, estimate one by roofline, or show one."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from dsim import spec_grammar
from dsim.checks import check_sizes
from dsim.errors import InputError
from dsim.fileio import check_output_file
from dsim.force_option import FORCE
from dsim.hardware.dtypes import AUTO, MEASURED
from dsim.hardware.engines import DEFAULT_ENGINE, ENGINES
from dsim.hardware.gpu_model import GPUS
from dsim.lab import require_lab
from dsim.models.target import SMOLLM2

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
    """A comma-separated list of positive (or non-negative) integers, sorted, each once."""
    return tuple(sorted(set(spec_grammar.ints(text, option, minimum=0 if allow_zero else 1))))


MEASURE, ESTIMATE = "Measurement", "Estimate (--roofline)"
MODEL = typer.Option(
    SMOLLM2,
    help=f"Zoo name ({SMOLLM2}, qwen3-4b, qwen3-8b, qwen3-14b, llama3-8b, llama3.1-8b, "
    "llama3.3-70b; --roofline also: qwen3-30b-a3b, deepseek-v3, llama2-7b, llama2-70b, bloom-176b, "
    "qwen3-32b, qwen3-235b-a22b, kimi-k2, llama3.1-70b, gpt-oss-20b, gpt-oss-120b) "
    "or a path to a Hugging Face config.json.",
)
DEVICE = typer.Option("cpu", help="cpu or cuda.", rich_help_panel=MEASURE)
DTYPE = typer.Option(
    "auto",
    help="auto (float32 on cpu, bfloat16 on cuda), float32, float16 or bfloat16; "
    "with --roofline: bf16 (auto), fp8 (8-bit weights) or fp4 (MXFP4 weights; b200, b300 and "
    "mi355x, the GPUs with fp4 tensor cores).",
)
SEQS_OPT = typer.Option(
    SEQS, help="Sequence counts R to measure (verify rows).", rich_help_panel=MEASURE
)
TOKENS_OPT = typer.Option(
    TOKENS_PER_SEQ,
    help="Tokens per sequence q (verify rows: B = R*q for every R and q).",
    rich_help_panel=MEASURE,
)
CONTEXTS_OPT = typer.Option(
    None,
    help=f"KV context per sequence (default: {CPU_CONTEXTS}; "
    "roofline: 512,1024,2048,4096,8192,16384 up to the model's maximum position and the "
    "replica's KV memory, beyond which a context is refused).",
)
PREFILL_SEQS_OPT = typer.Option(
    PREFILL_SEQS,
    help="Prefilling sequences of the prefill rows ('' for none).",
    rich_help_panel=MEASURE,
)
PREFILL_CHUNKS_OPT = typer.Option(
    PREFILL_CHUNKS,
    help="Prefill tokens per sequence of the prefill rows ('' for none).",
    rich_help_panel=MEASURE,
)
REPEATS = typer.Option(5, help="Timed steps per point (median, p10, p90).", rich_help_panel=MEASURE)
WARMUP = typer.Option(2, help="Untimed steps per point before timing.", rich_help_panel=MEASURE)
THREADS = typer.Option(
    None, help="torch CPU threads (default: torch's choice).", rich_help_panel=MEASURE
)
TIMER = typer.Option(
    None,
    help="--device cpu: wall (wall time, default) or cpu (the thread's CPU time, 1 thread: "
    "for a machine shared with other load); --device cuda: events (elapsed time, default) "
    "or kernels (the kernels' summed durations: GPU work with launch gaps hidden).",
    rich_help_panel=MEASURE,
)
ROOFLINE = typer.Option(
    None,
    help=f"Estimate for this GPU ({', '.join(GPUS)}) instead of measuring: calibrated on "
    "measured operator and end-to-end GPU data (A100, H100; the others borrow H100's fit, said "
    "in the sidecar; profiles/README.md).",
    rich_help_panel=ESTIMATE,
)
TP = typer.Option(
    1,
    "--tp",
    "--tensor-parallel-size",
    help="Tensor-parallel GPUs per replica (vLLM's name too).",
    rich_help_panel=ESTIMATE,
)
EP = typer.Option(
    1, help="Expert-parallel GPUs (MoE; 1 or equal to --tp).", rich_help_panel=ESTIMATE
)
ENGINE = typer.Option(
    None,
    help=f"The serving engine and version whose graphs, collectives, host time and round "
    f"terms price the step: {ENGINE_NAMES} (default {DEFAULT_ENGINE}: current vLLM, async "
    "scheduling and full CUDA graphs; vllm-0.8: V1 0.8 with piecewise graphs; profiles/"
    "README.md, Engine presets).",
    rich_help_panel=ESTIMATE,
)
CAPTURE_SIZES = typer.Option(
    None,
    help="The CUDA-graph sizes the engine captures (increasing, e.g. 1,2,4,8,16,32): a decode "
    "step pads to the next one and runs eagerly past the largest (default: the preset's).",
    rich_help_panel=ESTIMATE,
)
GRAPH_MODE = typer.Option(
    None,
    help="The graph mode of a decode or verify step: full, piecewise (attention launched from "
    "the host) or eager (every kernel; no padding) (default: the preset's).",
    rich_help_panel=ESTIMATE,
)
KV_DTYPE = typer.Option(
    "auto",
    help="KV-cache dtype, bf16 or fp8 (bytes read and held); auto: the engine's default for "
    "the checkpoint: bf16 for a bf16 checkpoint, and for an fp8 one bf16 under vLLM and "
    "SGLang (the model's compute dtype) and fp8 under trtllm (NVIDIA's fp8 checkpoints carry "
    "an fp8 KV cache).",
    rich_help_panel=ESTIMATE,
)
OVERHEAD_SCALE = typer.Option(
    1.0,
    help="Multiply the chosen engine's step terms by this; 0 keeps only GPU work.",
    rich_help_panel=ESTIMATE,
)
DRAFTER = typer.Option(
    False,
    help="Profile a drafter stand-in (one layer of the target's width): rows price one "
    "drafter pass, usable as --draft-cost CSV.",
    rich_help_panel=MEASURE,
)
DRAFT_MODEL = typer.Option(
    None,
    help="Estimate one pass of this drafter beside --model instead of the target's step: "
    "eagle, eagle3, mtp or dspark; rows price a drafter pass, usable as --draft-cost FILE "
    "with the --drafter-kind its sidecar names (eagle, eagle3, mtp: ar; dspark: block).",
    rich_help_panel=ESTIMATE,
)
OUT = typer.Option(None, help="Output CSV (a NAME.json sidecar goes beside it).")


@profile_app.callback()
def profile(
    ctx: typer.Context,
    model: str = MODEL,
    device: str = DEVICE,
    dtype: str = DTYPE,
    seqs: str = SEQS_OPT,
    tokens_per_seq: str = TOKENS_OPT,
    contexts: str = CONTEXTS_OPT,
    prefill_seqs: str = PREFILL_SEQS_OPT,
    prefill_chunks: str = PREFILL_CHUNKS_OPT,
    repeats: int = REPEATS,
    warmup: int = WARMUP,
    threads: int = THREADS,
    timer: str = TIMER,
    roofline: str = ROOFLINE,
    tp: int = TP,
    ep: int = EP,
    engine: str = ENGINE,
    capture_sizes: str = CAPTURE_SIZES,
    graph_mode: str = GRAPH_MODE,
    kv_dtype: str = KV_DTYPE,
    overhead_scale: float = OVERHEAD_SCALE,
    drafter: bool = DRAFTER,
    draft_model: str = DRAFT_MODEL,
    out: Path = OUT,
    force: bool = FORCE,
) -> None:
    """Measure a profile (or estimate it with --roofline) and write CSV + JSON sidecar."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None:
        raise InputError(None, None, "--out PATH is required (or use: dsim profile show FILE)")
    check_output_file(out, force, sidecar=True)  # before minutes of measuring, not after
    if out.suffix.lower() != ".csv":
        raise InputError(out, None, "a profile is a CSV beside its NAME.json: end --out in .csv")
    command = shlex.join(["dsim", *sys.argv[1:]])
    if roofline is not None:
        _no_measurement_options(ctx)
        if drafter:
            raise InputError(
                None, None, "--drafter is not supported with --roofline: estimate a drafter's "
                "pass with --draft-model eagle|eagle3|mtp|dspark",
            )  # fmt: skip
        options = dict(tp=tp, ep=ep, dtype=dtype, overhead_scale=overhead_scale, kv_dtype=kv_dtype)
        options["capture_sizes"] = None
        if capture_sizes is not None:
            sizes = spec_grammar.ints(capture_sizes, "--capture-sizes")
            options["capture_sizes"] = check_sizes(sizes, "--capture-sizes")
        options["graph_mode"] = graph_mode
        _estimate(roofline, model, contexts, engine, out, command, options, draft_model)
        return
    if draft_model is not None:
        raise InputError(
            None, None, "--draft-model goes with --roofline GPU (a measured drafter: --drafter)"
        )
    for flag, value in (
        ("--engine", engine),
        ("--capture-sizes", capture_sizes),
        ("--graph-mode", graph_mode),
    ):
        if value is not None:
            raise InputError(
                None, None, f"{flag} goes with --roofline (a measurement has no preset)"
            )
    from dsim.hardware.measure import Grid

    grid = Grid(
        seqs=parse_ints(seqs, "--seqs"),
        tokens_per_seq=parse_ints(tokens_per_seq, "--tokens-per-seq"),
        contexts=parse_ints(contexts or CPU_CONTEXTS, "--contexts", allow_zero=True),
        prefill_seqs=parse_ints(prefill_seqs, "--prefill-seqs") if prefill_seqs else (),
        prefill_chunks=parse_ints(prefill_chunks, "--prefill-chunks") if prefill_chunks else (),
    )
    options = dict(repeats=repeats, warmup=warmup, threads=threads, drafter=drafter)
    _measure(model, grid, device, dtype, timer, out, command, options)


# `dsim profile` options that shape or time a measurement; an estimate prices its own grid.
MEASUREMENT_ONLY = (
    "device", "threads", "seqs", "tokens_per_seq", "prefill_seqs", "prefill_chunks", "repeats",
    "warmup", "timer",
)  # fmt: skip


def _no_measurement_options(ctx: typer.Context) -> None:
    """Refuse a measurement's option beside --roofline: it would be ignored without a word."""
    for name in MEASUREMENT_ONLY:
        if ctx.get_parameter_source(name).name != "DEFAULT":
            flag = "--" + name.replace("_", "-")
            raise InputError(
                None, None, f"{flag} shapes a measurement; --roofline estimates its own grid "
                f"(--contexts, --tp, --dtype): drop {flag}",
            )  # fmt: skip


def _estimate(
    gpu: str, model: str, contexts: str | None, engine: str | None, out: Path, command: str,
    options: dict, draft_model: str | None = None,
) -> None:  # fmt: skip
    """`--roofline GPU`: write the calibrated estimate of the target's step (or of a drafter's
    pass, `draft_model`) under `engine` (the default if None)."""
    from dsim.hardware.roofline import memory_warning, write_roofline
    from dsim.report import warn

    c = None if contexts is None else parse_ints(contexts, "--contexts")
    name = DEFAULT_ENGINE if engine is None else engine
    chosen = f"engine {name}" + (" (the default)" if engine is None else "")
    if draft_model is None:
        df, meta = write_roofline(gpu, model, out, c, command=command, engine=name, **options)
        typer.echo(f"wrote {out} ({len(df)} points, calibrated GPU ESTIMATE, {chosen})")
        line = memory_warning(meta, len(df))
        if line is not None:
            warn(line)
        return
    from dsim.hardware.draft_roofline import get_draft_model, write_drafter_roofline

    kind = get_draft_model(draft_model).kind
    df = write_drafter_roofline(
        gpu, model, draft_model, out, command=command, contexts=c, engine=name, **options
    )
    typer.echo(
        f"wrote {out} ({len(df)} drafter passes, calibrated GPU ESTIMATE, {chosen}; "
        f"use: --draft-cost {out} --drafter-kind {kind})"
    )


def _measure(
    model: str, grid, device: str, dtype: str, timer: str | None, out: Path, command: str,
    options: dict,
) -> None:  # fmt: skip
    """Time real forward passes: on CPU real mode's own pass in float32, on CUDA the HF model."""
    require_lab("dsim profile (a measurement; --roofline GPU estimates without it)")
    if device == "cpu":  # real mode's own pass (dsim.models.cpu_profile), float32 as real mode
        if MEASURED.parse(dtype) not in (AUTO, "fp32"):
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
    force: bool = FORCE,
) -> None:
    """Print the curve and plot SPS(B) and tokens/s against B per context, knee marked."""
    from dsim.hardware.show import show_profile

    png = show_profile(file, out, force)
    typer.echo(f"wrote {png}")


def register(app: typer.Typer) -> None:
    """Add `dsim profile` (and `dsim profile show`) to the dsim app."""
    app.add_typer(profile_app, name="profile")

"""`dsim run`: simulate a replica or a cluster of them. Its workload and engine options are
shared with `dsim serve` (dsim/real/commands.py), which runs the same engine with real models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dsim import bench_names, spec_grammar
from dsim import sla as tail_sla
from dsim.policies import policy_usage
from dsim.policies.commands import PLUGIN_TIMEOUT
from dsim.policies.plugin import set_call_limit
from dsim.report import console, figure, progress_bar, summary_table, warn
from dsim.run import RunResult, check_run_dir, simulate_inputs, write_run
from dsim.run_inputs import input_files, resolve
from dsim.run_spec import SPEC_FIELDS, VLLM_NAMES, RunSpec, default
from dsim.size_gate import YES, check_size, run_size
from dsim.workload import Workload

# `--help` groups the options in these panels.
WORKLOAD, ENGINE, SPECULATION, CLUSTER = "Workload", "Engine", "Speculation", "Cluster"


def option(field: str, help: str, panel: str):
    """A `dsim run` / `dsim serve` option for RunSpec field `field`, with the spec's default,
    also spelled as vLLM spells it where vLLM has the same setting (`--max-num-seqs`)."""
    names = [field, *(name for name, f in VLLM_NAMES.items() if f == field)]
    flags = [f"--{name.replace('_', '-')}" for name in names]
    return typer.Option(default(field), *flags, help=help, rich_help_panel=panel)


# Options both commands take, with one spelling and one help text.
TRACE = option("trace", "Arrival trace file or synthetic:KEY=V,...", WORKLOAD)
PROFILE = option("profile", "Hardware load profile CSV of the target.", ENGINE)
POLICY = option("policy", f"{policy_usage()} (docs/policies.md)", SPECULATION)
SEED = option("seed", "Random seed (same seed, same bytes).", WORKLOAD)
WINDOW = option(
    "window",
    "Keep arrivals in START:END seconds of the rate-scaled timeline (a higher --rate-scale "
    "reads more of the trace); past the trace's end is an error unless --window-wrap.",
    WORKLOAD,
)
WINDOW_WRAP = option(
    "window_wrap", "Replay the trace end to end when --window ends past it.", WORKLOAD
)
RATE_SCALE = option("rate_scale", "Scale the arrival rate (2 = twice the load).", WORKLOAD)
MAX_REQUESTS = option("max_requests", "Keep only the first N requests.", WORKLOAD)
QPS = typer.Option(
    None, help="A synthetic trace's arrival rate in req/s (its rate=).", rich_help_panel=WORKLOAD
)
MAX_SEQS = option("max_seqs", "Concurrent requests cap.", ENGINE)
KV_TOKENS = option(
    "kv_tokens",
    "KV-cache budget in tokens, 16-token blocks (default: the profile's KV capacity, else 500000).",
    ENGINE,
)
PREFILL_CHUNK = option(
    "prefill_chunk",
    "Prefill tokens per step (default: the profile engine's rule, else 2048).",
    ENGINE,
)
MAX_NUM_BATCHED_TOKENS = option(
    "max_num_batched_tokens",
    "Step token budget, as vLLM's: verify tokens (1 + gamma per running request) reserved "
    "first, prefill chunks fill the rest (default: the profile engine's, e.g. 8192 for vLLM "
    "on H200; none for a profile without an engine).",
    ENGINE,
)
PREFILL_MIXING = option(
    "prefill_mixing",
    "engine (the profile engine's rule) | mixed (prefill chunks share the decode step, as "
    "vLLM) | separate (a step with prefill work decodes nothing, as SGLang).",
    ENGINE,
)
ADMISSION = option(
    "admission",
    "engine (the profile engine's rule) | recompute (admit on the prompt's KV, preempt the "
    "newest request by recompute, as vLLM and SGLang) | reserve (admit only when the prompt's "
    "and every output token's KV is free, never preempt, as TensorRT-LLM).",
    ENGINE,
)
DRAFT_COST = option(
    "draft_cost", "Drafter pass cost: 0 | ratio:X (X times the target) | profile CSV.", SPECULATION
)
DRAFTER_KIND = option(
    "drafter_kind",
    "auto (mtp1: MTP-1 head, else block) | block | ar: how a round's passes go.",
    SPECULATION,
)
SLA_TPS = option("sla_tps", "Per-user tok/s the schedulers must keep.", SPECULATION)
SCHED_COST = option(
    "sched_cost", "Synchronous schedulers' per-round cost: auto | auto:F | SECONDS.", SPECULATION
)
RAGGED_PENALTY = option(
    "ragged_penalty",
    "Extra share of a decode step's target pass when its requests verify different lengths "
    "(0..10; default: the profile's engine prior, 0.19 for the fitted presets, 0 for measured "
    "profiles and vllm-2023).",
    SPECULATION,
)
PROGRESS = typer.Option(True, help="Show a progress bar.")
REPLICAS = option(
    "replicas", "Replicas behind the router, each its own engine (docs/cluster.md).", CLUSTER
)
ROUTER = option("router", "round-robin | least-loaded | kv-aware", CLUSTER)
DISAGG = option("disagg", "P:D prefill-only and decode replicas (replaces --replicas).", CLUSTER)
KV_LINK_GBPS = option(
    "kv_link_gbps", "Prefill-to-decode KV link bandwidth, Gbit/s (--disagg).", CLUSTER
)
KV_BYTES = option(
    "kv_bytes_per_token", "KV bytes per token (default: the profile sidecar's model).", CLUSTER
)


# `vllm bench serve`'s workload options, with its meanings (dsim.bench_names).
_BENCH_HELP = {
    "request_rate": "Requests/s sent as vllm bench serve sends them (inf: all at once); with a "
    "file trace its timestamps are replaced and its rows' lengths kept in order.",
    "burstiness": "Gamma shape of --request-rate's gaps (1: Poisson, < 1 burstier).",
    "max_concurrency": "At most this many requests in flight (closed loop; a file's rows in "
    "order).",
    "num_prompts": "Requests to send (alone on a file trace: its first N rows).",
    "dataset_name": "random: vLLM's random dataset lengths (--random-*).",
    "random_input_len": "Random dataset's prompt tokens (default 1024).",
    "random_output_len": "Random dataset's output tokens (default 128).",
    "random_range_ratio": "Random lengths uniform in [floor(L(1-X)), ceil(L(1+X))], X in [0, 1).",
}
# --request-rate takes `inf` as vLLM's does: read as text, parsed by bench_names.
_BENCH_METAVAR = {"request_rate": "R|inf"}
BENCH = {
    name: typer.Option(
        None, help=text, rich_help_panel="vllm bench serve names", metavar=_BENCH_METAVAR.get(name)
    )
    for name, text in _BENCH_HELP.items()
}


def spec_from(options: dict[str, Any], **fixed: Any) -> RunSpec:
    """The RunSpec of a command's options (its RunSpec fields, by name), with `fixed` set;
    `--qps` becomes the synthetic trace's `rate=` and the benchmark's names the trace spec
    they mean (`dsim.bench_names`), so every spelling makes the same spec."""
    given = {f: options[f] for f in SPEC_FIELDS if f in options}
    if options.get("qps") is not None:
        given["trace"] = spec_grammar.with_rate(given["trace"], options["qps"])
    if "trace" in given:
        given["trace"], cap = bench_names.trace_spec(given["trace"], options)
        if cap is not None and given.get("max_requests") is None:
            given["max_requests"] = cap
    return RunSpec(**given, **fixed)


def show(result: RunResult, title: str) -> None:
    """The summary table, the step model it priced steps with and the run's warnings again."""
    console.print(summary_table(result.summary, title))
    if result.summary.get("trace"):
        console.print(f"trace: {result.summary['trace']}", highlight=False, soft_wrap=True)
    console.print(f"step model: {result.summary['step_model']}", highlight=False)
    limits = result.summary["engine_limits"]
    budget = limits["max_num_batched_tokens"]
    console.print(
        f"engine limits: KV {limits['kv_tokens']:,} tokens; step token budget "
        f"{'none' if budget is None else f'{budget:,}'}; prefill chunk "
        f"{limits['prefill_chunk']:,}; prefill {limits['prefill_mixing']}; admission "
        f"{limits['admission']}",
        highlight=False,
    )
    r = result.summary["engine_round"]
    console.print(
        f"engine round: per round {r['per_round_s'] * 1e3:.3g} ms; each drafter pass at least "
        f"{r['host_pass_s'] * 1e3:.3g} ms (host per proposer step); ragged penalty "
        f"{r['ragged_penalty']:g}, paid by {r['ragged_steps']:,} steps",
        highlight=False,
    )
    for v in result.summary.get("sla", ()):
        verdict = "met" if v["met"] else "MISSED"
        console.print(
            f"SLA {v['key']} = {figure(v['value'])} (bound {v['bound']:g}): {verdict}",
            highlight=False,
        )
    for line in result.summary.get("warnings", ()):
        console.print(f"warning: {line}", highlight=False, soft_wrap=True)


def run_cmd(
    trace: str = TRACE,
    profile: str = PROFILE,
    acceptance: str = option(
        "acceptance",
        "iid:A | positions:Q1,.. (latent means; spreads 0 by default, served as given) | "
        "preset:DRAFTER:DOMAIN | vllm:SCRAPE (its curve served; see dsim acceptance show) | "
        "tau:T@K (T tokens per verify round, bonus included, at K drafts: vLLM's mean "
        "acceptance length, SGLang's accept length; geometric shape assumed) | mix:.. | FILE",
        SPECULATION,
    ),
    policy: str = POLICY,
    gamma: int = option("gamma", "Drafts proposed per round.", SPECULATION),
    seed: int = SEED,
    window: str | None = WINDOW,
    window_wrap: bool = WINDOW_WRAP,
    rate_scale: float = RATE_SCALE,
    max_requests: int | None = MAX_REQUESTS,
    qps: float | None = QPS,
    max_seqs: int = MAX_SEQS,
    kv_tokens: int | None = KV_TOKENS,
    prefill_chunk: int | None = PREFILL_CHUNK,
    max_num_batched_tokens: int | None = MAX_NUM_BATCHED_TOKENS,
    prefill_mixing: str = PREFILL_MIXING,
    admission: str = ADMISSION,
    draft_cost: str = DRAFT_COST,
    drafter_kind: str = DRAFTER_KIND,
    sla_tps: float | None = SLA_TPS,
    sched_cost: str = SCHED_COST,
    ragged_penalty: float | None = RAGGED_PENALTY,
    calibration: str | None = option(
        "calibration",
        "STS calibration JSON for an acceptance trace; 'raw' ignores the sidecar's.",
        SPECULATION,
    ),
    out: Path | None = typer.Option(None, help="Write requests.parquet and summary.json here."),
    replicas: int = REPLICAS,
    router: str = ROUTER,
    disagg: str | None = DISAGG,
    kv_link_gbps: float = KV_LINK_GBPS,
    kv_bytes_per_token: float | None = KV_BYTES,
    progress: bool = PROGRESS,
    plugin_timeout: float = PLUGIN_TIMEOUT,
    yes: bool = YES,
    request_rate: str | None = BENCH["request_rate"],
    burstiness: float | None = BENCH["burstiness"],
    max_concurrency: int | None = BENCH["max_concurrency"],
    num_prompts: int | None = BENCH["num_prompts"],
    dataset_name: str | None = BENCH["dataset_name"],
    random_input_len: int | None = BENCH["random_input_len"],
    random_output_len: int | None = BENCH["random_output_len"],
    random_range_ratio: float | None = BENCH["random_range_ratio"],
    sla: list[str] = typer.Option(
        [],
        "--sla",
        help=f"A tail bound the run is judged on, repeatable: {tail_sla.USAGE}.",
        rich_help_panel=WORKLOAD,
    ),
) -> None:
    """Simulate replicas serving a trace under a verification policy."""
    bounds = tail_sla.parse_options(sla)
    spec = spec_from(locals())
    set_call_limit(plugin_timeout)
    if out is not None:
        check_run_dir(out, input_files(spec))  # before the work, not after it
    inputs = resolve(spec)
    check_size(run_size(inputs.workload), yes)
    burst = bursty(inputs.workload)
    for line in (*inputs.engine.warnings, *burst):
        warn(line)
    with progress_bar("simulating requests", total=None, enabled=progress) as update:
        result = simulate_inputs(inputs, progress=update)
    result.summary["warnings"] += burst
    if bounds.bounds:
        result.summary["sla"] = bounds.verdicts(result.summary)
    if out is not None:
        write_run(result, spec, out)
    show(result, f"dsim run: {policy} on {trace_name(spec.trace)}")


BURST_RATIO = 4.0  # a trace whose busiest tenth arrives this many times faster than its quietest


def bursty(workload: Workload) -> list[str]:
    """A warning when the trace's arrival rate swings within the window run: its overload
    verdict and steady figures then depend on where the window was cut."""
    spread = workload.rate_spread()
    if spread is None or spread[1] <= BURST_RATIO * spread[0]:
        return []
    lo, hi = spread
    return [
        f"bursty trace: its arrival rate spans {lo:.3g} to {hi:.3g} req/s across tenths of "
        "the window run; the overload verdict and the steady figures depend on where it is "
        "cut (a longer --window, or --request-rate for the benchmark's steady arrivals)"
    ]


def trace_name(trace: str) -> str:
    """What the trace is, for a title: a synthetic trace is not the file it takes lengths from
    (named as their source: a closed loop over a user's file is that file's requests)."""
    if spec_grammar.is_synthetic(trace):
        lengths = spec_grammar.key_values(spec_grammar.name_arg(trace)[1], "trace").get("lengths")
        return f"the lengths of {trace_name(lengths)}" if lengths else "a synthetic trace"
    return Path(spec_grammar.trace_file(trace)[0]).name


def register(app: typer.Typer) -> None:
    """Add `dsim run`."""
    app.command("run")(run_cmd)

"""`dsim profile show`'s engine part: what an estimate's engine adds to a step and to a round, in
parts, and each prior with its source and range (docs/design.md, Engine presets). A measured
profile, or an estimate whose sidecar has no engine entry, shows nothing here."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dsim.hardware.latency import LatencyModel
from dsim.hardware.moe import PARTS as MOE_PARTS
from dsim.report import figure

STEP_COLUMNS = (
    ("linear", ("linear", "lm_head")),
    ("elem", ("elementwise",)),
    ("attn", ("attention",)),
    ("AR", ("allreduce",)),
    ("pad", ("padding",)),
    ("MoE", MOE_PARTS),
    ("host ovl", ("host_overlapped",)),
    ("host ser", ("host_serialised",)),
    ("step", ("step",)),
)
ROUND_SHAPES = ((1, 3), (32, 3), (128, 3))  # (R, K) at context 2048
ROUND_CONTEXT = 2048


def _table(heading: str, columns: list[str]) -> tuple[Group, Table]:
    table = Table(box=None, padding=(0, 0, 0, 1), pad_edge=False, header_style="bold")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    return Group(Text(heading, style="italic"), table), table


def step_parts(meta: dict) -> Group | None:
    """The step's parts (ms) at the sidecar's named shapes; None without a v2 breakdown."""
    points = meta.get("breakdown_ms")
    if not isinstance(points, dict) or not all("step" in p for p in points.values()):
        return None
    shown, table = _table(
        "a step's parts (ms): step = max(GPU work, host ovl) + host ser (the host time "
        "overlapped, launches included, and serialised); GPU work = linear (LM head included) "
        "+ elem (norms, RoPE, activation, adds, as the engine fuses them) + attn (attention) + "
        "AR (all-reduce) + pad (graph padding) + MoE",
        ["shape", *(name for name, _ in STEP_COLUMNS)],
    )
    for label, parts in points.items():
        cells = [figure(sum(float(parts.get(k, 0.0)) for k in keys)) for _, keys in STEP_COLUMNS]
        table.add_row(label, *cells)
    return shown


def round_parts(meta: dict, model: LatencyModel) -> Group | None:
    """A round's engine parts (ms) at a few shapes: the verify step (the profile's), K drafter
    passes at their floor (the host time per proposer step: a drafter whose pass takes longer
    pays its own time, `--draft-cost`), per_round, and what a ragged step adds."""
    engine = meta.get("engine")
    terms = engine.get("spec_round", {}).get("terms_s", {}) if isinstance(engine, dict) else {}
    if "host_pass_s" not in terms:
        return None
    per_round, host = float(terms["per_round_s"]), float(terms["host_pass_s"])
    penalty = float(engine.get("ragged", {}).get("penalty", 0.0))
    shown, table = _table(
        f"a round's engine parts (ms) at context {ROUND_CONTEXT}: K passes at least "
        f"{figure(host * 1e3)} ms each (the host time per proposer step), per round "
        f"{figure(per_round * 1e3)} ms, ragged penalty {penalty:g} x the verify step",
        ["R, K", "verify step", "drafter floor", "per round", "ragged extra", "round"],
    )
    for r, k in ROUND_SHAPES:
        verify = float(model.latency(r * (1 + k), r, ROUND_CONTEXT))
        floor = k * host
        extra = penalty * verify
        total = verify + floor + per_round
        cells = (verify, floor, per_round, extra, total)
        table.add_row(f"{r}, {k}", *(figure(v * 1e3) for v in cells))
    return shown


def priors(meta: dict) -> Group | None:
    """Each prior the engine's step and round rest on, with its source and range."""
    engine = meta.get("engine")
    if not isinstance(engine, dict) or "graphs" not in engine:
        return None
    lines = [Text("priors (value, range, source)", style="italic")]
    graphs = engine["graphs"]
    if graphs:
        sizes = graphs["sizes"]
        lines.append(
            Text(
                f"- CUDA graphs keyed by {graphs['keyed_by']}, {len(sizes)} sizes {sizes[0]}.."
                f"{sizes[-1]}, decode {graphs['decode']}, prefill {graphs['prefill']}; "
                f"launches per layer without graphs {figure(graphs['eager_layer_s'] * 1e6)} us "
                f"(20-150), piecewise {figure(graphs['piecewise_layer_s'] * 1e6)} us (5-40): "
                f"{graphs['source']}"
            )
        )
    else:
        lines.append(Text("- CUDA graphs: not modelled (no padding, no launch term)"))
    lines.append(Text(f"- collectives: {engine.get('collectives', 'NCCL')}"))
    ragged = engine.get("ragged", {})
    if ragged:
        lines.append(
            Text(
                f"- ragged verify: mode {ragged.get('mode', '?')}, penalty {ragged['penalty']:g} "
                f"(range {ragged['low']:g}-{ragged['high']:g}): {ragged['source']}"
            )
        )
    lines.append(Text(f"- round terms: {engine.get('spec_round', {}).get('source', '?')}"))
    prior = engine.get("moe")
    if prior:
        low, high = prior["scale_range"]
        etas = ", ".join(f"{w}: {eta:g}" for w, eta in prior["eta_by_width"])
        lines.append(
            Text(
                f"- MoE: grouped-GEMM bandwidth efficiency by expert slice width ({etas}) x the "
                f"engine's scale {engine['terms_s'].get('moe_gemm_scale', 1.0):.3g} (range "
                f"{low:.3g}-{high:.3g}); alignment {figure(prior['align_s'] * 1e6)} us, "
                f"{figure(prior['gemm_latency_s'] * 1e6)} us per grouped GEMM; with EP, "
                f"dispatch and combine at {prior['a2a_link_frac']:g} of the links + "
                f"{figure(prior['a2a_latency_s'] * 1e6)} us each: {prior['source']}"
            )
        )
        if "routing_overlap" in prior:
            low, high = prior["routing_overlap_range"]
            lines.append(
                Text(
                    f"- MoE routing locality: a token shares {prior['routing_overlap']:g} of its "
                    f"top-k experts with the previous token of its sequence (range {low} to "
                    f"{high:g}; GLM-4.7-Flash's router, measured: a transfer to this model), so a "
                    "verify step's 1 + K tokens a request read fewer experts than independent "
                    "tokens (docs/engine-v2-rules.md, addendum 6)"
                )
            )
    lines += kernel_priors(meta)
    return Group(*lines)


def kernel_priors(meta: dict) -> list[Text]:
    """The elementwise fusion and the decode attention kernel the estimate priced, with their
    sources (sidecars before these priors show none)."""
    lines = []
    fused = meta.get("fusion")
    if isinstance(fused, dict):
        kernels = ", ".join(f"{k} x{v}" for k, v in fused["kernels_per_layer"].items())
        inside = fused.get("in_attention") or []
        where = f"; {', '.join(inside)} inside attention" if inside else ""
        lines.append(
            Text(
                f"- elementwise kernels per layer: {kernels}{where} "
                f"({fused['name']}): {fused['source']}"
            )
        )
    attn = meta.get("attention")
    kernel = attn.get("decode_kernel") if isinstance(attn, dict) else None
    if isinstance(kernel, dict):
        frac = kernel["bw_frac"]
        value = (
            "the GEMMs' fitted bandwidth"
            if frac is None
            else f"{frac:g} of HBM bandwidth (range {kernel['low']:g}-{kernel['high']:g}, "
            f"measured on {kernel['measured_on']})"
        )
        lines.append(Text(f"- decode attention: {kernel['name']}, {value}: {kernel['source']}"))
    return lines


def _held_out(summary: dict, what: str) -> str:
    """`what`: median and worst absolute error over n rows, from a fit's held-out summary."""
    return (f"{what}: median {summary['median_abs_error']:.1%}, worst "
            f"{summary['max_abs_error']:.1%} over {summary['n']} published rows")  # fmt: skip


def how_sure(meta: dict) -> Group | None:
    """What an estimate's numbers may be off by: the stated GPU-work bracket (a range, not a
    measured error) and the engine terms' errors on published runs held out of their fit."""
    bracket = meta.get("bracket")
    if not isinstance(bracket, dict):
        return None
    lines = [Text("how sure (docs/engine-v2-rules.md; profiles/README.md)", style="italic")]
    fit = (
        "borrows another GPU's fit: its sidecar's transfer"
        if meta.get("transfer")
        else ("fitted on this GPU")
    )
    lines.append(Text(f"- GPU work: +-{bracket['gpu_work_relative']:.0%} stated (a measured "
                      f"GPU's +-{bracket['measured_gpu']:.0%}; {fit})"))  # fmt: skip
    plain = meta.get("engine_fit", {}).get("leave_one_source_out", {}).get("all")
    if plain:
        lines.append(Text("- " + _held_out(plain, "the engine step, each source held out")))
    spec = meta.get("round_fit", {}).get("leave_one_out", {}).get("summary")
    if spec:
        lines.append(Text("- " + _held_out(spec, "speculative speed-ups, each row held out")))
    return Group(*lines)


def engine_parts(meta: dict, model: LatencyModel) -> list[Group]:
    """The engine's tables and priors that this sidecar can show (none for a measurement)."""
    shown = (step_parts(meta), round_parts(meta, model), priors(meta), how_sure(meta))
    return [g for g in shown if g is not None]

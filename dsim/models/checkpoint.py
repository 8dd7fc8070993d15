"""Drafter checkpoints: small files with the drafter's own weights (fp16), its config and the
fingerprint of the target it was trained for. Loaded with `weights_only=True`; anything wrong
becomes an InputError naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dsim.checks import check_number
from dsim.errors import InputError
from dsim.fileio import atomic_path
from dsim.inputs import input_file
from dsim.models.drafters import Drafter, DrafterConfig, config_dict

FORMAT = "dsim-drafter/2"
# /1 files predate the llama block; their configs lack its fields, whose defaults mean /1.
READABLE = ("dsim-drafter/1", FORMAT)
MAX_SIZES = {"layers": 64, "heads": 256, "gamma": 64}  # other sizes: at most 65536


def save_drafter(path: str | Path, drafter: Drafter, target_fingerprint: str, meta: dict) -> None:
    weights = {k: v.detach().to(torch.float16) for k, v in drafter.state_dict().items()}
    weights["vocab"] = drafter.vocab.clone()  # ids must stay exact
    blob = {
        "format": FORMAT,
        "config": config_dict(drafter.config),
        "target": target_fingerprint,
        "weights": weights,
        "meta": meta,
    }
    with atomic_path(path) as tmp:
        torch.save(blob, tmp)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The raw checkpoint dict, validated for shape; InputError if unreadable or foreign."""
    path = input_file(path, "drafter checkpoint")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a damaged zip/pickle
        raise InputError(
            path, None, f"not a readable drafter checkpoint ({str(err).splitlines()[0]})"
        ) from err
    if not isinstance(blob, dict) or blob.get("format") not in READABLE:
        raise InputError(path, None, f"not a {FORMAT} drafter checkpoint")
    kinds = {"config": dict, "target": str, "weights": dict}
    for key, kind in kinds.items():
        if not isinstance(blob.get(key), kind):
            raise InputError(path, None, f"checkpoint lacks {key!r} (a {kind.__name__})")
    weights = blob["weights"]
    if not all(isinstance(v, torch.Tensor) for v in weights.values()) or "vocab" not in weights:
        raise InputError(path, None, "checkpoint 'weights' must be tensors, 'vocab' among them")
    return blob


def is_checkpoint(path: Path) -> bool:
    """Whether `path` holds a drafter checkpoint dsim wrote (`dsim train --out` replaces one)."""
    try:
        read_checkpoint(path)
    except InputError:
        return False
    return True


def _config(path: Path, blob: dict[str, Any]) -> DrafterConfig:
    """The stored config, its sizes checked before anything is allocated from them."""
    try:
        config = DrafterConfig(**blob["config"])
    except TypeError:
        raise InputError(path, None, "checkpoint config has missing or unknown fields") from None
    sizes = ("gamma", "target_hidden", "width", "layers", "heads", "rank", "state")
    for name in (*sizes, "context", "kv_heads", "ffn"):
        limit = MAX_SIZES.get(name, 1 << 16)
        check_number(
            getattr(config, name),
            f"checkpoint config {name}",
            ge=1 if name in sizes else 0,
            le=limit,
            integer=True,
            where=path,
        )
    for layer in config.feature_layers:
        check_number(
            layer, "checkpoint config feature_layers", ge=0, le=256, integer=True, where=path
        )
    for name in ("rope_theta", "norm_eps"):
        check_number(getattr(config, name), f"checkpoint config {name}", gt=0, where=path)
    if config.block not in ("encoder", "llama"):
        raise InputError(path, None, f"checkpoint config block {config.block!r} is unknown")
    return config


def _check_shapes(path: Path, config: DrafterConfig, weights: dict[str, torch.Tensor]) -> None:
    """The weights' shapes must be those `config` builds (on the meta device: no memory)."""
    try:
        with torch.device("meta"):
            vocab = torch.empty(weights["vocab"].shape, dtype=torch.long)
            expected = Drafter(config, vocab).state_dict()
    except ValueError as err:
        raise InputError(path, None, f"checkpoint config: {err}") from None
    for name, tensor in expected.items():
        got = weights.get(name)
        if got is None or tuple(got.shape) != tuple(tensor.shape):
            shape = None if got is None else tuple(got.shape)
            raise InputError(
                path,
                None,
                f"checkpoint weight {name!r} is {shape}, its config needs {tuple(tensor.shape)}",
            )


def drafter_gamma(path: str | Path) -> int:
    """The drafts per round a drafter checkpoint proposes, read from its config alone, so the
    options can be checked against it before any model is built."""
    return _config(Path(path), read_checkpoint(path)).gamma


def load_drafter(path: str | Path, target) -> Drafter:
    """A drafter ready to run on `target`; refuses one trained for another target."""
    blob = read_checkpoint(path)
    if blob["target"] != target.fingerprint:
        raise InputError(
            path,
            None,
            f"drafter was trained for target {blob['target']}, not {target.fingerprint}",
        )
    config = _config(Path(path), blob)
    _check_shapes(Path(path), config, blob["weights"])
    try:
        weights = {k: v.float() if v.is_floating_point() else v for k, v in blob["weights"].items()}
        drafter = Drafter(config, weights["vocab"])
        drafter.load_state_dict(weights)
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise InputError(
            path, None, f"drafter checkpoint does not match its config ({str(err).splitlines()[0]})"
        ) from err
    drafter.attach(target.embedding.weight, target.lm_head_weight)
    return drafter.eval()

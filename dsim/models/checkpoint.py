"""Drafter checkpoints: small files with the drafter's own weights (fp16), its config and the
fingerprint of the target it was trained for. Loaded with `weights_only=True`; anything wrong
becomes an InputError naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dsim.errors import InputError
from dsim.fileio import atomic_path
from dsim.models.drafters import Drafter, DrafterConfig, config_dict

FORMAT = "dsim-drafter/2"
# /1 files predate the llama block; their configs lack its fields, whose defaults mean /1.
READABLE = ("dsim-drafter/1", FORMAT)


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
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "drafter checkpoint not found")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a damaged zip/pickle
        raise InputError(
            path, None, f"not a readable drafter checkpoint ({str(err).splitlines()[0]})"
        ) from err
    if not isinstance(blob, dict) or blob.get("format") not in READABLE:
        raise InputError(path, None, f"not a {FORMAT} drafter checkpoint")
    return blob


def load_drafter(path: str | Path, target) -> Drafter:
    """A drafter ready to run on `target`; refuses one trained for another target."""
    blob = read_checkpoint(path)
    if blob["target"] != target.fingerprint:
        raise InputError(
            path,
            None,
            f"drafter was trained for target {blob['target']}, not {target.fingerprint}",
        )
    try:
        config = DrafterConfig(**blob["config"])
        weights = {k: v.float() if v.is_floating_point() else v for k, v in blob["weights"].items()}
        drafter = Drafter(config, weights["vocab"])
        drafter.load_state_dict(weights)
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise InputError(
            path, None, f"drafter checkpoint does not match its config ({str(err).splitlines()[0]})"
        ) from err
    drafter.attach(target.embedding.weight, target.lm_head_weight)
    return drafter.eval()

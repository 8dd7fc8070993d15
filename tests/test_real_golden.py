"""Seeded outputs of the real-model paths on the tiny target, compared with committed golden
files: `dsim collect`'s trace and tokens, `dsim serve`'s requests and texts, the toy decoder's
tokens and accepted counts, and the sampled training answers. Refactors of the speculative
round and the KV cache must leave them as they are.

Integers (tokens, counts, lengths) are compared exactly everywhere. A float array is kept as
its digest and as a few fixed random projections: on a machine whose float kernels give the
same bits as the one that wrote the files (`FLOATS`, a digest of a fixed matmul and softmax)
the digests must agree bit for bit; on another (a CPU with other SIMD units rounds matmuls
differently in the last bits) the projections must agree within PROJ_TOL of the array's norm.

`DSIM_WRITE_GOLDEN=1 pytest tests/test_real_golden.py` rewrites the files (then review the diff).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ends_often, write_flat_profile

from dsim.models.collect import collect
from dsim.models.data import Prompt
from dsim.models.decode import generate
from dsim.models.drafters import Drafter, DrafterConfig
from dsim.models.target import tiny_target
from dsim.models.toy_decoder import chain, speculative_decode
from dsim.real.runner import run_real
from dsim.run_spec import RunSpec

GOLDEN = Path(__file__).resolve().parent / "golden"
PROMPTS = [
    Prompt(f"p{i}", "chat", f"question {i}: why is the sky {'blue ' * i}?") for i in range(5)
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["tiny", "eos"])
def target(request):
    """The tiny target, and one that ends answers often."""
    return ends_often(tiny_target()) if request.param == "eos" else tiny_target()


def drafter_for(target, block: str) -> Drafter:
    """An untrained drafter: encoder block (final state) or llama block (layers 1, 2, context 4)."""
    torch.manual_seed(1)
    if block == "encoder":
        config = DrafterConfig.default("markov", 4, target.hidden_size, width=32)
        drafter = Drafter(config, torch.arange(300))
    else:
        config = DrafterConfig.for_target("markov", 3, target.model.config, [1, 2], context=4)
        drafter = Drafter(config, torch.arange(300)).init_from_target(target.model)
    return drafter.attach(target.embedding.weight, target.lm_head_weight).eval()


PROJ_TOL = 1e-4  # projections' tolerance across machines, relative to the array's norm


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(f"{a.dtype}{a.shape}".encode() + a.tobytes()).hexdigest()[:32]


def floats_fingerprint() -> str:
    """Which float kernels this machine runs: the bits of a fixed matmul and softmax."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(37, 64, generator=g), torch.randn(64, 300, generator=g)
    return _sha(torch.softmax(x @ w, -1).numpy())


FLOATS = floats_fingerprint()


def digest(array) -> str | dict:
    """An integer array: sha256 of its dtype, shape and bytes (equal digests are equal arrays).
    A float array: that digest, its norm and 4 fixed random projections (NaNs as 0, their
    places in the digest)."""
    a = np.ascontiguousarray(array.numpy() if isinstance(array, torch.Tensor) else array)
    if not np.issubdtype(a.dtype, np.floating):
        return _sha(a)
    flat = np.nan_to_num(a.astype(np.float64).ravel(), nan=0.0)
    r = np.random.default_rng(0).standard_normal((4, flat.size))
    return {"sha": _sha(a), "norm": float(np.linalg.norm(flat)), "proj": (r @ flat).tolist()}


def same(got, expected, exact: bool) -> bool:
    """Golden equality (module doc): float digests by their bits where `exact`, else by their
    projections; everything else exactly."""
    if isinstance(got, dict) and isinstance(expected, dict) and "proj" in expected:
        if exact:
            return got["sha"] == expected["sha"]
        scale = PROJ_TOL * max(expected["norm"], 1e-12)
        return np.allclose(got["proj"], expected["proj"], rtol=0, atol=scale)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(
            same(g, e, exact) for g, e in zip(got, expected, strict=True)
        )
    return got == expected


def check(name: str, got: dict) -> None:
    path = GOLDEN / f"{name}.json"
    got = {**got, "floats": FLOATS}
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(got.items())]
    text = "{\n" + ",\n".join(lines) + "\n}\n"  # a key per line: a diff names what changed
    if os.environ.get("DSIM_WRITE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    expected = json.loads(path.read_text())
    exact = expected.get("floats") == FLOATS
    for key in sorted((expected.keys() | got.keys()) - {"floats"}):
        assert same(got.get(key), expected.get(key), exact), (
            f"{name}: {key} differs from {path.name}"
        )


@pytest.mark.parametrize("block", ["encoder", "llama"])
@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_collect_matches_golden(target, block, greedy):
    if greedy and target.name == "eos":
        pytest.skip("every greedy answer of the eos target ends at its first token: no round")
    df, tokens = collect(target, drafter_for(target, block), PROMPTS, 14, 2, 5, greedy)
    got = {"tokens": tokens, "accepted": df["accepted"].tolist()}
    got |= {col: digest(df[col].to_numpy()) for col in df.columns if col != "domain"}
    got["domain"] = df["domain"].tolist()
    check(f"collect_{target.name}_{block}_{'greedy' if greedy else 'sampled'}", got)


@pytest.mark.parametrize("policy", ["fixed:3", "dspark", "ar"])
@pytest.mark.parametrize("block", ["encoder", "llama"])
def test_serve_matches_golden(tmp_path, target, policy, block):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(vars(p)) + "\n" for p in PROMPTS))
    profile = write_flat_profile(tmp_path / "profile.csv", 5.0)
    spec = RunSpec(
        trace="synthetic:rate=20,n=5,output=18,sigma=0",
        profile=str(profile),
        policy=policy,
        draft_cost="0",
        prefill_chunk=8,
        seed=3,
    )
    run = run_real(spec, target, drafter_for(target, block), prompts, max_new_tokens=18)
    req = run.result.requests
    got = {col: req[col].tolist() for col in req.columns if not col.endswith("_s")}
    got |= {col: digest(req[col].to_numpy()) for col in req.columns if col.endswith("_s")}
    got["outputs"] = run.outputs
    got["texts"] = [t["text"] for t in run.texts]
    check(f"serve_{target.name}_{block}_{policy.replace(':', '')}", got)


def test_toy_decoder_matches_golden():
    seen: list[list[int]] = []

    def observe(lengths, accepted) -> None:
        seen.append([int(x) for x in accepted])

    target, draft = chain(5, 1, 1.5), chain(5, 2, 1.5)
    lengths = lambda states: (states[:, 0] % 4).astype(np.int64)  # noqa: E731
    out, first = speculative_decode(target, draft, lengths, 40, 6, 3, 7, observe)
    check("toy_decoder", {"tokens": out.tolist(), "first": first.tolist(), "accepted": seen})


def test_generate_matches_golden(target):
    encoded = [target.encode_chat(p.prompt) for p in PROMPTS[:3]]
    answers = generate(target, encoded, 10, torch.Generator().manual_seed(4), (1,), 3, 2)
    got = {"tokens": [a["tokens"] for a in answers]}
    for key in ("hidden", "lse", "layers", "tail_hidden", "tail_layers", "tail_tokens"):
        got[key] = [digest(a[key]) for a in answers]
    check(f"generate_{target.name}", got)


def test_floats_compare_by_bits_on_the_same_kernels_and_by_projections_elsewhere():
    a = np.random.default_rng(1).standard_normal(500).astype(np.float32)
    rounded = a * np.float32(1 + 1e-6)  # what other SIMD units' rounding does
    changed = a.copy()
    changed[7] += 0.1 * np.linalg.norm(a)  # what a change of behaviour does
    golden = digest(a)
    assert same(digest(a), golden, exact=True) and same(digest(a), golden, exact=False)
    assert not same(digest(rounded), golden, exact=True)
    assert same(digest(rounded), golden, exact=False)
    assert not same(digest(changed), golden, exact=False)
    assert digest(np.arange(4)) == digest(np.arange(4)) != digest(np.arange(1, 5))  # ints: exact

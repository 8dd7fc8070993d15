"""Real-model pipeline on a tiny random Llama: training data, training, collection, errors."""

from __future__ import annotations

import copy
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from dsim import cli
from dsim.acceptance.trace import read_acceptance_trace, read_trace_metadata
from dsim.errors import InputError
from dsim.models import data
from dsim.models.checkpoint import load_drafter, read_checkpoint, save_drafter
from dsim.models.collect import collect
from dsim.models.drafters import KINDS, Drafter, DrafterConfig, History, push_history
from dsim.models.target import (
    LEGACY_DEFAULTS,
    canonical_config,
    fingerprint,
    load_target,
    tiny_target,
)
from dsim.models.train import (
    LossWeights,
    TrainingData,
    TrainSettings,
    draft_vocabulary,
    drafter_config,
    drafter_loss,
    train_drafter,
)
from dsim.validation.settings import DEFAULT_DRAFTER

SETTINGS = TrainSettings(steps=30, batch_size=16, lr=3e-3, warmup=3, vocab_size=300, context=4)
SPEC = data.DataSpec(samples=2, max_new_tokens=24, batch_size=4, layers=(1,), context=4)
PROMPTS = [data.Prompt(f"p{i}", "chat", f"prompt number {i} " * (i + 1)) for i in range(6)]


def _run_cli(monkeypatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["dsim", *args])
    cli.main()


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return tiny_target()


@pytest.fixture(scope="module")
def cache(target, tmp_path_factory) -> data.TrainCache:
    folder = tmp_path_factory.mktemp("data")
    data.build_data(target, PROMPTS, SPEC, folder)
    return data.TrainCache.load(folder)


def test_cache_hidden_states_give_the_target_distribution(target, cache) -> None:
    rows = cache.anchors(0)[:9]
    logits = cache.hidden[rows] @ target.lm_head_weight.T
    torch.testing.assert_close(torch.logsumexp(logits, -1), cache.lse[rows])
    answers = cache.offsets.diff() - cache.answer_start
    for gamma in (7, int(answers.min()) + 1):  # the second leaves the shortest answer none
        assert len(cache.anchors(gamma)) == int((answers - gamma).clamp(min=0).sum())
    assert cache.answer_tokens == int(answers.sum()) == len(cache.anchors(0))


def test_cached_layers_equal_a_teacher_forced_pass(target, cache) -> None:
    """The states captured while sampling are those of one plain forward over prompt + answer,
    at every kept layer, for the answer rows and the prompt rows kept as context."""
    s = 3
    lo, hi, start = int(cache.offsets[s]), int(cache.offsets[s + 1]), int(cache.answer_start[s])
    prompt = target.encode_chat(next(p.prompt for p in PROMPTS if p.id == cache.ids[s]))
    answer = cache.token[lo + start : hi].tolist()
    with torch.no_grad():
        states = target.model.model(
            input_ids=torch.tensor([prompt + answer[:-1]]), output_hidden_states=True
        ).hidden_states
    positions = torch.arange(len(prompt) - 1 - start, len(prompt) - 1 + len(answer))
    features = cache.features(torch.arange(lo, hi), [1, 2])
    assert features.shape == (hi - lo, 2 * target.hidden_size)
    expected = torch.cat([states[1][0, positions], states[2][0, positions]], dim=-1)
    torch.testing.assert_close(features, expected, atol=2e-3, rtol=2e-3)  # layer 1 is fp16
    assert cache.token[lo : lo + start].tolist() == prompt[len(prompt) - start :]


def test_data_build_resumes_to_the_same_bytes(target, tmp_path) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    data.build_data(target, PROMPTS, SPEC, whole)
    stats = data.build_data(target, PROMPTS, SPEC, resumed, stop_after=1)  # "crash" after 1
    assert stats["batches_written"] == 1
    with pytest.raises(InputError, match="batches missing"):
        data.TrainCache.load(resumed)
    stats = data.build_data(target, PROMPTS, SPEC, resumed)
    assert stats["batches_written"] == stats["batches"] - 1 == 2
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in resumed.iterdir())
    for name in names:
        assert (whole / name).read_bytes() == (resumed / name).read_bytes()
    with pytest.raises(InputError, match="another target, settings"):
        data.build_data(target, PROMPTS, replace(SPEC, seed=1), resumed)
    sharded = tmp_path / "sharded"  # two processes, one folder
    for k in (1, 0):
        data.build_data(target, PROMPTS, SPEC, sharded, shard=(k, 2))
    for name in names:
        assert (whole / name).read_bytes() == (sharded / name).read_bytes()


class _Fixed(torch.nn.Module):
    """A stand-in drafter whose draft distribution is given."""

    def __init__(self, probs: torch.Tensor) -> None:
        super().__init__()
        self.probs, self.vocab = probs, torch.arange(probs.shape[-1])
        self.to_draft = torch.arange(probs.shape[-1])

    def forward(self, hidden, anchor, tokens, history=None):
        return self.probs.log(), torch.zeros(self.probs.shape[:2]), tokens


def test_kl_is_zero_at_the_renormalised_target_and_matches_the_closed_form() -> None:
    p_t = torch.tensor([[[0.5, 0.3, 0.0], [0.2, 0.2, 0.4]]])  # mass 0.8 and 0.8 on V
    batch = {"hidden": None, "anchor": None, "tokens": torch.zeros(1, 2, dtype=torch.long)}
    batch |= {"target_probs": p_t, "history": None}
    only_kl = LossWeights(kl=1.0, tv=0.0, ce=0.0)
    _, parts = drafter_loss(_Fixed(p_t / p_t.sum(-1, keepdim=True)), batch, only_kl)
    assert abs(parts["kl"]) < 1e-7
    uniform = torch.full((1, 2, 3), 1 / 3)
    _, parts = drafter_loss(_Fixed(uniform), batch, only_kl)
    q = p_t / 0.8
    expected = 0.8 * torch.xlogy(q, q / (1 / 3)).sum(-1).mean()
    assert parts["kl"] == pytest.approx(float(expected), rel=1e-6)


def test_drafter_block_starts_as_the_targets_last_layer(target) -> None:
    config = DrafterConfig.for_target("ar", 3, target.model.config, [1, 2], context=2)
    drafter = Drafter(config, torch.arange(300)).init_from_target(target.model)
    x = torch.randn(2, 6, target.hidden_size, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(6)[None].expand(2, -1)
    layer = target.model.model.layers[-1]
    with torch.no_grad():
        rope = target.model.model.rotary_emb(x, positions)
        expected = layer(x, position_embeddings=rope, attention_mask=None, position_ids=positions)
        expected = expected[0] if isinstance(expected, tuple) else expected
        # the last 4 positions as queries, the first 2 as the memory of recent states
        allowed = torch.ones(6, 6, dtype=torch.bool).tril()[2:].expand(2, 4, 6)
        got = drafter.blocks[0](x[:, 2:], x[:, :2], allowed)
    torch.testing.assert_close(got, expected[:, 2:], atol=1e-5, rtol=1e-5)


def test_history_window_slides_by_the_accepted_prefix() -> None:
    """Window of 3: the old anchor and the accepted drafts enter, each with the features of
    the position before it; rejected drafts never do."""
    hist = History(
        torch.tensor([[[1.0], [2.0], [3.0]], [[0.0], [0.0], [7.0]]]),
        torch.tensor([[11, 12, 13], [0, 0, 17]]),
        torch.tensor([[True, True, True], [False, False, True]]),
    )
    hidden, anchor = torch.tensor([[4.0], [8.0]]), torch.tensor([14, 18])

    accepted, drafts = torch.tensor([2, 0]), torch.tensor([[15, 16, 99], [19, 98, 97]])
    block_features = torch.tensor([[[5.0], [6.0], [-1.0], [-2.0]], [[9.0]] * 4])
    out = push_history(hist, hidden, anchor, accepted, drafts, block_features)
    assert out.features[..., 0].tolist() == [[4.0, 5.0, 6.0], [0.0, 7.0, 8.0]]
    assert out.tokens.tolist() == [[14, 15, 16], [0, 17, 18]]
    assert out.valid.tolist() == [[True, True, True], [False, True, True]]


def test_checkpoint_round_trip_and_old_format(target, cache, tmp_path) -> None:
    config = drafter_config("markov", 3, target, cache, SETTINGS)
    vocab = draft_vocabulary(cache, 300, target.vocab_size)
    drafter = Drafter(config, vocab).init_from_target(target.model)
    drafter.attach(target.embedding.weight, target.lm_head_weight)
    save_drafter(tmp_path / "d.pt", drafter, target.fingerprint, {})
    loaded = load_drafter(tmp_path / "d.pt", target)
    assert loaded.config == config
    for name, value in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value.half().float()), name
    # A dsim-drafter/1 file: no llama fields in its config; it loads as the encoder block.
    old = Drafter(DrafterConfig.default("parallel", 3, target.hidden_size, width=32), vocab)
    save_drafter(tmp_path / "old.pt", old, target.fingerprint, {})
    blob = torch.load(tmp_path / "old.pt", weights_only=True)
    blob["format"] = "dsim-drafter/1"
    old_fields = ("kind", "gamma", "target_hidden", "width", "layers", "heads", "rank", "state")
    blob["config"] = {k: blob["config"][k] for k in old_fields}
    torch.save(blob, tmp_path / "old.pt")
    assert load_drafter(tmp_path / "old.pt", target).config.block == "encoder"


def test_the_shipped_checkpoint_builds() -> None:
    """The one shipped drafter (the default of `dsim validate`) is the second recipe
    (dsim-drafter/2, llama block) and loads strictly."""
    blob = read_checkpoint(ROOT / DEFAULT_DRAFTER)
    config = DrafterConfig(**blob["config"])
    drafter = Drafter(config, blob["weights"]["vocab"])
    drafter.load_state_dict({k: v.float() if v.is_floating_point() else v
                             for k, v in blob["weights"].items()})  # fmt: skip
    assert blob["format"] == "dsim-drafter/2" and config.block == "llama"
    assert config.kind == DEFAULT_DRAFTER.stem


def test_the_fingerprint_names_the_model_not_the_library(target) -> None:
    """A config written by another transformers release is the same model; one layer more is not."""
    config = target.model.config.to_dict()
    other_release = config | {"transformers_version": "99.0.0"}
    deeper = config | {"num_hidden_layers": config["num_hidden_layers"] + 1}
    assert fingerprint("t", other_release) == fingerprint("t", config)
    assert fingerprint("t", deeper) != fingerprint("t", config)


def test_a_config_of_transformers_4_and_of_5_name_the_same_model(target) -> None:
    """4.x wrote sampling settings and generic attributes into every config and kept RoPE in
    `rope_theta` / `rope_scaling`; 5.x folds RoPE into `rope_parameters` (the keys as 4.57.1
    and 5.25.0 write them for SmolLM2-135M)."""
    v5 = canonical_config(target.model.config.to_dict())  # the 5.x form, whichever is installed
    rope = v5["rope_parameters"]
    assert rope["rope_type"] == "default"
    v4 = {k: v for k, v in v5.items() if k != "rope_parameters"}
    v4 |= {"rope_theta": rope["rope_theta"], "rope_scaling": None}
    v4 |= LEGACY_DEFAULTS | {"temperature": 1.0, "top_k": 50, "max_length": 20, "num_beams": 1}
    assert fingerprint("t", v4) == fingerprint("t", v5)
    assert fingerprint("t", v4 | {"rope_theta": 2 * rope["rope_theta"]}) != fingerprint("t", v5)
    assert fingerprint("t", v4 | {"is_decoder": True}) != fingerprint("t", v5)  # not a default
    linear = {"rope_type": "linear", "factor": 2.0, "rope_theta": rope["rope_theta"]}
    scaled5 = v5 | {"rope_parameters": linear}
    assert fingerprint("t", v4 | {"rope_scaling": {"type": "linear", "factor": 2.0}}) == (
        fingerprint("t", scaled5)
    )
    assert fingerprint("t", scaled5) != fingerprint("t", v5)


def test_the_shipped_drafter_and_traces_name_the_installed_target() -> None:
    """What a fresh install loads: `dsim validate`'s default drafter on SmolLM2-135M, and the
    shipped acceptance traces recorded on that same target."""
    real = load_target()
    assert load_drafter(ROOT / DEFAULT_DRAFTER, real).config.kind == DEFAULT_DRAFTER.stem
    sidecars = sorted((ROOT / "traces/acceptance").glob("smollm2-*.json"))
    assert sidecars and {read_trace_metadata(p.with_suffix(".parquet"))["target"]
                         for p in sidecars} == {real.fingerprint}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_few_training_steps_lower_the_loss(target, cache, kind, tmp_path) -> None:
    vocab = draft_vocabulary(cache, SETTINGS.vocab_size, target.vocab_size)
    out, state = tmp_path / "d.pt", tmp_path / "d.state.pt"
    train_drafter(kind, 4, cache, target, SETTINGS, out, state, resume=False)
    trained = load_drafter(out, target)
    data_ = TrainingData(cache, target.lm_head_weight, vocab, trained.config)
    batch = data_.batch(data_.anchors[:16])
    fresh = type(trained)(trained.config, vocab).init_from_target(target.model)
    fresh.attach(target.embedding.weight, target.lm_head_weight)
    with torch.no_grad():
        before, _ = drafter_loss(fresh, batch)
        after, _ = drafter_loss(trained, batch)
    assert float(after) < 0.9 * float(before)


def test_training_resumes_where_it_stopped(target, cache, tmp_path) -> None:
    out, state = tmp_path / "d.pt", tmp_path / "d.state.pt"
    short = replace(SETTINGS, steps=10, save_every=5)
    train_drafter("markov", 4, cache, target, short, out, state, resume=False)
    whole = torch.load(out, weights_only=True)["weights"]

    def crash(step: int, loss: float, parts: dict) -> None:
        if step == 7:  # after the state of step 5 was saved
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_drafter("markov", 4, cache, target, short, out, state, resume=False, progress=crash)
    stats = train_drafter("markov", 4, cache, target, short, out, state, resume=True)
    resumed = torch.load(out, weights_only=True)["weights"]
    assert stats["steps"] == 10
    for name, value in whole.items():
        torch.testing.assert_close(resumed[name], value)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Prompt files copied from the repo, a tiny prepared cache and a tiny trained drafter."""
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(ROOT / "traces" / "prompts", root / "prompts")
    return root


def test_cli_prepare_train_collect_writes_a_valid_trace(workdir, monkeypatch) -> None:
    torch.set_num_threads(1)
    cache, ckpt, trace = workdir / "cache.pt", workdir / "tiny.pt", workdir / "t.parquet"
    _run_cli(monkeypatch, "prepare-data", "--target", "tiny", "--out", str(cache),
             "--prompts-dir", str(workdir / "prompts"), "--limit", "4", "--samples", "2",
             "--heldout", str(workdir / "prompts" / "heldout.jsonl"), "--context", "4",
             "--max-new-tokens", "20", "--batch-size", "4")  # fmt: skip
    assert (cache / "part-00001.pt").is_file() and not (cache / "part-00002.pt").exists()
    _run_cli(monkeypatch, "train", "--target", "tiny", "--drafter", "markov", "--gamma", "3",
             "--steps", "5", "--vocab-size", "300", "--context", "4", "--data", str(cache),
             "--out", str(ckpt), "--state", str(workdir / "s.pt"))  # fmt: skip
    _run_cli(monkeypatch, "collect", "--target", "tiny", "--drafter", str(ckpt),
             "--prompts", str(workdir / "prompts" / "heldout.jsonl"), "--out", str(trace),
             "--max-new-tokens", "12", "--limit", "6")  # fmt: skip
    df, meta = read_acceptance_trace(trace)
    heldout = data.read_prompt_file(workdir / "prompts" / "heldout.jsonl")[:6]
    assert set(df["domain"]) == {p.domain for p in heldout} and df["seq_id"].nunique() == 6
    assert df["gamma"].eq(3).all() and meta["temperature"] == 1.0
    assert {"conf_3", "tv_3"} <= set(df.columns)
    # every sequence emits at most max_new_tokens: one from prefill, 1 + accepted per round
    emitted = 1 + (1 + df["accepted"]).groupby(df["seq_id"]).sum()
    assert (emitted <= 12 + 3).all()


def test_corrupt_checkpoint_exits_2_with_one_line(tmp_path, monkeypatch, capsys) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "domain": "chat", "prompt": "hi"}\n')
    with pytest.raises(SystemExit) as exit_info:
        _run_cli(monkeypatch, "collect", "--target", "tiny", "--drafter", str(bad),
                 "--prompts", str(prompts), "--out", str(tmp_path / "t.parquet"))  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.pt" in err and "checkpoint" in err


def test_drafter_for_another_target_is_refused(target, cache, tmp_path) -> None:
    out = tmp_path / "d.pt"
    train_drafter("parallel", 4, cache, target, SETTINGS, out, tmp_path / "s.pt", resume=False)
    with pytest.raises(InputError, match="trained for target"):
        load_drafter(out, tiny_target(seed=1))


@pytest.mark.parametrize("block", ["llama", "encoder"])
def test_greedy_speculative_decoding_reproduces_greedy_target(target, cache, block) -> None:
    """With greedy verification the output must be the target's own greedy continuation,
    whatever the (here untrained) drafter proposes."""
    settings = replace(SETTINGS, block=block, width=32)
    drafter = Drafter(drafter_config("markov", 3, target, cache, settings),
                      draft_vocabulary(cache, 300, target.vocab_size))  # fmt: skip
    drafter.attach(target.embedding.weight, target.lm_head_weight).eval()
    prompts = [data.Prompt("a", "chat", "abc"), data.Prompt("b", "code", "hello there")]
    df, outputs = collect(target, drafter, prompts, 10, 2, seed=0, greedy=True)
    for prompt, out in zip(prompts, outputs, strict=True):
        ids = target.encode_chat(prompt.prompt)
        expected = []
        with torch.no_grad():
            while len(expected) < 10 and target.eos_id not in expected:
                logits = target.model(input_ids=torch.tensor([ids + expected])).logits[0, -1]
                expected.append(int(logits.argmax()))
        assert out == expected
    assert df["accepted"].max() <= 3


@pytest.fixture(scope="module")
def checkpoint_blob(target, cache, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ckpt") / "d.pt"
    train_drafter("parallel", 4, cache, target, SETTINGS, out, out.with_suffix(".s"), resume=False)
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize(
    ("edit", "text"),
    [
        (lambda b: b.pop("config"), "lacks 'config'"),
        (lambda b: b["weights"].pop("vocab"), "'vocab' among them"),
        (lambda b: b["config"].update(width=10**9), "config width must be an integer >= 1"),
        (lambda b: b["config"].update(layers=10**9), "config layers must be"),
        (lambda b: b["config"].update(layers=b["config"]["layers"] + 1), "weight .* config needs"),
        (lambda b: b["config"].update(bogus=1), "missing or unknown fields"),
    ],
    ids=["no-config", "no-vocab", "huge-width", "huge-depth", "shape-mismatch", "unknown-field"],
)
def test_damaged_checkpoint_is_refused_before_allocating(
    checkpoint_blob, target, tmp_path, edit, text
) -> None:
    blob = copy.deepcopy(checkpoint_blob)
    edit(blob)
    bad = tmp_path / "bad.pt"
    torch.save(blob, bad)
    with pytest.raises(InputError, match=text):
        load_drafter(bad, target)


def test_a_batch_without_rounds_gives_the_trace_columns_with_no_rows() -> None:
    """Every prompt of a batch can end on its first token: that batch has no rounds, and its
    frame must concatenate with the others' (it once lacked every column but seq_id)."""
    import numpy as np
    import pandas as pd

    from dsim.models.collect import _trace_frame

    gamma = 3
    one = {
        "seq_id": np.array([4]),
        "round": np.array([0]),
        "accepted": np.array([2]),
        "conf": np.full((1, gamma), 0.5),
        "tv": np.full((1, gamma), 0.25),
    }
    empty, full = _trace_frame([], gamma), _trace_frame([one], gamma)
    assert len(empty) == 0 and list(empty.columns) == list(full.columns)
    both = pd.concat([empty, full], ignore_index=True).sort_values(["seq_id", "round"])
    assert both["accepted"].tolist() == [2]

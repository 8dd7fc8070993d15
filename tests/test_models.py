"""Real-model pipeline on a tiny random Llama: batched decoding, training, collection, errors."""

from __future__ import annotations

import copy
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dsim import cli
from dsim.acceptance.trace import read_acceptance_trace
from dsim.errors import InputError
from dsim.models import data
from dsim.models.checkpoint import load_drafter
from dsim.models.collect import collect
from dsim.models.decode import BatchDecoder
from dsim.models.drafters import KINDS, Drafter, DrafterConfig
from dsim.models.target import tiny_target
from dsim.models.train import (
    TrainingData,
    TrainSettings,
    draft_vocabulary,
    drafter_loss,
    train_drafter,
)

REPO = Path(__file__).resolve().parents[1]
SETTINGS = TrainSettings(steps=30, batch_size=16, lr=3e-3, vocab_size=300, width=32)


def _run_cli(monkeypatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["dsim", *args])
    cli.main()


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return tiny_target()


@pytest.fixture(scope="module")
def cache(target) -> data.HiddenCache:
    prompts = [data.Prompt(f"p{i}", "chat", f"prompt number {i} " * (i + 1)) for i in range(8)]
    responses = data.generate_responses(target, prompts, 24, 256, 8, seed=0)
    return data.hidden_cache(target, responses)


def test_batched_decoder_matches_unbatched_forward(target) -> None:
    """Ragged prompts, a verify block with rejected tails, then more tokens: every hidden state
    equals a plain forward over the kept tokens."""
    a, b = [256, 5, 6, 7, 8, 9], [256, 10, 11]
    decoder = BatchDecoder(target)
    first = decoder.prefill([a, b])
    block = decoder.extend(torch.tensor([[20, 21, 22], [30, 31, 32]]), torch.tensor([3, 2]))
    decoder.trim(torch.tensor([2, 1]))
    after = decoder.extend(torch.tensor([[40, 41], [50, 51]]), torch.tensor([2, 2]))
    plain = target.model.model
    with torch.no_grad():
        ref_a = plain(input_ids=torch.tensor([a + [20, 21, 40, 41]])).last_hidden_state[0]
        ref_b = plain(input_ids=torch.tensor([b + [30, 50, 51]])).last_hidden_state[0]
    torch.testing.assert_close(first, torch.stack([ref_a[5], ref_b[2]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(block[0, :2], ref_a[6:8], atol=1e-5, rtol=0)
    torch.testing.assert_close(after[0], ref_a[8:10], atol=1e-5, rtol=0)
    torch.testing.assert_close(after[1], ref_b[4:6], atol=1e-5, rtol=0)


def test_merged_decoders_continue_like_unbatched_runs(target) -> None:
    """Continuous batching: a sequence prefilled later joins a running batch."""
    a, b = [256, 5, 6, 7, 8, 9, 10, 11], [256, 12]
    running, newcomer = BatchDecoder(target), BatchDecoder(target)
    running.prefill([a])
    running.extend(torch.tensor([[20, 21]]), torch.tensor([2]))
    running.trim(torch.tensor([1]))
    newcomer.prefill([b])
    running.merge(newcomer)
    out = running.extend(torch.tensor([[30, 31], [40, 41]]), torch.tensor([2, 2]))
    plain = target.model.model
    with torch.no_grad():
        ref_a = plain(input_ids=torch.tensor([a + [20, 30, 31]])).last_hidden_state[0]
        ref_b = plain(input_ids=torch.tensor([b + [40, 41]])).last_hidden_state[0]
    torch.testing.assert_close(out[0], ref_a[-2:], atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], ref_b[-2:], atol=1e-5, rtol=0)


def test_cache_hidden_states_give_the_target_distribution(target, cache) -> None:
    logits = cache.hidden[:5] @ target.lm_head_weight.T
    torch.testing.assert_close(torch.logsumexp(logits, -1), cache.lse[:5])
    assert len(cache.anchors(7)) == int((cache.offsets.diff() - 7).clamp(min=0).sum())


@pytest.mark.parametrize("kind", KINDS)
def test_a_few_training_steps_lower_the_loss(target, cache, kind, tmp_path) -> None:
    vocab = draft_vocabulary(cache, SETTINGS.vocab_size, target.vocab_size)
    out, state = tmp_path / "d.pt", tmp_path / "d.state.pt"
    train_drafter(kind, 4, cache, target, SETTINGS, out, state, resume=False)
    trained = load_drafter(out, target)
    gamma = trained.gamma
    batch = TrainingData(cache, target.lm_head_weight, vocab, gamma).batch(torch.arange(16))
    fresh = type(trained)(trained.config, vocab)
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
    shutil.copytree(REPO / "traces" / "prompts", root / "prompts")
    return root


def test_cli_prepare_train_collect_writes_a_valid_trace(workdir, monkeypatch) -> None:
    torch.set_num_threads(1)
    cache, ckpt, trace = workdir / "cache.pt", workdir / "tiny.pt", workdir / "t.parquet"
    _run_cli(monkeypatch, "prepare-data", "--target", "tiny", "--cache", str(cache),
             "--prompts-dir", str(workdir / "prompts"), "--per-domain", "chat=6,code=6",
             "--heldout", "chat=1,code=1", "--max-new-tokens", "20")  # fmt: skip
    _run_cli(monkeypatch, "train", "--target", "tiny", "--drafter", "markov", "--gamma", "3",
             "--steps", "5", "--vocab-size", "300", "--width", "32", "--cache", str(cache),
             "--out", str(ckpt), "--state", str(workdir / "s.pt"))  # fmt: skip
    _run_cli(monkeypatch, "collect", "--target", "tiny", "--drafter", str(ckpt),
             "--prompts", str(workdir / "prompts" / "heldout.jsonl"), "--out", str(trace),
             "--max-new-tokens", "12")  # fmt: skip
    df, meta = read_acceptance_trace(trace)
    assert sorted(df["domain"].unique()) == ["chat", "code"]
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


def test_greedy_speculative_decoding_reproduces_greedy_target(target, cache) -> None:
    """With greedy verification the output must be the target's own greedy continuation,
    whatever the (here barely trained) drafter proposes."""
    drafter = Drafter(DrafterConfig.default("markov", 3, target.hidden_size, width=32),
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
        (lambda b: b["config"].update(width=64), "checkpoint weight .* config needs"),
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

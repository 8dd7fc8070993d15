"""Real-model mode on the tiny target: end to end, token conservation, KV trimming, and exactness
against plain decoding of the target."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ends_often, write_flat_profile
from samples import untrained_drafter

from dsim.cli import main
from dsim.errors import InputError
from dsim.models.checkpoint import save_drafter
from dsim.models.drafters import Draft, Drafter, DrafterConfig
from dsim.models.target import tiny_target
from dsim.real.backend import RealBackend
from dsim.real.runner import run_real
from dsim.run import RunSpec

CAP = 20


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture
def files(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "domain": "chat", "prompt": f"question {i}: why?"} for i in range(3)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return prompts, write_flat_profile(tmp_path / "profile.csv", 5.0)


def spec(profile, policy: str, n: int = 3, **kw) -> RunSpec:
    trace = f"synthetic:rate=20,n={n},output={CAP},sigma=0"
    return RunSpec(trace=trace, profile=str(profile), policy=policy, draft_cost="0", **kw)


class PerfectDrafter:
    """Drafts exactly what the target would emit: its argmax (greedy) or a sample from it, with
    the target's own distribution as the draft distribution. Reads the backend's histories."""

    def __init__(self, target, gamma: int) -> None:
        self.target, self.gamma = target, gamma
        self.config = DrafterConfig("ar", gamma, target.hidden_size)  # reads the final state
        self.backend: RealBackend | None = None

    def draft(self, hidden, anchor, generator, greedy, history=None):
        tokens, probs = [], []
        for r in self.backend.drafting:
            seq, row_t, row_p = self.backend.history(int(r)), [], []
            for _ in range(self.gamma):
                p = next_probs(self.target, seq)
                t = int(p.argmax()) if greedy else int(torch.multinomial(p, 1, generator=generator))
                seq, _ = [*seq, t], row_t.append(t)
                row_p.append(p)
            tokens.append(row_t)
            probs.append(torch.stack(row_p))
        n = len(tokens)
        return Draft(torch.tensor(tokens), torch.stack(probs), torch.full((n, self.gamma), 0.9))

    def full_vocab(self, probs, vocab_size):
        return probs

    def attach(self, *args, **kwargs) -> RealBackend:
        """Build the run's backend and read histories from it."""
        self.backend = RealBackend(*args, **kwargs)
        return self.backend


def next_probs(target, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = target.model(input_ids=torch.tensor([seq])).logits[0, -1]
    return torch.softmax(logits, -1)


def greedy_reference(target, prompt: list[int], cap: int) -> list[int]:
    out: list[int] = []
    while len(out) < cap and (not out or out[-1] != target.eos_id):
        out.append(int(next_probs(target, prompt + out).argmax()))
    return out


@pytest.mark.parametrize("block", ["encoder", "llama"])  # dsim-drafter/1 and /2 checkpoints
def test_run_real_cli_end_to_end(monkeypatch, capsys, tmp_path, files, target, block):
    prompts, profile = files
    ckpt = tmp_path / "drafter.pt"
    drafter = untrained_drafter(target) if block == "encoder" else llama_drafter(target)
    save_drafter(ckpt, drafter, target.fingerprint, {})
    out = tmp_path / "run"
    argv = ["dsim", "serve", "--target", "tiny", "--drafter", str(ckpt)]
    argv += ["--prompts", str(prompts), "--profile", str(profile), "--policy", "dspark"]
    argv += ["--trace", f"synthetic:rate=20,n=3,output={CAP},sigma=0", "--max-new-tokens", "12"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), "--no-progress"])
    main()
    assert {p.name for p in out.iterdir()} == {"requests.parquet", "summary.json", "texts.jsonl"}
    requests = pd.read_parquet(out / "requests.parquet")
    texts = [json.loads(line) for line in (out / "texts.jsonl").read_text().splitlines()]
    assert [t["output_tokens"] for t in texts] == requests["output_tokens"].tolist()
    assert (requests["output_tokens"] <= 12).all() and (requests["output_tokens"] >= 1).all()
    assert json.loads((out / "summary.json").read_text())["spec"]["gamma"] == drafter.gamma
    assert "throughput" in capsys.readouterr().out


@pytest.mark.parametrize("gamma", [4, RunSpec().gamma + 2])
def test_serve_checks_fixed_k_against_the_drafters_gamma(
    monkeypatch, capsys, tmp_path, files, target, gamma
):
    """The drafter checkpoint fixes gamma, so `fixed:K` is judged against it (not the run
    default), before any model is loaded: K = gamma + 1 is refused, K = gamma is served."""
    import dsim.real.runner as runner

    prompts, profile = files
    ckpt = tmp_path / "drafter.pt"
    save_drafter(ckpt, untrained_drafter(target, gamma=gamma), target.fingerprint, {})
    argv = ["dsim", "serve", "--target", "tiny", "--drafter", str(ckpt), "--no-progress"]
    argv += ["--prompts", str(prompts), "--profile", str(profile)]
    argv += ["--trace", f"synthetic:rate=20,n=2,output={CAP},sigma=0", "--max-new-tokens", "4"]
    loaded = []
    real_load = runner.load_models
    monkeypatch.setattr(runner, "load_models", lambda *a: loaded.append(1) or real_load(*a))
    monkeypatch.setattr(sys, "argv", [*argv, "--policy", f"fixed:{gamma + 1}"])
    with pytest.raises(SystemExit) as refused:
        main()
    err = capsys.readouterr().err
    assert refused.value.code == 2 and f"gamma (drafts proposed per round) is {gamma}" in err
    assert not loaded  # refused before any model was loaded
    monkeypatch.setattr(sys, "argv", [*argv, "--policy", f"fixed:{gamma}"])
    main()
    assert loaded and "throughput" in capsys.readouterr().out


def test_serve_never_replaces_a_folder_holding_its_prompts(monkeypatch, capsys, tmp_path, files):
    """The prompts are read as much as the spec's files: a run folder holding them is refused
    before any model is loaded (the swap would delete them), the folder as it was."""
    import dsim.real.runner as runner

    prompts, profile = files
    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["dsim", "run", "--profile", str(profile), "--out",
                                      str(out), "--no-progress"])  # fmt: skip
    main()
    (out / "prompts.jsonl").write_bytes(prompts.read_bytes())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    loaded = []
    monkeypatch.setattr(runner, "load_models", lambda *a: loaded.append(1))
    argv = ["dsim", "serve", "--target", "tiny", "--policy", "ar", "--profile", str(profile)]
    argv += ["--prompts", str(out / "prompts.jsonl"), "--out", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as refused:
        main()
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1, err
    assert "prompts.jsonl: is a file this command reads, inside the output folder" in err
    assert not loaded and {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("policy", ["ar", "mtp1", "fixed:3", "dspark", "dspark-async"])
def test_tokens_conserved_and_kv_trimmed(files, target, policy):
    """After every round a request's cache holds prompt + generated - 1 tokens (all but the
    anchor), and the engine's token counts equal the tokens the backend produced."""
    prompts, profile = files
    seen = []

    class Checked(RealBackend):
        def verify(self, idx, lengths, truth):
            emitted, accepted, stop = super().verify(idx, lengths, truth)
            for r in idx:
                r = int(r)
                if self.outputs[r][-1] != self.target.eos_id and len(self.outputs[r]) < CAP:
                    seen.append(self.passes.store.lengths[r] - len(self.history(r)) + 1)
            return emitted, accepted, stop

    drafter = untrained_drafter(target)
    run = run_real(
        spec(profile, policy), target, drafter, prompts, max_new_tokens=CAP, make_backend=Checked
    )
    req = run.result.requests
    for raw, out, n in zip(run.backend.outputs, run.outputs, req["output_tokens"], strict=True):
        assert out == raw[:n] and len(out) == n
        # the backend emits past the cap only in the round that reaches it; the engine cuts there
        assert n == CAP or (raw == out and out[-1] == target.eos_id)
        assert target.eos_id not in out[:-1]
    assert seen and set(seen) == {0}
    assert (req["accepted_drafts"] <= req["verified_drafts"]).all()
    assert run.backend.passes.store.lengths == {}  # every cache released


@pytest.mark.parametrize("policy", ["fixed:3", "dspark"])
def test_greedy_with_perfect_drafter_equals_greedy_decoding(files, target, policy):
    prompts, profile = files
    drafter = PerfectDrafter(target, gamma=3)
    run = run_real(
        spec(profile, policy),
        target,
        drafter,
        prompts,
        max_new_tokens=CAP,
        greedy=True,
        make_backend=drafter.attach,
    )
    for r, out in enumerate(run.outputs):
        assert out == greedy_reference(target, run.backend.prompts[r], CAP)
    req = run.result.requests
    assert (req["verified_drafts"] > 0).any()
    # every verified draft is accepted, except drafts past an end-of-sequence token
    ended = np.array([o[-1] == target.eos_id for o in run.outputs])
    full = req["accepted_drafts"] == req["verified_drafts"]
    assert (full | ended).all()


def test_sampling_with_perfect_drafter_accepts_everything(files, target):
    """A draft distribution equal to the target's is never rejected (rejection sampling)."""
    prompts, profile = files
    drafter = PerfectDrafter(target, gamma=2)
    run = run_real(
        spec(profile, "fixed:2"),
        target,
        drafter,
        prompts,
        max_new_tokens=CAP,
        make_backend=drafter.attach,
    )
    req = run.result.requests
    ended = np.array([o[-1] == target.eos_id for o in run.outputs])
    assert ((req["accepted_drafts"] == req["verified_drafts"]) | ended).all()


def test_wall_clock_runs(files, target):
    prompts, profile = files
    run = run_real(
        spec(profile, "mtp1", n=2),
        target,
        untrained_drafter(target),
        prompts,
        clock="wall",
        max_new_tokens=6,
    )
    assert (run.result.steps.latency_s > 0).all()
    assert (run.result.requests["finish_s"] > run.result.requests["first_token_s"]).all()


@pytest.mark.parametrize(
    ("policy", "drafter", "message"),
    [("oracle", True, "cannot be served for real"), ("dspark", False, "--drafter is required")],
)
def test_real_mode_refuses(files, target, policy, drafter, message):
    prompts, profile = files
    with pytest.raises(InputError, match=message):
        run_real(
            spec(profile, policy), target, untrained_drafter(target) if drafter else None, prompts
        )


def test_same_seed_same_texts(files, target):
    prompts, profile = files
    runs = [
        run_real(
            spec(profile, "dspark"), target, untrained_drafter(target), prompts, max_new_tokens=CAP
        )
        for _ in range(2)
    ]
    assert runs[0].texts == runs[1].texts
    pd.testing.assert_frame_equal(runs[0].result.requests, runs[1].result.requests)


def test_calibration_temperatures_reach_the_policy(target):
    """With STS temperatures the policy sees sigmoid(logit(c) / T), not the raw c."""
    drafter, temps = untrained_drafter(target), np.array([0.5, 1.0, 2.0, 4.0])
    confs = []
    for t in (None, temps):
        backend = RealBackend(target, drafter, [[256, 10, 11]], np.array([8]), temperatures=t)
        backend.bind(1, np.random.default_rng(0))
        backend.prefill([0], [3], [True])
        confs.append(backend.draw(np.array([0]), np.random.default_rng(0))[0])
    from dsim.acceptance.calibration import apply_temperatures

    np.testing.assert_allclose(confs[1], apply_temperatures(confs[0], temps))
    assert not np.allclose(confs[0], confs[1])


def test_ragged_pass_matches_plain_forward(target):
    """Flattened blocks over per-request caches (a subset of slots, after a rejected tail)
    give the hidden states of running each whole sequence through the target at once."""
    from dsim.models.ragged import RaggedTarget

    seqs = {0: [256, 5, 6, 7, 8, 9], 1: [256, 1, 2, 3], 2: [256, 40, 41, 42, 43, 44, 45, 46]}
    passes = RaggedTarget(target)
    for r in seqs:
        passes.store.open(r, 16)
    first = passes.forward([2, 0, 1], [seqs[2][:5], seqs[0][:3], seqs[1][:2]])
    for r, n in ((2, 5), (0, 3), (1, 2)):
        passes.store.commit(r, n)
    # request 1 (the middle slot) sits out; request 0 gets a tail that is then rejected
    second = passes.forward([0, 2], [[*seqs[0][3:], 99, 98], seqs[2][5:]])
    passes.store.commit(0, 3)
    passes.store.commit(2, 3)
    third = passes.forward([1, 0], [seqs[1][2:], [10]])
    got = {
        0: torch.cat([first[5:8], second[:3], third[2:]]),
        1: torch.cat([first[8:], third[:2]]),
        2: torch.cat([first[:5], second[5:]]),
    }
    seqs[0] = [*seqs[0], 10]
    for r, seq in seqs.items():
        with torch.no_grad():
            full = target.model.model(input_ids=torch.tensor([seq])).last_hidden_state[0]
        torch.testing.assert_close(got[r], full, atol=1e-5, rtol=1e-5)


def test_forked_cache_continues_like_its_source(target):
    """Answers sharing a prompt: a forked cache gives the states its source gives."""
    from dsim.models.ragged import RaggedTarget

    passes = RaggedTarget(target)
    passes.prefill([[256, 5, 6, 7], [256, 8]], 4)
    passes.store.fork(0, 2)
    out = passes.forward([0, 1, 2], [[30, 31], [40], [30, 31]])
    assert passes.store.lengths == {0: 4, 1: 2, 2: 4}
    torch.testing.assert_close(out[:2], out[3:], atol=0, rtol=0)


def test_preempted_requests_recompute_exactly(files, target):
    """A KV budget too small for all requests forces preemption by recompute: the re-prefill
    of prompt + generated tokens continues the same greedy text."""
    prompts, profile = files
    drafter = PerfectDrafter(target, gamma=3)
    run = run_real(
        spec(profile, "fixed:3", kv_tokens=64),
        target,
        drafter,
        prompts,
        max_new_tokens=CAP,
        greedy=True,
        make_backend=drafter.attach,
    )
    assert run.result.summary["preemptions"] > 0
    for r, out in enumerate(run.outputs):
        assert out == greedy_reference(target, run.backend.prompts[r], CAP)


def llama_drafter(target, context: int = 4) -> Drafter:
    """An untrained dsim-drafter/2 (llama block) reading target layers 1 and 2 (the final
    normed state) and the last `context` positions."""
    torch.manual_seed(2)
    config = DrafterConfig.for_target("markov", 3, target.model.config, [1, 2], context=context)
    drafter = Drafter(config, torch.arange(300)).init_from_target(target.model)
    return drafter.attach(target.embedding.weight, target.lm_head_weight).eval()


@pytest.mark.parametrize("policy", ["fixed:3", "dspark"])
def test_llama_drafter_serves_greedy_target_text_with_collects_inputs(files, target, policy):
    """A /2 drafter in real mode, prompts prefilled in chunks of 4: the text is the target's
    greedy text, and at every draw the drafter reads what dsim collect would feed it for the
    same sequence S (anchor S[-1]): the kept layers at the position that predicted the anchor
    and the window of the positions before it (`prompt_history` over S[:-1], which is what
    collect's sliding window holds), so its drafts are the ones collect's loop would draw."""
    prompts, profile = files
    drafter = llama_drafter(target)
    seen = []

    class Recorded(RealBackend):
        def draw(self, idx, rng):
            conf, truth = super().draw(idx, rng)
            for k, r in enumerate(idx.tolist()):
                window = self.window[r]
                seen.append((self.history(r), self.hidden[r], window, self._draft.tokens[k]))
            return conf, truth

    run = run_real(
        spec(profile, policy, prefill_chunk=4),
        target,
        drafter,
        prompts,
        max_new_tokens=CAP,
        greedy=True,
        make_backend=Recorded,
    )
    for r, out in enumerate(run.outputs):
        assert out == greedy_reference(target, run.backend.prompts[r], CAP)
    assert len(seen) > 10
    from dsim.models.drafters import prompt_history

    for seq, hidden, window, drafts in seen:
        with torch.no_grad():
            out = target.model.model(input_ids=torch.tensor([seq[:-1]]), output_hidden_states=True)
        feats = torch.cat([out.hidden_states[1], out.hidden_states[2]], -1)
        expected = prompt_history(feats, [seq[:-1]], 4)
        torch.testing.assert_close(hidden, feats[0, -1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(window.features, expected.features, atol=1e-4, rtol=1e-4)
        assert torch.equal(window.tokens, expected.tokens)
        assert torch.equal(window.valid, expected.valid)
        again = drafter.draft(feats[:, -1], torch.tensor([seq[-1]]), None, True, expected)
        assert torch.equal(again.tokens[0], drafts)


def test_prefill_runs_chunk_by_chunk_as_scheduled(files, target):
    """Each step's prefill work is run in that step: the tokens the backend prefills equal the
    step log's prefill tokens, step by step, and a request's cache grows by its chunk."""
    prompts, profile = files
    chunks: list[int] = []

    class Recorded(RealBackend):
        def prefill(self, idx, tokens, done):
            before = {r: self.passes.store.lengths.get(r, 0) for r in idx}
            stop = super().prefill(idx, tokens, done)
            for r, n in zip(idx, tokens, strict=True):
                assert self.passes.store.lengths[r] == before[r] + n
            chunks.append(sum(tokens))
            return stop

    run = run_real(
        spec(profile, "dspark", prefill_chunk=5),
        target,
        untrained_drafter(target),
        prompts,
        max_new_tokens=CAP,
        make_backend=Recorded,
    )
    steps = run.result.steps
    logged = steps.prefill_tokens[steps.prefill_tokens > 0].tolist()
    assert chunks == logged and max(chunks) <= 5
    assert sum(chunks) == int(run.result.requests["prompt_tokens"].sum())
    assert len(chunks) > len(run.outputs)  # prompts of ~17 tokens take several steps each


def test_an_accepted_end_of_sequence_draft_counts_as_accepted(files):
    """A perfect drafter (it samples from the target's own distribution, so rejection sampling
    keeps its drafts) on a target that ends often: an end-of-sequence token is itself an
    accepted draft. The backend counts the drafts up to and including it as accepted, one more
    than the `emitted - 1` the engine used to rebuild, and the requests table carries that."""
    prompts, profile = files
    target = ends_often(tiny_target())
    drafter = PerfectDrafter(target, gamma=3)
    rounds = []

    def make_backend(*args, **kwargs) -> RealBackend:
        backend = drafter.attach(*args, **kwargs)
        verify = backend.verify

        def recorded(idx, lengths, truth):
            rounds.append(verify(idx, lengths, truth))
            return rounds[-1]

        backend.verify = recorded
        return backend

    run = run_real(
        spec(profile, "fixed:3"), target, drafter, prompts, max_new_tokens=CAP,
        make_backend=make_backend,
    )  # fmt: skip
    emitted = np.concatenate([e for e, _, _ in rounds])
    accepted = np.concatenate([a for _, a, _ in rounds])
    stop = np.concatenate([s for _, _, s in rounds])
    eos_drafted = stop & (accepted == emitted)  # the last emitted token was a draft: the EOS
    assert eos_drafted.any()
    assert (accepted[~eos_drafted] == emitted[~eos_drafted] - 1).all()
    req = run.result.requests
    assert req["accepted_drafts"].sum() == accepted.sum() == (emitted - 1).sum() + eos_drafted.sum()

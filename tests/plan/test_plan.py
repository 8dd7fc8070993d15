"""`dsim plan`: the closed form its bisection must find (docs/plan.md, A closed form), its
load grid, its launch commands, resuming from its cache, and bad input's contract."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_cli
from hypothesis import given
from hypothesis import strategies as st

from dsim.plan import answer, grid, launch, space
from dsim.plan.search import Curve
from dsim.plan.targets import Target
from dsim.plan.tiers import parse_tier
from dsim.run_spec import RunSpec

LINEAR_B = [1, 8, 64, 512, 4096]


def linear_profile(folder: Path, a_ms: float, b_ms: float) -> Path:
    """latency = a + b x batch tokens, at every context; one GPU a replica."""
    path = folder / "linear.csv"
    latency = [a_ms + b_ms * b for b in LINEAR_B]
    pd.DataFrame({"batch_tokens": LINEAR_B, "context_len": 0, "latency_ms": latency}).to_csv(
        path, index=False
    )
    path.with_suffix(".json").write_text(json.dumps({"parallel": {"gpus": 1, "tp": 1}}))
    return path


def closed_plan(monkeypatch, capsys, tmp_path, a_ms, b_ms, speed, max_seqs, requests):
    """A plan of one replica, `ar`, closed loop, tier tps_p50 >= speed: (max C found, grid)."""
    profile = linear_profile(tmp_path, a_ms, b_ms)
    out = tmp_path / "plan"
    code, _, err = run_cli(
        monkeypatch, capsys, "plan", "--out", str(out), "--budget", "1",
        "--profile", str(profile), "--policies", "ar", "--max-num-seqs", str(max_seqs),
        "--closed-loop", "--trace", "synthetic:prompt=1,output=200,sigma=0",
        "--tier", f"speed:tps_p50={speed}", "--seeds", "1", "--requests", str(requests),
        "--jobs", "1", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    row = pd.read_csv(out / "plan.csv").iloc[0]
    return row, grid.loads(float(max_seqs), True)


@pytest.mark.parametrize(
    ("a_ms", "b_ms", "speed", "max_seqs", "requests"),
    [(10.0, 0.5, 37.0, 64, 200), (2.0, 0.05, 50.0, 512, 1100)],
    ids=["steps-of-one", "steps-of-5%"],
)
def test_bisection_finds_the_closed_form(
    monkeypatch, capsys, tmp_path, a_ms, b_ms, speed, max_seqs, requests
):
    """One replica, step latency a + b B, `ar` at concurrency C: every request decodes at
    1 / (a + b C), so tps_p50 >= S holds exactly for C <= (1/S - a) / b; the plan's answer
    is the highest grid load at or below it, within one step of it."""
    row, loads = closed_plan(monkeypatch, capsys, tmp_path, a_ms, b_ms, speed, max_seqs, requests)
    exact = (1e3 / speed - a_ms) / b_ms
    below = max(v for v in loads if v <= exact)
    assert row["met"] and row["max_load"] == below
    assert exact - row["max_load"] <= row["step"] * row["max_load"]
    assert row["max_load"] * (1 + grid.STEP) >= exact or loads[loads.index(below) + 1] == below + 1


@given(top=st.floats(1.0, 1e6), step=st.floats(0.001, grid.STEP))
def test_the_open_loop_grid_steps_at_most_5_percent(top, step):
    loads = grid.loads(top, False, step)
    assert loads[-1] == pytest.approx(top) and loads[0] <= top / grid.SPAN * (1 + step)
    assert all(b / a <= 1 + step + 1e-12 for a, b in zip(loads, loads[1:], strict=False))


@given(top=st.integers(1, 5000))
def test_the_closed_loop_grid_is_integers_5_percent_or_one_apart(top):
    loads = grid.loads(float(top), True)
    assert loads[0] == 1 and loads[-1] == top
    gaps = zip(loads, loads[1:], strict=False)
    assert all(b - a == 1 or b / a <= 1 + grid.STEP for a, b in gaps)


def _config(engine: str, policy: str, k: int, disagg: str | None = None) -> space.Config:
    target = Target("x.csv", "qwen3-8b", "h200", engine, 2, 2)
    return space.Config(target, space.Layout(disagg=disagg), policy, k, 128)


def test_launch_commands_name_the_engine_s_speculative_settings():
    vllm = launch.launch(_config("vllm", "fixed:3", 3), "preset:eagle3:chat", "/w/eagle3")
    assert vllm.commands == (
        "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-num-seqs 128 "
        '--speculative-config \'{"method": "eagle3", "model": "/w/eagle3", '
        '"num_speculative_tokens": 3}\'',
    )
    sglang = launch.launch(_config("sglang", "fixed:4", 4, "1:3"), "preset:eagle3:chat", None)
    assert len(sglang.commands) == 2 and "--disaggregation-mode decode" in sglang.commands[1]
    assert "--speculative-algorithm EAGLE3" in sglang.commands[0]
    assert "--speculative-num-steps 4" in sglang.commands[0]
    assert "--speculative-num-draft-tokens 5" in sglang.commands[0]
    assert any("1 prefill and 3 decode" in n for n in sglang.notes)
    assert launch.launch(_config("vllm", "dspark", 5), "preset:eagle3:chat", None) is None
    adaptive = launch.launch(_config("vllm", "vllm-adaptive", 7), "preset:eagle3:chat", "/w/e")
    assert (
        '"num_speculative_tokens": 7, "enable_adaptive_verification": true}'
        in (adaptive.commands[0])
    )
    assert launch.launch(_config("sglang", "vllm-adaptive", 7), "preset:eagle3:chat", None) is None
    assert launch.launch(_config("trtllm", "fixed:3", 3), "preset:eagle3:chat", None) is None


def test_mtp1_launches_the_model_s_own_head_only_without_another_drafter():
    """`mtp1` is one draft a round: the model's MTP head when no drafter (or `mtp`) is named,
    the named EAGLE-3 drafter at one token otherwise (Llama has no MTP head to launch)."""
    own = launch.launch(_config("vllm", "mtp1", 1), "iid:0.7", None).commands[0]
    assert '{"method": "mtp", "num_speculative_tokens": 1}' in own
    eagle = launch.launch(_config("vllm", "mtp1", 1), "preset:eagle3:chat", "/w/e3")
    assert (
        '{"method": "eagle3", "model": "/w/e3", "num_speculative_tokens": 1}' in (eagle.commands[0])
    )
    sglang = launch.launch(_config("sglang", "mtp1", 1), "preset:eagle3:chat", None)
    assert "--speculative-algorithm EAGLE3" in sglang.commands[0]
    assert any("--draft-model-path" in n for n in sglang.notes)


def test_the_launch_names_the_drafter_its_profile_was_priced_for():
    """A configuration whose drafter profile is an EAGLE-1 estimate launches EAGLE-1, whatever
    drafter the acceptance preset is named for."""
    c = _config("vllm", "fixed:3", 3)
    eagle = str(ROOT / "profiles/h200-qwen3-8b-eagle-roofline.csv")
    c = replace(c, target=replace(c.target, draft_cost=eagle))
    got = launch.launch(c, "preset:dspark:chat", "/w/eagle").commands[0]
    assert '"method": "eagle"' in got and "draft_model" not in got


def test_policy_runs_cross_k_once_per_policy():
    runs = space.policy_runs(("ar", "fixed", "dspark", "fixed:2"), (3, 5))
    assert runs == (("ar", 1), ("fixed:3", 3), ("fixed:5", 5), ("dspark", 3), ("dspark", 5),
                    ("fixed:2", 2))  # fmt: skip


SMALL = ("--trace", "synthetic:prompt=256,output=64", "--requests", "40", "--seeds", "1",
         "--jobs", "1", "--no-progress", "--policies", "fixed", "--gamma", "3")  # fmt: skip


def test_a_rerun_reads_every_point_from_the_cache(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p"
    args = ("plan", "--out", str(out), "--budget", "2", "--model", "qwen3-8b",
            "--replicas", "1,2", "--tier", "t:ttft_p99_s=5", "--rate", "30", *SMALL)  # fmt: skip
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    first = {p.name for p in (out / "points").iterdir()}
    table = (out / "plan.csv").read_bytes()
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    assert {p.name for p in (out / "points").iterdir()} == first
    assert (out / "plan.csv").read_bytes() == table
    fresh = tmp_path / "q"  # the same plan from nothing: the same answers, bit for bit
    assert run_cli(monkeypatch, capsys, *args[:2], str(fresh), *args[3:])[0] == 0
    assert (fresh / "plan.csv").read_bytes() == table
    report = (out / "report.md").read_text()
    assert "vllm serve Qwen/Qwen3-8B" in report and "GPUs for target" in report
    plan = pd.read_csv(out / "plan.csv")
    assert plan["met"].all() and not plan["at_bracket_top"].any()
    assert (plan["gpus_for_target"] == plan["copies_for_target"] * plan["gpus"]).all()


def test_a_tier_no_configuration_meets_names_the_closest(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "plan", "--out", str(out), "--budget", "1", "--model", "qwen3-8b",
        "--tier", "impossible:tps_p50=100000", *SMALL,
    )  # fmt: skip
    assert code == 0 and "tier impossible: no configuration meets it" in err
    assert "1 configuration -> " in stdout, stdout  # one searched: singular
    report = (out / "report.md").read_text()
    assert "**Not met: no configuration meets it.** Closest:" in report
    assert "tps_p50 < 100000" in report


def test_each_tp_gets_its_own_drafter_estimate(monkeypatch, capsys, tmp_path):
    """--draft-model builds a drafter estimate beside each target's: two TP degrees, two
    drafter profiles (priced beside tp1 and tp2), and every point runs its own target's."""
    out = tmp_path / "p"
    code, _, err = run_cli(monkeypatch, capsys, "plan", "--out", str(out), "--budget", "2",
                           "--model", "qwen3-8b", "--tp", "1,2", "--draft-model", "eagle3",
                           "--tier", "t:ttft_p99_s=5", *SMALL)  # fmt: skip
    assert code == 0, err
    drafters = {tp: out / "profiles" / f"h200-qwen3-8b-tp{tp}-vllm-eagle3-roofline.csv"
                for tp in (1, 2)}  # fmt: skip
    for tp, path in drafters.items():
        meta = json.loads(path.with_suffix(".json").read_text())
        assert meta["parallel"]["tp"] == tp and meta["draft_model"] == "eagle3"
    plan = pd.read_csv(out / "plan.csv")
    assert dict(zip(plan["tp"], plan["draft_cost"], strict=True)) == {
        tp: path.name for tp, path in drafters.items()
    }
    assert set(plan["drafter_kind"]) == {"ar"}
    runs = set()
    for summary in (out / "points").glob("*/summary.json"):
        spec = json.loads(summary.read_text())["spec"]
        runs.add((spec["profile"], spec["draft_cost"], spec["drafter_kind"]))
    assert runs == {
        (str(out / "profiles" / f"h200-qwen3-8b-tp{tp}-vllm-roofline.csv"), str(path), "ar")
        for tp, path in drafters.items()
    }


EAGLE3 = str(ROOT / "profiles/h200-qwen3-8b-eagle3-roofline.csv")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--model", "qwen3-8b", "--tp", "1,2", "--draft-cost", EAGLE3),
         "is qwen3-8b on h200 tp2 (h200-qwen3-8b-tp2-vllm-roofline.json): they differ in tp; "
         "give --draft-model"),
        (("--profile", "profiles/h200x8-deepseek-v3-fp8-roofline.csv", "--draft-cost", EAGLE3),
         "(h200-qwen3-8b-eagle3-roofline.json), but profile profiles/h200x8-deepseek-v3-fp8-"
         "roofline.csv is deepseek-v3 on h200 tp8"),
        (("--model", "qwen3-8b", "--draft-model", "eagle3", "--draft-cost", "0"), "not both"),
        (("--profile", "profiles/h200-qwen3-8b-roofline.csv", "--draft-model", "eagle3"),
         "with --profile give --draft-cost"),
        (("--model", "qwen3-8b", "--draft-model", "eagle9"), "--draft-model: unknown 'eagle9'"),
    ],
    ids=["other-tp", "other-model", "both", "profile", "unknown"],
)  # fmt: skip
def test_a_drafter_priced_for_another_target_is_refused(monkeypatch, capsys, tmp_path, args, says):
    out = tmp_path / "p"
    code, _, err = run_cli(monkeypatch, capsys, "plan", "--out", str(out), "--budget", "8",
                           "--tier", "t:ttft_p99_s=5", *args, "--no-progress")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and says in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--model", "qwen3-8b", "--tp", "2", "--budget", "1"), "no configuration fits a budget"),
        (("--model", "deepseek-v3", "--tp", "1", "--budget", "8"), "weights need"),
        (("--model", "qwen3-8b", "--budget", "1", "--requests", "5000000"), "pass --yes"),
        (("--model", "qwen3-8b", "--budget", "1", "--tier", "x:tps_p7=1"), "unknown percentile"),
        (("--model", "qwen3-8b", "--budget", "1", "--step", "0.1"), "--step must be"),
        (("--model", "qwen3-8b", "--budget", "1", "--disagg", "1:x"), "expected P:D"),
    ],
    ids=["budget", "weights", "size-gate", "tier", "step", "disagg"],
)
def test_bad_input_is_one_line_and_nothing_written(monkeypatch, capsys, tmp_path, args, says):
    out = tmp_path / "p"
    code, _, err = run_cli(monkeypatch, capsys, "plan", "--out", str(out),
                           "--tier", "t:ttft_p99_s=5", *args, "--no-progress")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and says in err, err
    assert not out.exists()


BASE = ("--model", "qwen3-8b", "--budget", "2", "--requests", "40", "--seeds", "1",
        "--gamma", "3", "--trace", "synthetic:prompt=200,output=100,sigma=0",
        "--tier", "x:ttft_p99_s=1", "--no-progress")  # fmt: skip


def refused_plan(monkeypatch, capsys, tmp_path, *args: str) -> str:
    """`dsim plan BASE ARGS`: bad input's contract (exit 2, one line, no traceback, no OUT
    folder); returns the line."""
    out = tmp_path / "p"
    code, _, err = run_cli(monkeypatch, capsys, "plan", "--out", str(out), *BASE, *args)
    assert code == 2 and err.startswith("dsim: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and not out.exists()
    return err


@pytest.mark.parametrize(
    "args",
    [("--policies", ""), ("--policies", ","), ("--engine", ""), ("--gpu", ""), ("--tp", ","),
     ("--replicas", " "), ("--gamma", ""), ("--max-num-seqs", ","), ("--disagg", ","),
     ("--max-num-batched-tokens", ",")],
    ids=lambda a: f"{a[0]}={a[1]!r}",
)  # fmt: skip
def test_a_list_option_that_lists_nothing_is_one_line(monkeypatch, capsys, tmp_path, args):
    """Every list option: blank is one line naming it (was a traceback for --policies and
    --engine); --disagg and --max-num-batched-tokens are left out by not giving them."""
    err = refused_plan(monkeypatch, capsys, tmp_path, *args)
    assert f"{args[0]} {args[1]!r} lists nothing; give at least one value" in err


PROFILE = "profiles/h200-qwen3-8b-roofline.csv"
TWICE = [
    (("--tp", "1,1"), "--tp: 1"), (("--engine", "vllm,vllm"), "--engine: vllm"),
    (("--gpu", "h200,H200"), "--gpu: h200"),
    (("--max-num-seqs", "256,256"), "--max-num-seqs: 256"),
    (("--replicas", "1,1"), "--replicas: 1"), (("--disagg", "1:1, 1 : 1"), "--disagg: 1:1"),
    (("--gamma", "3,3"), "--gamma: 3"), (("--policies", "fixed,fixed"), "--policies: fixed"),
    (("--policies", "fixed,fixed:3"), "--policies: fixed:3 at K 3"),
    (("--max-num-batched-tokens", "8192,8192"), "--max-num-batched-tokens: 8192"),
    (("--profile", PROFILE, "--profile", PROFILE), f"--profile: {ROOT / PROFILE}"),
    (("--profile", PROFILE, "--profile", f"./{PROFILE}"), f"--profile: {ROOT / PROFILE}"),
    (("--tier", "x:"), "--tier: x"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), TWICE, ids=[" ".join(a) for a, _ in TWICE])
def test_a_value_given_twice_is_one_line(monkeypatch, capsys, tmp_path, args, says):
    """Every list option: a repeated value would search the same configurations twice (same
    plan.csv rows), so it is refused naming the option and the value (a profile by the file it
    names, however it is spelled)."""
    err = refused_plan(monkeypatch, capsys, tmp_path, *args)
    assert f"{says} given twice; give each once" in err


def test_a_bound_given_twice_in_a_tier_is_the_sla_s_one_line(monkeypatch, capsys, tmp_path):
    """Not the later bound kept: the SLA reader's rule, as `dsim run --sla` twice."""
    tier = "y:ttft_p99_s=1,ttft_p99_s=5"
    err = refused_plan(monkeypatch, capsys, tmp_path, "--tier", tier)
    assert f"--tier {tier!r}: SLA ttft_p99_s given twice" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--trace", "synthetic:n=40,prompt=200"),
         "sets n=, which --requests sets: drop n= and give --requests 40"),
        (("--closed-loop", "--trace", "synthetic:concurrency=4,prompt=200"),
         "sets concurrency=, the clients --closed-loop searches as the load"),
    ],
    ids=["n", "concurrency"],
)  # fmt: skip
def test_a_trace_key_the_plan_sets_names_the_plan_option(monkeypatch, capsys, tmp_path, args, says):
    err = refused_plan(monkeypatch, capsys, tmp_path, *args)
    assert says in err and "benchmark options" not in err


def test_the_budget_leaves_out_what_it_cannot_hold(monkeypatch, capsys, tmp_path):
    out = tmp_path / "p"
    code, _, err = run_cli(monkeypatch, capsys, "plan", "--out", str(out), "--budget", "1",
                           "--model", "qwen3-8b", "--replicas", "1,2", "--tier", "t:",
                           *SMALL)  # fmt: skip
    assert code == 0 and "1 configuration above the budget of 1 GPU left out" in err
    assert set(pd.read_csv(out / "plan.csv")["gpus"]) == {1}
    assert math.isfinite(pd.read_csv(out / "plan.csv")["rate_per_gpu"].iloc[0])


def test_the_readme_example_passes_every_check(monkeypatch, capsys, tmp_path):
    """The README's command, read as benchmarks/readme_plan.py reads it (which runs it whole),
    passes every input check and searches what the README says: 32 configurations, 2 tiers."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from readme_plan import example

    from dsim.plan import commands

    seen = {}

    def searched(plan, out, *args):
        seen["plan"] = plan
        return pd.DataFrame({"tier": [], "met": []})

    monkeypatch.setattr(commands, "run_plan", searched)
    words = example()
    words[words.index("--out") + 1] = str(tmp_path / "p")
    code, _, err = run_cli(monkeypatch, capsys, *words[1:], "--no-progress")
    assert code == 0, err
    plan = seen["plan"]
    assert len(plan.configs) == 32 and [t.name for t in plan.options.tiers] == [
        "interactive",
        "batch",
    ]
    assert not (tmp_path / "p").exists()  # checks write nothing


def test_the_step_token_budget_is_an_axis_the_commands_carry():
    target = Target("x.csv", "qwen3-8b", "h200", "vllm", 1, 1)
    found = space.configs([target], (space.Layout(),), (("fixed:3", 3),), (64,), (None, 4096), 8)
    assert [c.token_budget for c in found] == [None, 4096]
    assert found[1].spec(RunSpec()).max_num_batched_tokens == 4096
    assert found[0].spec(RunSpec()).max_num_batched_tokens is None
    vllm = launch.launch(found[1], "preset:eagle3:chat", "/w").commands[0]
    assert "--max-num-batched-tokens 4096" in vllm
    sglang = launch.launch(replace(found[1], target=replace(target, engine="sglang")),
                           "preset:eagle3:chat", "/w").commands[0]  # fmt: skip
    assert "--chunked-prefill-size 4096" in sglang


def test_long_prompts_bracket_what_the_configuration_serves(monkeypatch, capsys, tmp_path):
    """Prefill-bound traffic (2,048-token prompts, 4 output tokens) on the shipped estimate:
    the grid's top must bound what one replica serves and its floor (top / 32) lie below it, so
    a loose TTFT tier is met inside the grid. Pricing the bound's prefill at context 0 (below
    every prefill row of a profile) made it ~800x too loose: every grid load overloaded."""
    out = tmp_path / "p"
    code, _, err = run_cli(
        monkeypatch, capsys, "plan", "--out", str(out), "--budget", "1",
        "--profile", str(ROOT / "profiles/h200-qwen3-8b-roofline.csv"), "--policies", "ar",
        "--trace", "synthetic:rate=4,duration=600,prompt=2048,output=4,sigma=0",
        "--tier", "loose:ttft_p99_s=30", "--seeds", "1", "--requests", "300", "--jobs", "1",
        "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    row = pd.read_csv(out / "plan.csv").iloc[0]
    assert row["met"] and not row["at_bracket_top"], row.to_dict()


def test_a_rate_beyond_the_budget_names_the_fewest_gpus_that_serve_it(
    monkeypatch, capsys, tmp_path
):
    """Met, but not within the budget: the report names the configuration needing the fewest
    GPUs for the rate and how many, not a miss at its lowest load."""
    out = tmp_path / "p"
    code, _, err = run_cli(
        monkeypatch, capsys, "plan", "--out", str(out), "--budget", "1", "--model", "qwen3-8b",
        "--rate", "100000", "--tier", "loose:ttft_p99_s=100", *SMALL,
    )  # fmt: skip
    assert code == 0, err
    plan = pd.read_csv(out / "plan.csv")
    report = (out / "report.md").read_text()
    fewest = plan.iloc[0]
    assert plan["met"].all() and not plan["within_budget"].any()
    said = "tier loose: no configuration meets it for 100000 req/s within 1 GPU"
    assert said in err, err  # on stderr, as a tier none meets (docs/plan.md, Bad input)
    assert "for 100000 req/s within 1 GPU.** Fewest: `" in report
    assert f"takes {fewest['copies_for_target']} copies, {fewest['gpus_for_target']} GPUs" in report


def test_a_tier_s_usage_is_its_tightest_bound_and_shortfall_its_miss():
    """Ceiling bounds read value / limit, floors limit / value; the tightest is the usage,
    the shortfall the same floored at 1; stability alone uses nothing; unstable is inf."""
    tier = parse_tier("chat:tpot_p99_s=0.05,tps_p50=100")
    inside = {"unstable": False, "tpot_p99_s": 0.04, "tps_p50": 125.0}
    assert tier.usage(inside) == pytest.approx(0.8) and tier.shortfall(inside) == 1.0
    over = {"unstable": False, "tpot_p99_s": 0.06, "tps_p50": 125.0}
    assert tier.usage(over) == pytest.approx(1.2) == tier.shortfall(over)
    assert tier.usage({**inside, "unstable": True}) == math.inf
    assert parse_tier("any:").usage(inside) == 0.0


def test_equal_loads_rank_the_most_room_inside_the_tier_first():
    """The grid's load steps make ties; among configurations that reach the same load the one
    whose tightest bound is least used there ranks first and is the winner, whatever the
    order asked."""
    tier = parse_tier("chat:tpot_p99_s=0.05")
    target = Target("p.csv", "m", "h200", "vllm", 1, 1)
    curves = [
        Curve(space.Config(target, space.Layout(), policy, k, 256), (1.0, 2.0))
        for policy, k in (("mtp1", 1), ("fixed:3", 3))
    ]
    for curve, tpot in zip(curves, (0.049, 0.040), strict=True):
        curve.runs[1] = [{"unstable": False, "tpot_p99_s": tpot, "throughput_tok_s": 10.0}]
    ranked = answer.table([answer.answer(c, tier, 1, False) for c in curves], None, 8)
    assert list(ranked["policy"]) == ["fixed:3", "mtp1"]
    assert ranked["bound_usage"].tolist() == pytest.approx([0.8, 0.98])
    assert answer.winner(ranked, None)["policy"] == "fixed:3"

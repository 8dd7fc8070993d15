"""`dsim validate` end to end on the tiny target: real run, trace and preset simulations."""

from __future__ import annotations

import json

import pytest
import torch
from test_real import untrained_drafter

from dsim.acceptance.trace import write_acceptance_trace
from dsim.hardware.latency import read_profile
from dsim.models.checkpoint import save_drafter
from dsim.models.collect import collect
from dsim.models.data import read_prompt_file
from dsim.models.target import tiny_target
from dsim.real.validate import METRICS, Settings, validate


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_validate_writes_errors_per_policy_and_model(tmp_path):
    target = tiny_target()
    drafter = untrained_drafter(target)
    ckpt = tmp_path / "drafter.pt"
    save_drafter(ckpt, drafter, target.fingerprint, {})
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "domain": "chat", "prompt": f"question {i}?"} for i in range(2)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    df, _ = collect(target, drafter, read_prompt_file(prompts), 12, 2, seed=0)
    trace = tmp_path / "trace.parquet"
    meta = {"target": target.fingerprint, "drafter": "x", "dataset": "x", "temperature": 1.0}
    write_acceptance_trace(df, trace, {**meta, "command": "test"})
    settings = Settings(
        ckpt,
        trace,
        prompts,
        None,  # profiled here, on this machine, before the real runs
        policies=("mtp1", "dspark"),
        requests=3,
        rate=50.0,
        max_new_tokens=8,
        target="tiny",
        profile_contexts=(16, 32),
    )
    out = tmp_path / "validation"
    results = validate(settings, out, log=lambda _: None)
    saved = json.loads((out / "validation.json").read_text())
    assert set(saved) == {"mtp1", "dspark"} and saved == json.loads(json.dumps(results))
    for policy in saved.values():
        assert set(policy) == {"trace", "preset"}
        for metrics in policy.values():
            assert set(metrics) == set(METRICS)
            for v in metrics.values():
                assert v["error"] == pytest.approx((v["sim"] - v["real"]) / v["real"])
    assert (out / "drafter-profile.csv").is_file()
    profile = read_profile(out / "profile.csv")
    assert set(profile["phase"]) == {"verify", "prefill"} and profile["num_seqs"].max() == 16
    assert json.loads((out / "runs" / "dspark-trace" / "summary.json").read_text())["spec"][
        "profile"
    ] == str(out / "profile.csv")
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    assert set(diagnostics["dspark"]) == {"real_run", "step_model"}
    assert diagnostics["mtp1"]["step_model"]["decode_steps"] > 0
    assert (out / "runs" / "dspark-real" / "texts.jsonl").is_file()

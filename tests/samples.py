"""Small inputs the tests of several packages build: an acceptance trace's rows, a vLLM
`/metrics` scrape's text, a tiny pareto sweep, an untrained drafter on the tiny target, a tiny
Qwen3 config. On pytest's path (`pythonpath` in pyproject.toml), as conftest is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from conftest import ROOT

# -- an acceptance trace ----------------------------------------------------------------------
GAMMA = 3
ROUNDS = 5
META = {"target": "t", "drafter": "d", "dataset": "unit", "temperature": 0.0, "command": "pytest"}


def make_df(n_seq: int = 4, rounds: int = ROUNDS, gamma: int = GAMMA) -> pd.DataFrame:
    """conf_1 encodes (sequence, round) so replayed rows can be identified; seq_ids are sparse."""
    seq = np.repeat(np.arange(n_seq), rounds)
    rnd = np.tile(np.arange(rounds), n_seq)
    df = pd.DataFrame(
        {
            "seq_id": seq * 10 + 7,
            "round": rnd,
            "domain": np.where(seq % 2 == 0, "chat", "code"),
            "gamma": gamma,
        }
    )
    for k in range(1, gamma + 1):
        df[f"conf_{k}"] = (seq * rounds + rnd + 1) / 1000.0 + (k - 1) * 0.1
    df["accepted"] = (seq + rnd) % (gamma + 1)
    return df


# -- a vLLM scrape -------------------------------------------------------------------------------
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# engine -> (drafts, draft tokens, per-position accepted counts); 10,000 drafts in all
ENGINES = {"0": (6000, 18000, (4378, 3125, 2127)), "1": (4000, 12000, (2918, 2083, 1418))}


def exposition(
    engines: dict = ENGINES, model: str = MODEL, suffix: str = "_total", created: bool = True
) -> str:
    """A scrape as prometheus_client writes vLLM's counters, among other vLLM metrics."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 3.0',
    ]

    def counter(name: str, doc: str, values: list[tuple[str, float]]) -> None:
        full = f"vllm:spec_decode_{name}{suffix}"
        lines.extend([f"# HELP {full} {doc}", f"# TYPE {full} counter"])
        lines.extend(f"{full}{{{labels}}} {value}" for labels, value in values)
        if created:
            lines.append(f"# HELP vllm:spec_decode_{name}_created {doc}")
            lines.append(f"# TYPE vllm:spec_decode_{name}_created gauge")
            lines.extend(
                f"vllm:spec_decode_{name}_created{{{labels}}} 1.7e+09" for labels, _ in values
            )

    def labels(engine: str) -> str:
        escaped = model.replace("\\", "\\\\").replace('"', '\\"')
        return f'engine="{engine}",model_name="{escaped}"'

    counter(
        "num_drafts",
        "Number of spec decoding drafts.",
        [(labels(e), float(d)) for e, (d, _, _) in engines.items()],
    )
    counter(
        "num_draft_tokens",
        "Number of draft tokens.",
        [(labels(e), float(t)) for e, (_, t, _) in engines.items()],
    )
    counter(
        "num_accepted_tokens",
        "Number of accepted tokens.",
        [(labels(e), float(sum(p))) for e, (_, _, p) in engines.items()],
    )
    counter(
        "num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        [
            (f'{labels(e)},position="{k}"', float(c))
            for e, (_, _, p) in engines.items()
            for k, c in enumerate(p)
        ],
    )
    lines += [
        "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="+Inf",model_name="{model}"}} 9',
    ]
    return "\n".join(lines) + "\n"


def scrape(tmp_path: Path, text: str, name: str = "metrics.prom") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- a pareto sweep ------------------------------------------------------------------------------
SWEEP_PROFILE = str(ROOT / "profiles/h200-qwen3-8b-roofline.csv")
TINY = f"""
policies = ["mtp1", "dspark"]
[run]
trace = "synthetic:rate=4,duration=8,prompt=200,output=48"
profile = "{SWEEP_PROFILE}"
gamma = 4
[load]
rate_scale = [1, 3]
[sla]
anchors = [100, 1000]
"""


# -- an untrained drafter ------------------------------------------------------------------------
def untrained_drafter(target, kind: str = "markov", gamma: int = 4):
    """An untrained drafter of `kind` on the tiny target (torch: imported here, as only the
    real-model tests call it)."""
    import torch

    from dsim.models.drafters import Drafter, DrafterConfig

    torch.manual_seed(1)
    config = DrafterConfig.default(kind, gamma, target.hidden_size, width=32)
    drafter = Drafter(config, torch.arange(300))
    return drafter.attach(target.embedding.weight, target.lm_head_weight).eval()


# -- a tiny Qwen3 config (the GPU profile's and the engine probes' CPU tests) -----------------
TINY_QWEN3 = dict(
    model_type="qwen3", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, intermediate_size=48, vocab_size=50, rope_theta=1e4,
)  # fmt: skip

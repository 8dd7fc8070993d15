"""dsim against Vidur on the whole Azure conversation trace, side by side in one run.

Each timed figure is one end-to-end command in a fresh process, imports included: Vidur's
simulator (`vidur` from the package registry, in its own venv) and `dsim run --policy ar`
(plain decoding, which is what Vidur simulates). A round runs Vidur, then dsim like for like,
then dsim on the issue's profile; the first round is discarded (Vidur trains its operator
models into its cache then, dsim loads its compiled kernels), so the rounds reported are warm.

Like for like (`dsim-llama2`): Meta Llama-2-7B on one H100 (TP 1) on both sides: Vidur's own
H100 Llama-2-7B operator table (`mlp.csv`, shipped here in dsim/hardware/data/gpu/vidur/),
dsim's calibrated H100 estimate of the same architecture with GPU work only (`--engine
gpu-only`: Vidur prices GPU kernels only, no engine step overhead). Both schedule as
Sarathi/chunked vLLM: a 2,048-token step budget that decode tokens take first and prefill
chunks fill, at most 128 requests a batch, the same KV cache (dsim's estimate's capacity, in
16-token blocks). Both replay the same requests: the trace's 19,366 arrivals with their
prompts cut so that prompt + output <= 4,096 tokens (Llama-2-7B's context), the rule Vidur's
trace-replay generator applies itself (1,612 prompts cut). `dsim-h200`: dsim on the profile
the performance targets are set on (the 2023-engine H200 Qwen3-8B estimate), the uncut trace,
its default limits; Vidur has neither that GPU nor that model.

What Vidur needs offline, done here and nowhere else:
- its profile tables are fetched from a model hub at start-up: the predictor's input files are
  pointed at local ones instead and its hub look-up of precomputed predictions is skipped;
- the attention table is SYNTHETIC (no measured attention-kernel times are available here):
  per layer, decode reads batch x context KV bytes at 80% of the H100's 3.35 TB/s, prefill
  adds its score/value flops at 60% of 989 TFLOP/s, plus a 5 us kernel; the table's values
  change Vidur's step times a little, not the work a step costs it;
- its random forests are trained on a one-point grid (250 trees, depth 16, 2 folds) instead
  of its 27-point, 10-fold default, so the discarded cold run takes ~a minute, not an hour on
  2 cores; warm runs load them from the cache, as Vidur does;
- wandb off (no project, WANDB_MODE=disabled), plots and the Chrome trace off; its metrics
  (request and batch tables) are written, as dsim writes its requests table and summary.
Vidur 0.0.26 imports torch only in its GPU profiling scripts, so torch is not installed.

Setup (once): .venv/bin/python benchmarks/vs_vidur.py --setup  (a venv in benchmarks/.vidur-venv
with `pip install vidur==0.0.26`; the cache and inputs go to benchmarks/.vidur-cache).
Run: .venv/bin/python benchmarks/vs_vidur.py [--rounds 2]. Target: dsim >= 10x faster warm.
`--inputs` only writes the cut trace and dsim's Llama-2-7B profile to the cache (no Vidur
needed), for timing dsim's side alone (benchmarks/bench_sim.py's docstring).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
VENV = HERE / "benchmarks/.vidur-venv"
CACHE = HERE / "benchmarks/.vidur-cache"
VIDUR = "vidur==0.0.26"
TRACE = HERE / "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
PROFILE_2023 = HERE / "profiles/h200-qwen3-8b-vllm2023-roofline.csv"
MLP = HERE / "dsim/hardware/data/gpu/vidur/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv.gz"
MAX_TOKENS, BUDGET, BATCH_CAP, BLOCK = 4096, 2048, 128, 16


def attention_rows() -> list[dict]:
    """The synthetic attention table, in Vidur's profiler's columns (times in ms per layer)."""
    bw, flops, kernel = 0.8 * 3.35e12, 0.6 * 989e12, 5e-6
    kv_bytes = 2 * 32 * 128 * 2  # K and V, 32 heads of 128, bf16: bytes per token and layer
    base = dict(n_embd=4096, n_q_head=32, n_kv_head=32, block_size=BLOCK)
    base |= dict(num_tensor_parallel_workers=1, max_model_len=MAX_TOKENS)
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128):
        for kv in (64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096):
            t = kernel + b * kv * kv_bytes / bw + 4 * b * kv * 4096 / flops
            shape = dict(batch_size=b, prefill_chunk_size=0, kv_cache_size=kv, is_prefill=False)
            rows.append(base | shape | dict(attn_prefill=0.0, attn_decode=t))
    for chunk in (32, 64, 128, 256, 512, 1024, 2048, 4096):
        for kv in (0, 256, 512, 1024, 2048, 3072):
            if kv + chunk <= MAX_TOKENS:
                t = (
                    kernel
                    + (kv + chunk) * kv_bytes / bw
                    + 4 * chunk * (kv + chunk / 2) * 4096 / flops
                )
                shape = dict(batch_size=1, prefill_chunk_size=chunk, kv_cache_size=kv)
                rows.append(base | shape | dict(is_prefill=True, attn_prefill=t, attn_decode=0.0))
    for r in rows:
        tokens = max(r["batch_size"], r["prefill_chunk_size"])
        r["attn_kv_cache_save"] = 2e-6 + tokens * kv_bytes / bw
        for op in ("attn_prefill", "attn_decode", "attn_kv_cache_save"):
            r[f"time_stats.{op}.median"] = r.pop(op) * 1e3
    return rows


def write_inputs(work: Path) -> dict[str, Path]:
    """The cut trace in dsim's (Azure) and Vidur's formats, the attention table, the model."""
    import pandas as pd

    df = pd.read_csv(TRACE)
    ts = pd.to_datetime(df["TIMESTAMP"], format="mixed")
    out = df["GeneratedTokens"]
    prompt = df["ContextTokens"] - (df["ContextTokens"] + out - MAX_TOKENS).clip(lower=0)
    names = dict(azure="conv_4096.csv", vidur="conv_vidur.csv", attention="attention.csv")
    paths = {k: work / n for k, n in names.items()}
    df.assign(ContextTokens=prompt).to_csv(paths["azure"], index=False)
    pd.DataFrame(
        {
            "Time": (ts - ts.iloc[0]).dt.total_seconds(),
            "PromptTokenCount": prompt,
            "CompletionTokenCount": out,
            "Date": "2023-11-16",
        }
    ).to_csv(paths["vidur"], index=False)
    rows = attention_rows()
    with paths["attention"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"trace: {len(df):,} requests, {int((prompt < df['ContextTokens']).sum()):,} prompts cut")
    return paths


def dsim_bin() -> list[str]:
    script = Path(sys.executable).with_name("dsim")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dsim"]


def dsim_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(HERE)}


def llama2_profile(paths: dict[str, Path], work: Path) -> tuple[Path, int]:
    """dsim's H100 Llama-2-7B estimate (GPU work only) and its KV capacity in whole blocks."""
    out = work / "h100-llama2-7b-gpuonly.csv"
    cmd = [*dsim_bin(), "profile", "--roofline", "h100", "--model", "llama2-7b"]
    subprocess.run([*cmd, "--engine", "gpu-only", "--out", str(out)], env=dsim_env(), check=True)
    kv = json.loads(out.with_suffix(".json").read_text())["memory"]["kv_capacity_tokens"]
    return out, kv // BLOCK * BLOCK


def vidur_cmd(paths: dict[str, Path], kv_tokens: int, out_dir: Path) -> list[str]:
    rf = "--random_forrest_execution_time_predictor_config_"
    args = {
        "--replica_config_model_name": "meta-llama/Llama-2-7b-hf",
        "--replica_config_device": "h100",
        "--replica_config_network_device": "h100_dgx",
        "--replica_config_tensor_parallel_size": 1,
        "--replica_config_num_pipeline_stages": 1,
        "--cluster_config_num_replicas": 1,
        "--cache_config_block_size": BLOCK,
        "--cache_config_num_blocks": kv_tokens // BLOCK,
        "--replica_scheduler_config_type": "sarathi",
        "--sarathi_scheduler_config_chunk_size": BUDGET,
        "--sarathi_scheduler_config_batch_size_cap": BATCH_CAP,
        "--request_generator_config_type": "trace_replay",
        "--trace_request_generator_config_trace_file": paths["vidur"],
        "--trace_request_generator_config_date": "2023-11-16",
        "--trace_request_generator_config_max_tokens": MAX_TOKENS,
        "--trace_request_generator_config_prefill_scale_factor": 1,
        "--trace_request_generator_config_decode_scale_factor": 1,
        "--trace_request_generator_config_time_scale_factor": 1,
        "--execution_time_predictor_config_type": "random_forrest",
        rf + "model_profiling_dataset": "local/vidur-h100-llama2-7b-mlp+synthetic-attention",
        rf + "cache_dir": CACHE / "predictor",
        rf + "prediction_max_tokens_per_request": MAX_TOKENS,
        rf + "prediction_max_prefill_chunk_size": MAX_TOKENS,
        rf + "prediction_max_batch_size": BATCH_CAP,
        rf + "kv_cache_prediction_granularity": 64,
        rf + "k_fold_cv_splits": 2,
        rf + "num_estimators": 250,
        rf + "max_depth": 16,
        rf + "min_samples_split": 2,
        "--metrics_config_output_dir": out_dir,
    }
    flags = ["--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace"]
    child = [str(VENV / "bin/python"), str(Path(__file__).resolve()), "--vidur-child"]
    child += [str(paths["mlp"]), str(paths["attention"]), "--"]
    return child + [str(x) for kv in args.items() for x in kv] + flags


def vidur_child(mlp: str, attention: str, argv: list[str]) -> None:
    """Run Vidur's main offline (the patches the docstring names), then print its counts."""
    from vidur.entities import Batch, Request
    from vidur.execution_time_predictor import sklearn_execution_time_predictor as sk

    def no_hub(self):
        raise RuntimeError("offline: no precomputed predictions")

    sk.SklearnExecutionTimePredictor._get_input_files = lambda self: (mlp, attention, "", "")
    sk.SklearnExecutionTimePredictor._load_predictions_from_hf = no_hub
    from vidur.config import SimulationConfig
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds

    sys.argv = ["vidur", *argv]
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    simulator = Simulator(config)
    simulator.run()
    counts = {"steps": Batch._id + 1, "requests": Request._id + 1, "sim_end_s": simulator._time}
    print(json.dumps(counts))


def timed(cmd: list[str], env: dict, log: Path) -> tuple[float, float, str]:
    """(wall s, CPU s of the process tree, stdout) of one command; its output kept in `log`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as err:
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode:
        tail = log.read_text()[-3000:]
        sys.exit(f"{cmd[0]} failed (exit {done.returncode}); its log ends:\n{tail}")
    return wall, cpu, done.stdout


def run_vidur(paths: dict, kv: int, tmp: Path) -> dict:
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true", "HF_HUB_OFFLINE": "1"}
    out = tmp / f"vidur{time.monotonic_ns()}"
    wall, cpu, stdout = timed(vidur_cmd(paths, kv, out), env, tmp / "vidur.log")
    return {"wall_s": wall, "cpu_s": cpu} | json.loads(stdout.strip().splitlines()[-1])


def run_dsim(args: list[str], tmp: Path) -> dict:
    out = tmp / f"dsim{time.monotonic_ns()}"
    cmd = [*dsim_bin(), "run", "--policy", "ar", "--no-progress", "--out", str(out), *args]
    wall, cpu, _ = timed(cmd, dsim_env(), tmp / "dsim.log")
    s = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "cpu_s": cpu, "steps": s["steps"], "requests": s["requests"],
            "sim_end_s": s["duration_s"]}  # fmt: skip


def show(round_: str, side: str, r: dict) -> None:
    rate = r["steps"] / r["wall_s"]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{round_} {side:12s} wall {r['wall_s']:7.2f} s  cpu {r['cpu_s']:7.2f} s  "
          f"{r['steps']:>9,} steps  {rate:>9,.0f} steps/s  {r['requests']:,} requests  "
          f"simulated {r['sim_end_s']:,.0f} s  [load {load}]", flush=True)  # fmt: skip


def inputs() -> tuple[dict[str, Path], Path, int]:
    """Both sides' inputs in the cache: the paths, dsim's Llama-2-7B profile, its KV tokens."""
    CACHE.mkdir(parents=True, exist_ok=True)
    paths = write_inputs(CACHE) | {"mlp": MLP}
    profile, kv = llama2_profile(paths, CACHE)
    print(f"KV cache on both Llama-2-7B sides: {kv:,} tokens")
    return paths, profile, kv


def compare(rounds: int) -> None:
    if not (VENV / "bin/python").exists():
        sys.exit(f"no Vidur venv at {VENV}: run `{sys.argv[0]} --setup` first")
    paths, profile, kv = inputs()
    like = ["--trace", str(paths["azure"]), "--profile", str(profile), "--kv-tokens", str(kv),
            "--max-seqs", str(BATCH_CAP), "--prefill-mixing", "mixed",
            "--max-num-batched-tokens", str(BUDGET), "--prefill-chunk", str(BUDGET)]  # fmt: skip
    h200 = ["--trace", str(TRACE), "--profile", str(PROFILE_2023)]
    ratios = []
    with tempfile.TemporaryDirectory(prefix="vs_vidur.") as t:
        tmp = Path(t)
        for k in range(rounds + 1):
            name = "discarded" if k == 0 else f"round {k}"
            v = run_vidur(paths, kv, tmp)
            show(name, "vidur", v)
            for side, args in (("dsim-llama2", like), ("dsim-h200", h200)):
                d = run_dsim(args, tmp)
                show(name, side, d)
                if k:
                    ratios.append((side, v["wall_s"] / d["wall_s"], v["cpu_s"] / d["cpu_s"]))
    for side in ("dsim-llama2", "dsim-h200"):
        walls = [w for s, w, _ in ratios if s == side]
        cpus = [c for s, _, c in ratios if s == side]
        print(f"Vidur / {side}, warm: wall {min(walls):.1f}-{max(walls):.1f}x, "
              f"cpu {min(cpus):.1f}-{max(cpus):.1f}x (target >= 10x)")  # fmt: skip


def setup() -> None:
    """Vidur from the package registry into its own venv (no torch: see the docstring)."""
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin/pip"), "install", "-q", VIDUR], check=True)


def main() -> None:
    if len(sys.argv) > 4 and sys.argv[1] == "--vidur-child":  # Vidur's venv: no dsim here
        vidur_child(sys.argv[2], sys.argv[3], sys.argv[5:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="warm rounds after the discarded")
    parser.add_argument("--setup", action="store_true", help=f"create {VENV.name} with {VIDUR}")
    parser.add_argument("--inputs", action="store_true", help=f"only write the inputs to {CACHE}")
    args = parser.parse_args()
    if args.setup:
        setup()
    elif args.inputs:
        inputs()
    else:
        compare(args.rounds)


if __name__ == "__main__":
    main()

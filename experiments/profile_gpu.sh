#!/usr/bin/env bash
# Measure the H200 load profile of Qwen3-8B (bf16, random weights, never downloads), and of its
# one-layer drafter stand-in, and plot both. The one short GPU job (budget: about 5 minutes on
# one H200). Run from the repo root:
#   bash experiments/profile_gpu.sh            # python with CUDA torch: $PY (default python3)
#   TIMER=kernels NAME=profiles/h200-qwen3-8b-kernels bash experiments/profile_gpu.sh
# Writes $NAME.{csv,json,png} and $NAME-drafter.{csv,json,png} (NAME: profiles/h200-qwen3-8b);
# copies them, the environment ($NAME-env.txt) and the log ($NAME.log) to $OUT when that is set.
# TIMER: events (CUDA events, elapsed time; default) or kernels (summed kernel durations).
# --seqs stops at 64 so the KV cache fits: 64 seqs x 8192 ctx x 144 KiB/token = 77 GB (+16 GB of
# weights); points that still run out of memory are skipped and listed in the sidecar.
# The comparison with the calibrated estimate is experiments/gpu_profile/compare.py (run here,
# on the CPU machine, after the files come back).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
NAME=${NAME:-profiles/h200-qwen3-8b}
TIMER=${TIMER:-events}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
LOG=${OUT:-/tmp}/$(basename "$NAME").log
ENV_TXT=${OUT:-/tmp}/$(basename "$NAME")-env.txt

"$PY" - <<'PY' 2>&1 | tee "$ENV_TXT"
import importlib, platform, sys
missing = [m for m in ("torch", "transformers", "typer", "rich", "pandas", "matplotlib", "simpy")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing python packages: {' '.join(missing)}")
import torch, transformers
if not torch.cuda.is_available():
    sys.exit(f"no CUDA device visible to torch {torch.__version__}")
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__)
print("device", torch.cuda.get_device_name(0), "memory GiB",
      round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
PY
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv >>"$ENV_TXT" 2>&1 || true

DSIM=("$PY" -c 'from dsim.cli import main; main()')
GRID=(--seqs 1,4,16,64 --tokens-per-seq 1,2,4,8,16 --contexts 512,2048,8192 --repeats 7 --warmup 2
      --timer "$TIMER")

{
  time timeout 300 "${DSIM[@]}" profile --model qwen3-8b --device cuda --dtype bfloat16 \
    "${GRID[@]}" --prefill-seqs 1,4 --prefill-chunks 512,2048 --out "$NAME.csv"
  "${DSIM[@]}" profile show "$NAME.csv" --out "$NAME.png"
  time timeout 120 "${DSIM[@]}" profile --model qwen3-8b --drafter --device cuda \
    --dtype bfloat16 "${GRID[@]}" --prefill-seqs '' --out "$NAME-drafter.csv"
  "${DSIM[@]}" profile show "$NAME-drafter.csv" --out "$NAME-drafter.png"
} 2>&1 | tee "$LOG"

if [[ -n "${OUT:-}" ]]; then
  cp "$NAME".csv "$NAME".json "$NAME".png "$NAME"-drafter.csv "$NAME"-drafter.json \
    "$NAME"-drafter.png "$OUT"/
fi

#!/usr/bin/env bash
# Measure the H200 load profile of Qwen3-8B (bf16, random weights, never downloads) and plot it.
# The one short GPU job of issue 5 (budget: about 5 minutes on one H200). Run from the repo root:
#   bash experiments/profile_gpu.sh            # python with CUDA torch: $PY (default python3)
# Writes profiles/h200-qwen3-8b.{csv,json,png}; copies them to $OUT too when that is set.
# --seqs stops at 64 so the KV cache fits: 64 seqs x 8192 ctx x 144 KiB/token = 77 GB (+16 GB of
# weights); points that still run out of memory are skipped and listed in the sidecar.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
NAME=profiles/h200-qwen3-8b
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1

"$PY" - <<'PY'
import importlib, sys
missing = [m for m in ("torch", "transformers", "typer", "rich", "pandas", "matplotlib", "simpy")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing python packages: {' '.join(missing)}")
import torch
if not torch.cuda.is_available():
    sys.exit(f"no CUDA device visible to torch {torch.__version__}")
print(torch.__version__, torch.cuda.get_device_name(0), flush=True)
PY

DSIM=("$PY" -c 'from dsim.cli import main; main()')

time timeout 420 "${DSIM[@]}" profile \
  --model qwen3-8b --device cuda --dtype bfloat16 \
  --seqs 1,4,16,64 --tokens-per-seq 1,2,4,8,16 --contexts 512,2048,8192 \
  --prefill-seqs 1,4 --prefill-chunks 512,2048 --repeats 7 --warmup 2 \
  --out "$NAME.csv"
"${DSIM[@]}" profile show "$NAME.csv" --out "$NAME.png"

if [[ -n "${OUT:-}" ]]; then
  cp "$NAME".csv "$NAME".json "$NAME".png "$OUT"/
fi

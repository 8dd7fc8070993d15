#!/usr/bin/env bash
# Regenerates the shipped estimates (each sidecar records its command); the vllm-2023 files
# stay as they are (their CSVs are the pre-preset files byte for byte, profiles/README.md).
# Run from the repository root: bash profiles/estimates.sh   (about a minute)
set -euo pipefail
dsim=".venv/bin/dsim"
q="--roofline h200 --model qwen3-8b"
d="--roofline h200 --model deepseek-v3 --tp 8 --ep 8 --dtype fp8"
$dsim profile $q --out profiles/h200-qwen3-8b-roofline.csv
$dsim profile $q --engine sglang --out profiles/h200-qwen3-8b-sglang-roofline.csv
$dsim profile $q --engine gpu-only --out profiles/h200-qwen3-8b-gpuonly-roofline.csv
for m in eagle eagle3 dspark; do
  $dsim profile $q --draft-model $m --out profiles/h200-qwen3-8b-$m-roofline.csv
done
$dsim profile --roofline h200 --model qwen3-30b-a3b --out profiles/h200-qwen3-30b-a3b-roofline.csv
$dsim profile $d --out profiles/h200x8-deepseek-v3-fp8-roofline.csv
$dsim profile $d --engine sglang --out profiles/h200x8-deepseek-v3-fp8-sglang-roofline.csv
$dsim profile $d --engine gpu-only --out profiles/h200x8-deepseek-v3-fp8-gpuonly-roofline.csv
$dsim profile $d --draft-model mtp --out profiles/h200x8-deepseek-v3-fp8-mtp-roofline.csv

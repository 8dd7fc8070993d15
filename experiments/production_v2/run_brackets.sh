#!/usr/bin/env bash
# The sweeps of production_v2's brackets in the rule's priority order (README.md, "Brackets over
# engines: rule"): dense 8B on vllm, gpuonly, sglang, vllm2023, then MoE in the same order
# (each: MODEL-ENGINE and MODEL-ENGINE-mtp1, then analyze.py), then the ragged brackets (vllm,
# sglang; dense, then MoE). Anchors must already be in the TOMLs (anchors.py, committed first).
# Every sweep appends its command, machine, start and end (UTC), wall time and load averages to
# engines/runlog.md. The sweeps resume: killed and rerun, a sweep keeps its finished points.
#
# Run from the repository root:  experiments/production_v2/run_brackets.sh [PYTHON_BIN_DIR]
set -euo pipefail
BIN=${1:-.venv/bin}
HERE=experiments/production_v2
LOG=$HERE/engines/runlog.md
ENGINES=(vllm gpuonly sglang vllm2023)
RAGGED=(vllm sglang)

[ -f "$LOG" ] || printf '| config | command | machine | start UTC | end UTC | wall s | load avg start | load avg end |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n' >"$LOG"

sweep() {  # one sweep, logged
  local name=$1 cmd start end t0 l0
  cmd="dsim pareto --config $HERE/engines/$name.toml --out $HERE/engines/$name --jobs 2"
  start=$(date -u +%FT%TZ); t0=$(date +%s); l0=$(cut -d' ' -f1-3 /proc/loadavg)
  "$BIN/dsim" pareto --config "$HERE/engines/$name.toml" --out "$HERE/engines/$name" --jobs 2 --no-progress
  end=$(date -u +%FT%TZ)
  echo "| $name | \`$cmd\` | $(hostname), $(nproc) cores | $start | $end | $(( $(date +%s) - t0 )) | $l0 | $(cut -d' ' -f1-3 /proc/loadavg) |" >>"$LOG"
}

for model in dense8b moe; do
  for engine in "${ENGINES[@]}"; do
    sweep "$model-$engine"
    sweep "$model-$engine-mtp1"
    "$BIN/python" $HERE/analyze.py "engines/$model-$engine" >/dev/null
  done
  "$BIN/python" $HERE/bracket_table.py "$model" >/dev/null
done
for model in dense8b moe; do
  for engine in "${RAGGED[@]}"; do
    sweep "$model-$engine-ragged0"
    sweep "$model-$engine-ragged2x"
    "$BIN/python" $HERE/analyze.py "engines/$model-$engine" >/dev/null
  done
  "$BIN/python" $HERE/bracket_table.py "$model" >/dev/null
done

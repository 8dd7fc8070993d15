#!/usr/bin/env bash
# The exact pipeline behind drafters/*.pt, traces/acceptance/smollm2-*.parquet and the
# evidence in this folder. CPU only, 1 torch thread per process (the machine was shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
PY=${PY:-.venv/bin/python}

# 1. Split prompts, let SmolLM2-135M answer the 172 train prompts at temperature 1 (<=160
#    tokens), cache its final hidden states and log-partitions (.cache/dsim/train-hidden.pt).
$DSIM prepare-data

# 2. Train the five drafters (gamma 7; mtp1 drafts 1). We ran up to three at once.
for kind in ar parallel markov rnn mtp1; do
  $DSIM train --drafter "$kind" --gamma 7 --steps 800 --batch-size 64 --out "drafters/$kind.pt"
done

# 3. Real speculative decoding on the held-out prompts, every draft verified, temperature 1.
for kind in ar parallel markov rnn mtp1; do
  $DSIM collect --drafter "drafters/$kind.pt" --prompts traces/prompts/heldout.jsonl \
    --out "traces/acceptance/smollm2-$kind.parquet" --max-new-tokens 64 --batch-size 24
done

# 4. Tables, plots, latency, STS calibration.
$PY experiments/drafters/analyze.py

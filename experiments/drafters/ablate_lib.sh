# Shared by run_v2c.sh and run_v2d.sh (sourced; run from the repo root): the held-out
# collection and the one-change ablation of markov, exactly as both scripts ran them.
DSIM=${DSIM:-.venv/bin/dsim}
LOGS=${LOGS:-.cache/dsim/logs}
ABL=experiments/drafters/ablations
mkdir -p "$LOGS" runs/abl "$ABL"

collect() {  # CHECKPOINT OUT_PARQUET LOG: held-out prompts, temperature 1, run_v2.sh settings
  nice -n 5 $DSIM collect --drafter "$1" --prompts traces/prompts/heldout.jsonl \
    --out "$2" --max-new-tokens 64 --batch-size 24 >"$LOGS/$3" 2>&1
}
ablate() {  # NAME ARGS...: markov, 2,000 steps unless ARGS say otherwise, one change
  local name=$1; shift
  nice -n 5 $DSIM train --drafter markov --steps 2000 --threads 1 --out "runs/abl/$name.pt" \
    --state ".cache/dsim/abl-$name.state.pt" "$@" >"$LOGS/abl-$name.log" 2>&1
  collect "runs/abl/$name.pt" "$ABL/markov-$name.parquet" "collect-abl-$name.log"
}
ablate_data() {  # the data ablation: ~20k answer tokens (172 prompts x 1 answer), then markov
  nice -n 5 $DSIM prepare-data --samples 1 --limit 172 --out .cache/dsim/data/small \
    >"$LOGS/prepare-small.log" 2>&1
  ablate data --data .cache/dsim/data/small
}

#!/usr/bin/env bash
# FP8 training against bf16 on the King James Bible: the quickstart's GPT-2
# (configs/quickstart.toml) and llama-tiny (configs/llama-tiny-kjv.toml), each trained for STEPS
# steps (1,000 by default) in bf16 and with each FP8 recipe (train.fp8 = tensorwise, delayed,
# blockwise), on the same data in the same order from the same initial weights; and once more in
# bf16 from other initial weights (init.seed=7), the yardstick of what a difference is. Then
# bench/fp8_curves.py prints the final validation losses with their relative difference from
# bf16's, and draws the curves into docs/images/fp8-curves.svg.
#
#   bash bench/fp8_curves.sh                   every model and recipe
#   bash bench/fp8_curves.sh llama-tiny        one model's runs
#
# Each run goes into runs/fp8/<model>-<recipe> and checkpoints every 100 steps: run the script
# again to resume what was stopped and skip what is done. llama-tiny's dimensions (48, 80, 128)
# are not multiples of blockwise's 128, so its tiles are 16 (fp8.block=16). One OpenMP thread per
# run by default (THREADS=n for more). Needs build/dtrain (DTRAIN=path for another) and runs/kjv
# (scripts/quickstart.sh makes both).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/dtrain}
steps=${STEPS:-1000}
[ -s runs/kjv/val_000000.bin ] || { echo "fp8_curves.sh: no runs/kjv: run scripts/quickstart.sh first" >&2; exit 2; }
mkdir -p runs/fp8
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(quickstart llama-tiny)
for model in "${models[@]}"; do
  case $model in
    quickstart) config=configs/quickstart.toml extra=() ;;
    llama-tiny) config=configs/llama-tiny-kjv.toml extra=(fp8.block=16) ;;
    *) echo "fp8_curves.sh: unknown model '$model': quickstart or llama-tiny" >&2; exit 2 ;;
  esac
  for recipe in none tensorwise delayed blockwise reseeded; do
    run=runs/fp8/$model-$recipe
    case $recipe in
      reseeded) what=(train.fp8=none init.seed=7) ;;
      *) what=(train.fp8="$recipe") ;;
    esac
    if [ -s "$run/metrics.jsonl" ] && grep -q "\"step\": *$steps," "$run/metrics.jsonl"; then continue; fi
    echo "fp8_curves.sh: $run"
    OMP_NUM_THREADS=${THREADS:-1} "$dtrain" train "$config" train.steps="$steps" train.precision=bf16 \
      "${what[@]}" log.run_dir="$run" log.progress=plain sample.every=0 "${extra[@]}" > "$run.log" 2>&1 ||
      { tail -20 "$run.log" >&2; exit 1; }
  done
done
python3 bench/fp8_curves.py runs/fp8 docs/images/fp8-curves.svg

#!/usr/bin/env bash
# What quantization costs and what quantization-aware training recovers, on the quickstart's
# GPT-2 (runs/quickstart, configs/quickstart.toml) and a Llama of its size (runs/llama-kjv,
# configs/llama-kjv.toml), each trained for its 250 steps first:
#
#   1. from each model's step-250 checkpoint, FINETUNE more steps (50 by default) four ways:
#      plain, and with train.qat = int8, q8_0 and q4_0, on the same data in the same order;
#   2. the validation loss (dtrain eval, the quickstart's 20,480 tokens) of the plain fine-tune
#      in f32 and quantized after the fact (PTQ) to each format, and of each QAT fine-tune in its
#      format; the share of PTQ's loss that QAT recovers, (PTQ - QAT) / (PTQ - f32);
#   3. the median step time of the plain and the QAT fine-tunes (steps after the fifth), and
#      their ratio: what the quantizer in the loop costs a step.
#
#   bash bench/quantization.sh        both models
#
# Needs build/dtrain and runs/kjv (scripts/quickstart.sh), and the two models trained
# (dtrain train configs/quickstart.toml, dtrain train configs/llama-kjv.toml). Work goes into
# runs/quantization/. Two OpenMP threads per run (THREADS=n for more).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/dtrain}
finetune=${FINETUNE:-50}
export OMP_NUM_THREADS=${THREADS:-2}
[ -s runs/kjv/val_000000.bin ] || { echo "quantization.sh: no runs/kjv: run scripts/quickstart.sh first" >&2; exit 2; }
mkdir -p runs/quantization
median_step_ms() {  # RUN_DIR: the median step_ms of the steps after the first five of this process
  /usr/bin/python3 -c '
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = [l for l in lines if "step_ms" in l]
print("%.1f" % statistics.median(l["step_ms"] for l in steps[5:]))' "$1"
}
val_loss() {  # CHECKPOINTS [FORMAT]
  "$dtrain" eval --checkpoint "$1" --data runs/kjv --seq-len 256 --batches 10 --quantize "${2:-none}" |
    sed -E 's/.*loss ([0-9.]+) .*/\1/'
}
printf "| model | f32 | PTQ int8 | QAT int8 | PTQ q8_0 | QAT q8_0 | PTQ q4_0 | QAT q4_0 | QAT step / plain (int8, q8_0, q4_0) |\n"
printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
for model in quickstart llama-kjv; do
  config=configs/$model.toml
  [ -d "runs/$model/checkpoints/step_000000250" ] ||
    { echo "quantization.sh: train $config first (runs/$model/checkpoints/step_000000250)" >&2; exit 2; }
  steps=$((250 + finetune))
  for qat in none int8 q8_0 q4_0; do
    run=runs/quantization/$model-$qat
    if [ ! -d "$run/checkpoints/step_$(printf %09d $steps)" ]; then
      rm -rf "$run" && mkdir -p "$run/checkpoints"
      cp -r "runs/$model/checkpoints/step_000000250" "$run/checkpoints/"
      echo step_000000250 > "$run/checkpoints/latest"
      "$dtrain" train "$config" log.run_dir="$run" train.steps=$steps train.qat=$qat eval.every=0 \
        checkpoint.every=0 log.progress=plain log.every=1000 > "$run.log"
    fi
  done
  plain=runs/quantization/$model-none/checkpoints
  row="| $model | $(val_loss "$plain")"
  ratios=""
  base_ms=$(median_step_ms runs/quantization/$model-none)
  for format in int8 q8_0 q4_0; do
    row="$row | $(val_loss "$plain" "$format") | $(val_loss "runs/quantization/$model-$format/checkpoints" "$format")"
    ms=$(median_step_ms "runs/quantization/$model-$format")
    ratios="$ratios $(/usr/bin/python3 -c "print('%.3f' % ($ms / $base_ms))")"
  done
  echo "$row | ${ratios# } (plain $base_ms ms) |"
done

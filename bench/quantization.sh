#!/usr/bin/env bash
# What quantization costs and what quantization-aware training recovers, on the quickstart's
# GPT-2 (configs/quickstart.toml, its 250 steps in runs/quickstart), a Llama of its size
# (configs/llama-kjv.toml, 250 steps in runs/llama-kjv), and the quickstart's GPT-2 trained eight
# times longer (2,000 steps, about eight epochs, in runs/quickstart-2000), where quantization
# costs more:
#
#   1. from each model's last checkpoint, FINETUNE more steps (50 by default) four ways: plain,
#      and with train.qat = int8, q8_0 and q4_0, on the same data in the same order;
#   2. the validation loss and perplexity (dtrain eval, the quickstart's 20,480 tokens) of the
#      plain fine-tune in f32 and quantized after the fact (PTQ) to each format, and of each QAT
#      fine-tune in its format; the share of PTQ's loss that QAT recovers, (PTQ - QAT) / (PTQ -
#      f32), where PTQ costs at least 0.001;
#   3. the median step time of the plain and the QAT fine-tunes (steps after the fifth), and
#      their ratio: what the quantizer in the loop costs a step.
#
#   bash bench/quantization.sh                    the three models
#   MODELS="quickstart-2000" bash bench/quantization.sh
#
# Needs build/dtrain and runs/kjv (scripts/quickstart.sh), and the models trained:
#   dtrain train configs/quickstart.toml
#   dtrain train configs/llama-kjv.toml
#   dtrain train configs/quickstart.toml train.steps=2000 log.run_dir=runs/quickstart-2000 checkpoint.every=1000
# Work goes into runs/quantization/. Two OpenMP threads per run (THREADS=n for more).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/dtrain}
finetune=${FINETUNE:-50}
models=${MODELS:-quickstart llama-kjv quickstart-2000}
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
printf "| model | f32 | PTQ int8 | QAT int8 | PTQ q8_0 | QAT q8_0 | PTQ q4_0 | QAT q4_0 | QAT recovers (int8, q8_0, q4_0) | QAT's step against plain (int8, q8_0, q4_0) |\n"
printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
for model in $models; do
  case $model in
    quickstart-2000) config=configs/quickstart.toml base=2000 ;;
    *) config=configs/$model.toml base=250 ;;
  esac
  from=step_$(printf %09d $base)
  [ -d "runs/$model/checkpoints/$from" ] ||
    { echo "quantization.sh: train $model first (runs/$model/checkpoints/$from; see the top of this script)" >&2; exit 2; }
  steps=$((base + finetune))
  for qat in none int8 q8_0 q4_0; do
    run=runs/quantization/$model-$qat
    if [ ! -d "$run/checkpoints/step_$(printf %09d $steps)" ]; then
      rm -rf "$run" && mkdir -p "$run/checkpoints"
      cp -r "runs/$model/checkpoints/$from" "$run/checkpoints/"
      echo "$from" > "$run/checkpoints/latest"
      "$dtrain" train "$config" log.run_dir="$run" train.steps=$steps train.qat=$qat eval.every=0 \
        checkpoint.every=0 log.progress=plain log.every=1000 > "$run.log"
    fi
  done
  plain=runs/quantization/$model-none/checkpoints
  losses="$(val_loss "$plain")"
  for format in int8 q8_0 q4_0; do
    losses="$losses $(val_loss "$plain" "$format") $(val_loss "runs/quantization/$model-$format/checkpoints" "$format")"
  done
  times="$(median_step_ms runs/quantization/$model-none)"
  for format in int8 q8_0 q4_0; do times="$times $(median_step_ms "runs/quantization/$model-$format")"; done
  /usr/bin/python3 - "$model" $losses $times <<'PY'
import math, sys
model, values = sys.argv[1], [float(v) for v in sys.argv[2:]]
f32, pairs, plain_ms, qat_ms = values[0], [values[1:3], values[3:5], values[5:7]], values[7], values[8:11]
cell = lambda loss: "%.4f (%.2f)" % (loss, math.exp(loss))
# The share of PTQ's loss QAT recovers, where PTQ costs enough to measure (0.001).
recovers = ["%.0f%%" % (100 * (ptq - qat) / (ptq - f32)) if ptq - f32 >= 1e-3 else "-" for ptq, qat in pairs]
print("| %s | %s | %s | %s | %s, %s, %s (plain %.0f ms) |" % (
    model, cell(f32), " | ".join(cell(v) for pair in pairs for v in pair), ", ".join(recovers),
    *("%.3f" % (ms / plain_ms) for ms in qat_ms), plain_ms))
PY
done

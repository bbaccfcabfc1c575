#!/usr/bin/env bash
# The planner against this machine: for the quickstart's model (configs/quickstart.toml: GPT-2,
# 4 layers, d_model 256, vocabulary 4,096, micro-batches of 8 x 256 tokens) in a set of layouts
# — one rank in f32 and bf16 with each recomputation policy, dp 2 at each ZeRO stage, tp 2 with and
# without sp, pp 2 under 1F1B, cp 2 — `dtrain plan --gpu cpu-local` predicts the step time from
# this machine's profile, and `dtrain train` measures it (the median of steps 3 to 8, one OpenMP
# thread per rank, as the profile was measured). Prints each layout's predicted and measured
# milliseconds and their ratio.
#
#   bash bench/plan_vs_cpu.sh
#
# Needs build/dtrain, the quickstart's data in runs/kjv (scripts/quickstart.sh makes it) and
# profiles/cpu-local.toml, which it measures first when missing
# (mpirun -np 2 -x OMP_NUM_THREADS=1 build/dtrain bench profile).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=build/dtrain
mpirun=(mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE)
[ -s runs/kjv/val_000000.bin ] || { echo "plan_vs_cpu.sh: no runs/kjv: run scripts/quickstart.sh first" >&2; exit 2; }
[ -s profiles/cpu-local.toml ] || "${mpirun[@]}" -np 2 "$dtrain" bench profile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="train.steps=8 optim.warmup_steps=1 train.global_batch_size=8 log.progress=plain sample.max_tokens=1"

printf '%-34s %6s %12s %12s %8s\n' layout ranks predicted_ms measured_ms ratio
row() {  # name ranks overrides...
  local name=$1 ranks=$2
  shift 2
  local predicted measured
  predicted=$("$dtrain" plan configs/quickstart.toml --gpu cpu-local --gpus "$ranks" --json $common "$@" |
                python3 -c 'import json, sys; print(json.load(sys.stdin)["step_seconds"]["total"] * 1e3)')
  rm -rf "$work/run"
  "${mpirun[@]}" -np "$ranks" "$dtrain" train configs/quickstart.toml log.run_dir="$work/run" $common "$@" \
    > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  measured=$(python3 -c '
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l]
print(statistics.median(s["step_ms"] for s in steps if s["step"] >= 3))' "$work/run/metrics.jsonl")
  python3 -c 'import sys; n, r, p, m = sys.argv[1:]; print(f"{n:34s} {r:>6s} {float(p):12.1f} {float(m):12.1f} {float(p) / float(m):8.2f}")' \
    "$name" "$ranks" "$predicted" "$measured"
}
row "f32" 1
row "f32 recompute selective" 1 train.recompute=selective
row "f32 recompute full" 1 train.recompute=full
row "bf16" 1 train.precision=bf16
row "bf16 recompute full" 1 train.precision=bf16 train.recompute=full
row "dp 2, ZeRO 0" 2 parallel.dp=2 train.global_batch_size=16
row "dp 2, ZeRO 1" 2 parallel.dp=2 parallel.zero_stage=1 train.global_batch_size=16
row "dp 2, ZeRO 2" 2 parallel.dp=2 parallel.zero_stage=2 train.global_batch_size=16
row "dp 2, ZeRO 3" 2 parallel.dp=2 parallel.zero_stage=3 train.global_batch_size=16
row "tp 2" 2 parallel.tp=2
row "tp 2, sp" 2 parallel.tp=2 parallel.sp=true
row "pp 2, 1F1B, 4 micro-batches" 2 parallel.pp=2 train.global_batch_size=32
row "cp 2" 2 parallel.cp=2

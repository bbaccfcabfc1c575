#!/usr/bin/env bash
# How long a checkpoint save stops training, synchronous against asynchronous
# (checkpoint.async), on the gpt2-124m shape (configs/gpt2-124m.toml: 124M parameters, a
# checkpoint of 1.4 GiB in f32). Three runs of STEPS steps (32 by default) of one sequence of 64
# tokens on the King James Bible: saving every EVERY steps (8) synchronously, the same
# asynchronously, and saving only at the end (the baseline). From each run's metrics.jsonl it
# prints the median stall of the saves made mid-run (the last save of a run waits for its write
# either way), the median time until a save was in place, the median step, the run's wall time
# and what the saves cost it over the baseline, and the asynchronous saver's staging memory.
#
#   bash bench/checkpoint_stall.sh                       on the CPU, in f32
#   DEVICE=cuda PRECISION=bf16 bash bench/checkpoint_stall.sh
#
# The runs go into runs/checkpoint_stall/<mode> (removed first). Needs build/dtrain (DTRAIN=path
# for another) and runs/kjv (scripts/quickstart.sh makes both).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/dtrain}
steps=${STEPS:-32}
every=${EVERY:-8}
[ -s runs/kjv/val_000000.bin ] || { echo "checkpoint_stall.sh: no runs/kjv: run scripts/quickstart.sh first" >&2; exit 2; }
out=runs/checkpoint_stall
mkdir -p "$out"
for mode in sync async end; do
  run=$out/$mode
  rm -rf "$run"
  case $mode in
    sync) what=(checkpoint.every="$every") ;;
    async) what=(checkpoint.every="$every" checkpoint.async=true) ;;
    end) what=(checkpoint.every=0) ;;
  esac
  echo "checkpoint_stall.sh: $run" >&2
  date +%s.%N > "$run.seconds"
  "$dtrain" train configs/gpt2-124m.toml data.dir=runs/kjv data.train_prefix=train_ data.val_prefix=val_ \
    data.seq_len=64 train.micro_batch_size=1 train.global_batch_size=1 train.steps="$steps" optim.warmup_steps=1 \
    train.device="${DEVICE:-cpu}" train.precision="${PRECISION:-f32}" eval.every=0 sample.every=0 \
    log.run_dir="$run" log.progress=plain "${what[@]}" > "$run.log" 2>&1 || { tail -20 "$run.log" >&2; exit 1; }
  date +%s.%N >> "$run.seconds"
done
python3 - "$out" "$steps" "$every" <<'EOF'
import json, statistics, sys
out, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def read(mode):
    steps_ms, saves = [], []
    for line in open(f"{out}/{mode}/metrics.jsonl"):
        r = json.loads(line)
        if "step_ms" in r: steps_ms.append(r["step_ms"])
        if "checkpoint_stall_ms" in r: saves.append(r)
    start, end = (float(t) for t in open(f"{out}/{mode}.seconds").read().split())
    return steps_ms, saves, end - start
memory = [l for l in open(f"{out}/async.log") if l.startswith("memory")][0]
_, _, baseline = read("end")
print(f"gpt2-124m shape, {steps} steps of 64 tokens, a save every {every} steps (the last one waits in both modes)")
print(f"{'mode':<6} {'saves':>5} {'stall, median':>14} {'in place, median':>17} {'step, median':>13} {'run':>8} {'over end-only':>14}")
stalls = {}
for mode in ("sync", "async", "end"):
    steps_ms, saves, seconds = read(mode)
    mid = [s for s in saves if s["step"] != steps]
    stall = statistics.median(s["checkpoint_stall_ms"] for s in mid) if mid else float("nan")
    placed = statistics.median(s["checkpoint_save_ms"] for s in mid) if mid else float("nan")
    stalls[mode] = stall
    print(f"{mode:<6} {len(mid):>5} {stall/1e3:>12.3f} s {placed/1e3:>15.2f} s {statistics.median(steps_ms):>10.0f} ms"
          f" {seconds:>6.1f} s {seconds - baseline:>12.1f} s")
print(f"stall per save, sync over async: {stalls['sync'] / stalls['async']:.0f}x")
print("async run's " + memory.strip())
EOF

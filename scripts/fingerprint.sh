#!/usr/bin/env bash
# The numbers a build produces, for proving that a change to the engine leaves them bit for
# bit the same: run it with the build before the change and the build after, on the same
# machine, and diff the two outputs.
#
#   scripts/fingerprint.sh DTRAIN WORK_DIR > numbers.txt
#
# DTRAIN is the dtrain binary to run; WORK_DIR keeps the data between runs (the King James
# Bible tokenized as the quickstart does it, made on the first run) and each run's directory.
# It prints, for each run, every step's loss as metrics.jsonl holds it (the shortest decimal
# that reads back as the same double) and the SHA-256 of the final parameters as `dtrain export`
# writes them (so that the checkpoint's own format may change):
#   - the quickstart (configs/quickstart.toml) for 30 steps;
#   - a 2-layer gpt2 and llama, each in f32 and bf16, for 4 steps of 2 micro-batches, on one
#     process and over 2 MPI ranks at ZeRO stages 0 to 3, then resumed from the step-4
#     checkpoint for 2 more steps (the moments and the checkpoint's round trip show in those);
#   - the same two shapes (4 layers for the pipeline) over 2 ranks of tensor parallelism, with
#     and without sequence parallelism, of pipeline parallelism under 1f1b and zb-v, and of
#     context parallelism, in f32 and bf16, resumed the same way.
# Threads are fixed (OMP_NUM_THREADS, one per rank under MPI) so that the kernels' sums run in
# the same order each time. Needs the bible-kjv package (scripts/setup.sh installs it) and,
# for the MPI runs, mpirun.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 DTRAIN WORK_DIR" >&2; exit 2; }
dtrain=$(realpath "$1")
work=$2
mkdir -p "$work"
work=$(realpath "$work")
cd "$(dirname "$0")/.."
data=$work/kjv
mkdir -p "$data"
if [ ! -s "$data/kjv.txt" ]; then
  bible -f "Genesis 1:1-Revelation 22:21" |
    awk '{ ref = $1; sub(/^[^ ]+ /, ""); if (ref ~ /:1$/ && NR > 1) print ""; print }' > "$data/kjv.txt"
fi
[ -s "$data/tokenizer.json" ] || "$dtrain" tokenizer train --vocab-size 4096 --out "$data/tokenizer.json" "$data/kjv.txt" > /dev/null
[ -s "$data/val_000000.bin" ] ||
  "$dtrain" data prepare --tokenizer "$data/tokenizer.json" --out "$data" --val-fraction 0.02 \
    --doc-separator blank-lines "$data/kjv.txt" > /dev/null

# print NAME RUN_DIR: the run's losses and its final parameters.
print() {
  rm -rf "$2/export"
  "$dtrain" export --checkpoint "$2/checkpoints" --hf "$2/export" --tokenizer "" > /dev/null
  echo "$1 losses: $(grep -o '"loss":[^,]*' "$2/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')"
  echo "$1 parameters: $(sha256sum < "$2/export/model.safetensors" | cut -d' ' -f1)"
}

# run NAME RANKS OVERRIDES...: trains (or resumes) run NAME with the quickstart's data; the
# overrides give the layout of RANKS ranks.
run() {
  local name=$1 ranks=$2
  shift 2
  local run=$work/runs/$name
  local command=("$dtrain" train configs/quickstart.toml "data.dir=$data" "data.tokenizer=$data/tokenizer.json"
                 "log.run_dir=$run" log.progress=plain sample.every=0 eval.every=0 "$@")
  if [ "$ranks" -eq 1 ]; then
    OMP_NUM_THREADS=2 "${command[@]}" >> "$run.log" 2>&1 || { cat "$run.log" >&2; exit 1; }
  else
    mpirun --oversubscribe --allow-run-as-root -np "$ranks" -x OMP_NUM_THREADS=1 "${command[@]}" \
      >> "$run.log" 2>&1 || { cat "$run.log" >&2; exit 1; }
  fi
}

# train NAME RANKS OVERRIDES...: a run from scratch; with resume=yes first, it is then resumed
# for 2 more steps.
train() {
  local resume=no
  if [ "$1" = resume=yes ]; then resume=yes; shift; fi
  local name=$1
  rm -rf "${work:?}/runs/$name" "$work/runs/$name.log"
  run "$@"
  if [ $resume = yes ]; then run "$@" train.steps=6; fi
  print "$name" "$work/runs/$name"
}

mkdir -p "$work/runs"
train quickstart 1 train.steps=30
tiny=(model.n_layer=2 model.d_model=64 model.n_head=4 model.max_seq_len=64 data.seq_len=64
      train.micro_batch_size=2 train.global_batch_size=4 train.steps=4 optim.warmup_steps=1 checkpoint.every=0)
for family in gpt2 llama; do
  shape=("${tiny[@]}" model.family=$family)
  [ $family = llama ] && shape+=(model.n_kv_head=2 model.tied_embeddings=false)
  for precision in f32 bf16; do
    train resume=yes "$family-$precision-1rank" 1 "${shape[@]}" train.precision=$precision
    for zero in 0 1 2 3; do
      train resume=yes "$family-$precision-dp2-zero$zero" 2 "${shape[@]}" train.precision=$precision \
        parallel.dp=2 parallel.zero_stage=$zero train.global_batch_size=8
    done
    train resume=yes "$family-$precision-tp2" 2 "${shape[@]}" train.precision=$precision parallel.tp=2
    train resume=yes "$family-$precision-tp2-sp" 2 "${shape[@]}" train.precision=$precision parallel.tp=2 parallel.sp=true
    for schedule in 1f1b zb-v; do
      train resume=yes "$family-$precision-pp2-$schedule" 2 "${shape[@]}" model.n_layer=4 train.precision=$precision \
        parallel.pp=2 parallel.pp_schedule=$schedule
    done
    train resume=yes "$family-$precision-cp2" 2 "${shape[@]}" train.precision=$precision parallel.cp=2
  done
done

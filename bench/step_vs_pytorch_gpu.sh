#!/usr/bin/env bash
# dtrain's training step on the GPU against PyTorch's at its best (bench/pytorch_step_gpu.py:
# torch.compile of the model with its loss, flash SDPA, fused AdamW), same model, batch, sequence
# and precision, in the same run: gpt2-124m (sequence 1024), gpt2-774m (1024) and llama3.2-1b
# (2048), bf16. Prints each side's median tokens/s and peak memory, dtrain's MFU against the GPU's
# datasheet dense peak, and the ratio to PyTorch in each torch.compile mode asked for.
#
#   bash bench/step_vs_pytorch_gpu.sh [--batch N] [--steps 20] [--warmup 5] [--precision bf16]
#                                     [--modes "default max-autotune"] [--models "gpt2-124m ..."]
#
# Micro-batches: each model tries the larger of two first (64, 32 and 12 sequences) and, where
# either side does not fit it, the smaller (32, 16 and 8, which both fit in an 80 GB GPU);
# --batch N sets one for all. max-autotune compiles for minutes a
# model (it times Triton's GEMMs against cuBLAS for every shape).
# Needs a GPU and PyTorch with CUDA for python3 (not Debian's CPU build at /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A o=([batch]= [steps]=20 [warmup]=5 [precision]=bf16 [modes]=default [models]="gpt2-124m gpt2-774m llama3.2-1b")
while [ $# -gt 0 ]; do
  key=${1#--}
  [ -n "${o[$key]+x}" ] || { echo "step_vs_pytorch_gpu.sh: unknown flag $1 (known: ${!o[*]})" >&2; exit 2; }
  o[$key]=$2
  shift 2
done
peer_precision=${o[precision]/f32/fp32}
value() { sed -E "s/.*$1=([0-9.]+).*/\1/" <<<"$2"; }
run() {  # preset seq "batches" family peer-model-flags...
  local preset=$1 seq=$2 batches=${o[batch]:-$3} family=$4
  shift 4
  [[ " ${o[models]} " == *" $preset "* ]] || return 0
  local ours peer mode batch
  for mode in ${o[modes]}; do
    peer=
    for batch in $batches; do  # the first that both sides fit
      ours=$(./build/dtrain bench step --device cuda --model "$preset" --seq "$seq" --batch "$batch" \
               --steps "${o[steps]}" --warmup "${o[warmup]}" --precision "${o[precision]}" | tee >(cat >&2) |
             grep '^result') || { echo "# dtrain: $preset at batch $batch did not run" >&2; continue; }
      peer=$(python3 bench/pytorch_step_gpu.py --family "$family" --seq "$seq" --batch "$batch" \
               --steps "${o[steps]}" --warmup "${o[warmup]}" --precision "$peer_precision" --mode "$mode" "$@" |
             tee >(cat >&2) | grep '^result') || { echo "# pytorch: $preset at batch $batch did not run" >&2; continue; }
      break
    done
    [ -n "$peer" ] || continue
    awk -v name="$preset" -v seq="$seq" -v batch="$batch" -v mode="$mode" \
        -v a="$(value tokens_per_s "$ours")" -v mfu="$(value datasheet_mfu "$ours")" -v ma="$(value peak_memory_gib "$ours")" \
        -v b="$(value tokens_per_s "$peer")" -v mb="$(value peak_memory_gib "$peer")" \
        'BEGIN { printf "result %-12s seq %5d batch %3d  dtrain %9.0f tok/s (MFU %5.1f%%, %5.1f GiB)  pytorch %-12s %9.0f tok/s (%5.1f GiB)  ratio %.2fx\n", name, seq, batch, a, 100 * mfu, ma, mode, b, mb, a / b }'
  done
}
run gpt2-124m 1024 "64 32" gpt2 --n-layer 12 --d-model 768 --n-head 12 --vocab-size 50257 --max-seq-len 1024
run gpt2-774m 1024 "32 16" gpt2 --n-layer 36 --d-model 1280 --n-head 20 --vocab-size 50257 --max-seq-len 1024
run llama3.2-1b 2048 "12 8" llama --n-layer 16 --d-model 2048 --n-head 32 --n-kv-head 8 --ffn-hidden 8192 \
  --vocab-size 128256 --max-seq-len 2048 --rope-theta 500000

#!/usr/bin/env bash
# Times dtrain's BPE encoding and Hugging Face tokenizers' on the same tokenizer.json, text,
# documents and thread count, in the same run, and prints their median MB/s and the ratio.
#
#   bash bench/tokenizer_vs_hf.sh TOKENIZER_JSON TEXT_FILE [SEPARATOR=line] [THREADS=nproc] [REPS=5]
#
# Both encode without post-processing; the token counts printed beside must agree.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,8p "$0"; exit 2; }
tokenizer=$1 text=$2 separator=${3:-line} threads=${4:-$(nproc)} reps=${5:-5}
ours=$(./build/dtrain bench tokenizer --tokenizer "$tokenizer" --doc-separator "$separator" --threads "$threads" \
         --reps "$reps" "$text" | grep '^result')
peer=$(RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true /usr/bin/python3 bench/tokenizer_hf.py \
         "$tokenizer" "$text" "$separator" "$reps")
echo "dtrain:     $ours"
echo "tokenizers: $peer"
mb() { sed -E 's/.*mb_per_s=([0-9.]+).*/\1/' <<<"$1"; }
awk -v a="$(mb "$ours")" -v b="$(mb "$peer")" -v t="$threads" \
  'BEGIN { printf "result threads=%d dtrain_mb_per_s=%.2f tokenizers_mb_per_s=%.2f ratio=%.2f\n", t, a, b, a / b }'

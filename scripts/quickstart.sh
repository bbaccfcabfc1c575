#!/usr/bin/env bash
# The README's quickstart, from a fresh Debian machine: installs what is needed, builds, takes
# the King James Bible from Debian's bible-kjv package, trains a BPE tokenizer on it, prepares
# token shards with a validation split, trains a small GPT-2 on the CPU for about five minutes
# (configs/quickstart.toml), then prints the validation loss and samples.
# Everything goes under runs/kjv (text, tokenizer, shards) and runs/quickstart (the run); run it again to resume or to skip what is done.
# Extra arguments are configuration overrides for the training run (train.steps=200, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh              # the build's packages and the corpus, not the tests' reference stack
bash scripts/build.sh -DDTRAIN_TESTS=OFF   # dtrain alone
dtrain=./build/dtrain
data=runs/kjv
mkdir -p "$data"

# The text: one verse per line with its reference ("Ge1:1 In the beginning ..."). The
# reference goes; each chapter becomes a document (a blank line between chapters), so that
# the end-of-text token separates chapters in the shards.
if [ ! -s "$data/kjv.txt" ]; then
  bible -f "Genesis 1:1-Revelation 22:21" |
    awk '{ ref = $1; sub(/^[^ ]+ /, ""); if (ref ~ /:1$/ && NR > 1) print ""; print }' > "$data/kjv.txt.tmp"
  mv "$data/kjv.txt.tmp" "$data/kjv.txt"
fi
[ -s "$data/tokenizer.json" ] || "$dtrain" tokenizer train --vocab-size 4096 --out "$data/tokenizer.json" "$data/kjv.txt"
[ -s "$data/val_000000.bin" ] ||
  "$dtrain" data prepare --tokenizer "$data/tokenizer.json" --out "$data" --val-fraction 0.02 --doc-separator blank-lines "$data/kjv.txt"

"$dtrain" train configs/quickstart.toml "$@"

echo
"$dtrain" eval --checkpoint runs/quickstart/checkpoints --data "$data" --seq-len 256 --batches 10
for prompt in "And God said" "Blessed are the" "In the beginning"; do
  echo
  "$dtrain" generate --checkpoint runs/quickstart/checkpoints --tokenizer "$data/tokenizer.json" \
    --prompt "$prompt" --max-tokens 60 --temperature 0.8 --top-k 40 --seed 1
done

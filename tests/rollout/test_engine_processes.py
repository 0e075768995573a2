"""An engine's shutdown sees its processes gone and removes the shared memory they could not unlink
(services/rollout/engine_processes.py), with real processes mapping real /dev/shm segments."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psutil

from services.rollout.engine_processes import Footprint, mapped_segments, release

HOLDER = """
import mmap, sys, time
with open(sys.argv[1], "r+b") as fh:
    view = mmap.mmap(fh.fileno(), 4096)
    print("mapped", flush=True)
    if sys.argv[2] == "ignore-term":
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
"""


def segment() -> Path:
    path = Path("/dev/shm") / f"psm_reelrltest_{uuid.uuid4().hex[:8]}"
    path.write_bytes(b"\0" * 4096)
    return path


def holder(path: Path, mode: str = "plain") -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), mode], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "mapped"
    return proc


def test_a_killed_engines_segment_is_removed_once_its_processes_are_gone():
    path = segment()
    proc = holder(path)
    try:
        found = mapped_segments([proc.pid])
        assert found == {path}
        footprint = Footprint([psutil.Process(proc.pid)], found)
        proc.kill()  # as vLLM does to a core that does not stop in time: nobody unlinks
        proc.wait(10)
        assert path.exists()
        release(footprint, grace_s=5)
        assert not path.exists()
    finally:
        proc.kill()
        path.unlink(missing_ok=True)


def test_a_process_that_outlives_the_grace_period_is_killed_and_a_segment_still_mapped_is_kept():
    mine, shared = segment(), segment()
    stubborn = holder(mine, "ignore-term")
    other = holder(shared)  # not the engine's: maps a segment the footprint also names
    try:
        footprint = Footprint([psutil.Process(stubborn.pid)], {mine, shared})
        release(footprint, grace_s=1)
        assert stubborn.wait(10) is not None, "the stubborn process was killed"
        assert not mine.exists()
        assert shared.exists(), "a segment another live process maps is left alone"
        assert other.poll() is None
    finally:
        for proc in (stubborn, other):
            proc.kill()
        for path in (mine, shared):
            path.unlink(missing_ok=True)

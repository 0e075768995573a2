"""The processes an engine start made and the shared memory they map: what its shutdown must see gone.

vLLM's engine core and workers talk through ``/dev/shm/psm_*`` segments, which their owners unlink as
they exit. On a loaded machine vLLM's shutdown stops waiting and kills them first, so the segment
(160 MiB and more) outlives them. :func:`release` therefore waits for the engine's own processes to
end (killing what is left after the grace period), then unlinks the engine's segments that no process
maps any more.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)
SHM = Path("/dev/shm")
PREFIXES = ("psm_",)


def mapped_segments(pids: list[int]) -> set[Path]:
    """The engine segments these processes map."""
    found: set[Path] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(str(SHM) + "/"):
                path = Path(parts[5].removesuffix(" (deleted)"))
                if path.name.startswith(PREFIXES):
                    found.add(path)
    return found


@dataclass
class Footprint:
    """One engine's processes (its engine cores and their workers) and the segments they map."""

    processes: list[psutil.Process] = field(default_factory=list)
    segments: set[Path] = field(default_factory=set)


def core_client(engine: Any) -> Any:
    """The engine-core client of a started ``vllm.LLM`` or ``AsyncLLM``."""
    if (llm_engine := getattr(engine, "llm_engine", None)) is not None:
        return llm_engine.engine_core
    return getattr(engine, "engine_core", None)


def footprint(engine: Any) -> Footprint:
    """What a started engine runs: the engine-core processes vLLM's process manager holds, their
    workers, and the segments they map. Empty for an in-process core (nothing of its own to stop)."""
    resources = getattr(core_client(engine), "resources", None)
    manager = getattr(resources, "engine_manager", None)
    cores = [p.pid for p in getattr(manager, "processes", []) if p.pid is not None]
    processes: list[psutil.Process] = []
    for pid in cores:
        with contextlib.suppress(psutil.Error):
            core = psutil.Process(pid)
            processes += [core, *core.children(recursive=True)]
    return Footprint(processes, mapped_segments([p.pid for p in processes]))


def release(footprint: Footprint, grace_s: float = 30.0) -> None:
    """Wait up to ``grace_s`` for the engine's processes to end, kill the rest, then unlink its
    segments that are still on disk and mapped by nobody (their owners can no longer do it)."""
    _, alive = psutil.wait_procs(footprint.processes, timeout=grace_s)
    for process in alive:
        log.warning(
            "engine process %d did not exit within %.0f s of shutdown: killing it", process.pid, grace_s
        )
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    left = [s for s in footprint.segments if s.exists()]
    if not left:
        return
    in_use = mapped_segments([p.pid for p in psutil.process_iter()])
    for segment in left:
        if segment in in_use:
            continue
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()
            log.info("removed shared-memory segment %s that the stopped engine left", segment)

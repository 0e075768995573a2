"""Engine processes die with the process that started them, even when it is killed with SIGKILL.

vLLM spawns its engine core (and that its worker) as separate processes. When the process that built
the engine dies without shutting it down (``kill -9`` of a train worker, the OOM killer), they are
re-parented to init and live on, holding gigabytes. Two guards, neither relying on vLLM:

- **A marker.** While an engine is constructed its process environment carries
  ``REELRL_ENGINE_OWNER=<pid>:<start time>`` of the owner (:func:`owner_marker`, called from
  ``services.rollout.environment``); every process vLLM spawns then inherits it, and
  ``/proc/<pid>/environ`` shows it for life. The start time tells a reused PID from the owner.
- **A watchdog process per owner**, started with the first marker: a stdlib-only script (this file,
  run with ``python -S``) that polls the owner and, once it is gone, ends every process carrying its
  marker (SIGTERM, then SIGKILL after a grace period), then exits. It runs in a session of its own, so
  killing the owner's process group does not take the watchdog with it.

A process that carries a marker whose owner is gone is an orphan of this code; :func:`sweep_orphans`
ends those, and workers call it when they start (for engines whose watchdog was killed too). Nothing
is ever judged by its name: a process without our marker is never touched.

Not ``PR_SET_PDEATHSIG``: it fires when the parent *thread* that spawned the child exits, and engines
may be built from a worker thread; nor is it inherited by the engine core's own children.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MARKER = "REELRL_ENGINE_OWNER"
POLL_S = 0.5
GRACE_S = 3.0
_PROC = Path("/proc")
_watchdogs: dict[int, subprocess.Popen] = {}  # owner pid → its watchdog (a forked child is a new owner)


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if there is no such
    process; with the pid it names one process for the machine's uptime."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2, in parentheses) may itself hold spaces and parentheses.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]


def marker_of(pid: int) -> str:
    return f"{pid}:{start_time(pid)}"


def alive(marker: str) -> bool:
    pid, _, started = marker.partition(":")
    return pid.isdigit() and start_time(int(pid)) == started and _not_zombie(int(pid))


def _not_zombie(pid: int) -> bool:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def owner_marker() -> str:
    """This process's marker, with its watchdog started (once per process)."""
    pid = os.getpid()
    marker = marker_of(pid)
    if pid not in _watchdogs:
        env = {k: v for k, v in os.environ.items() if k != MARKER}
        _watchdogs[pid] = subprocess.Popen(
            [sys.executable, "-S", str(Path(__file__).resolve()), marker],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
    return marker


def _markers() -> dict[int, str]:
    """pid → owner marker of every process of this user that carries one (others are unreadable)."""
    found = {}
    needle = f"{MARKER}=".encode()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                found[int(entry.name)] = item[len(needle) :].decode(errors="replace")
                break
    return found


def _end(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM ``pids`` (vLLM shuts down on it), SIGKILL whatever is left after ``grace_s``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_not_zombie(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _not_zombie(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return pids


def sweep_orphans(grace_s: float = GRACE_S) -> list[int]:
    """End the processes whose marker names an owner that is gone; returns their pids."""
    me = os.getpid()
    orphans = [pid for pid, marker in _markers().items() if pid != me and not alive(marker)]
    return _end(orphans, grace_s)


def watch(marker: str) -> None:
    """The watchdog: wait for the owner to go, then end what carries its marker."""
    while alive(marker):
        time.sleep(POLL_S)
    _end([pid for pid, m in _markers().items() if m == marker], GRACE_S)


if __name__ == "__main__":
    watch(sys.argv[1])


def sweep_at_worker_start(**_: object) -> None:
    """Celery ``worker_ready`` receiver of the workers that start engines (train, eval)."""
    import logging

    ended = sweep_orphans()
    if ended:
        logging.getLogger(__name__).warning(
            "ended %d engine process(es) left by a worker that died: %s", len(ended), ended
        )

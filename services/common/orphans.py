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


def _marker_in(environ: bytes) -> str | None:
    needle = f"{MARKER}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(needle):
            return item[len(needle) :].decode(errors="replace")
    return None


def _marker_of_pid(pid: int) -> str | None:
    """The marker ``pid`` carries now (None: none, gone, a zombie, or another user's)."""
    try:
        return _marker_in((_PROC / str(pid) / "environ").read_bytes())
    except OSError:
        return None


def _markers() -> dict[int, str]:
    """pid → owner marker of every process of this user that carries one (others are unreadable)."""
    found = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            marker = _marker_of_pid(int(entry.name))
            if marker is not None:
                found[int(entry.name)] = marker
    return found


def _signal_marked(pid: int, marker: str, sig: int) -> bool:
    """Send ``sig`` to ``pid`` only while it still carries ``marker``: between the listing and the
    signal (the grace period above all) the process may have exited and its PID gone to another
    process, which carries no such marker. A pidfd pins the process checked to the one signalled."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd_open (kernel before 5.3): check, then signal by pid
        if _marker_of_pid(pid) != marker:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        return True
    try:
        if _marker_of_pid(pid) != marker:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def _end(found: dict[int, str], grace_s: float) -> list[int]:
    """SIGTERM each pid of ``found`` (pid → the marker it was listed with; vLLM shuts down on it),
    SIGKILL whichever still carries its marker after ``grace_s``. Returns the pids signalled."""
    ended = [pid for pid, marker in found.items() if _signal_marked(pid, marker, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    # a zombie's environ reads empty: it counts as gone
    while time.monotonic() < deadline and any(_marker_of_pid(p) == found[p] for p in ended):
        time.sleep(0.1)
    for pid in ended:
        _signal_marked(pid, found[pid], signal.SIGKILL)
    return ended


def sweep_orphans(grace_s: float = GRACE_S) -> list[int]:
    """End the processes whose marker names an owner that is gone; returns their pids."""
    me = os.getpid()
    return _end({pid: m for pid, m in _markers().items() if pid != me and not alive(m)}, grace_s)


def watch(marker: str) -> None:
    """The watchdog: wait for the owner to go, then end what carries its marker."""
    while alive(marker):
        time.sleep(POLL_S)
    _end({pid: m for pid, m in _markers().items() if m == marker}, GRACE_S)


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

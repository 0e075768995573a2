"""Processes carrying an engine owner's marker end when the owner dies, even by SIGKILL; a sweep ends
those whose owner is gone. Only the processes these tests start are judged."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from services.common.orphans import MARKER, alive, marker_of, sweep_orphans

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _gone(pids, within_s=20.0):
    """True once none of ``pids`` runs (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        running = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if not running:
            return True
        time.sleep(0.2)
    return False


def _kill_all(pids):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_markers_tell_a_reused_pid_from_its_owner():
    me = marker_of(os.getpid())
    assert alive(me)
    pid, _, started = me.partition(":")
    assert not alive(f"{pid}:{int(started) + 1}")  # same pid, another process
    assert not alive("not-a-marker")


def test_a_sweep_ends_marked_processes_whose_owner_is_gone_and_only_those():
    dead = subprocess.Popen(SLEEPER)
    dead_marker = marker_of(dead.pid)
    dead.kill()
    dead.wait()
    orphan = subprocess.Popen(SLEEPER, env={**os.environ, MARKER: dead_marker})
    owned = subprocess.Popen(SLEEPER, env={**os.environ, MARKER: marker_of(os.getpid())})  # owner: us
    unmarked = subprocess.Popen(SLEEPER)
    try:
        time.sleep(0.3)  # the interpreters have started: their environ is readable
        swept = sweep_orphans(grace_s=1.0)
        # a worker another test session starts on this machine sweeps at its start too, and may have
        # ended the orphan first (it is then a zombie of ours, not listed): what counts is that it ends
        assert orphan.pid in swept or orphan.poll() is not None, "the orphan was left running"
        assert owned.pid not in swept and unmarked.pid not in swept
        assert orphan.wait(timeout=10) is not None
        assert owned.poll() is None and unmarked.poll() is None
    finally:
        _kill_all([orphan.pid, owned.pid, unmarked.pid])
        for p in (orphan, owned, unmarked):
            p.wait()


def test_a_pid_reused_after_the_listing_is_not_signalled(monkeypatch):
    """The sweep lists a marked orphan, which exits before its signal; its PID now names another
    process, without our marker. That process is left alone (before: signalled by the bare PID)."""
    import services.common.orphans as orphans

    dead = subprocess.Popen(SLEEPER)
    dead_marker = marker_of(dead.pid)
    dead.kill()
    dead.wait()
    reused = subprocess.Popen(SLEEPER)  # stands for the process that got the listed orphan's PID
    try:
        time.sleep(0.3)
        monkeypatch.setattr(orphans, "_markers", lambda: {reused.pid: dead_marker})  # the stale listing
        assert sweep_orphans(grace_s=0.5) == []
        time.sleep(0.3)
        assert reused.poll() is None, "a process that does not carry the marker was signalled"
    finally:
        _kill_all([reused.pid])
        reused.wait()


OWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from services.common.orphans import MARKER, owner_marker
    os.environ[MARKER] = owner_marker()
    # a child, and a grandchild through it: as vLLM's engine core and its worker
    child = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
        " time.sleep(120)"])
    print("ready", flush=True)
    time.sleep(120)
    """
)


def test_what_an_owner_started_dies_with_it_on_sigkill():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        started = [p.pid for p in psutil.Process(owner.pid).children(recursive=True)]
        assert len(started) == 3  # the watchdog, the child, the grandchild
        owner.kill()
        owner.wait()
        assert _gone(started), [p for p in started if psutil.pid_exists(p)]
    finally:
        _kill_all([owner.pid, *started])
        owner.wait()


def test_a_starting_worker_sweeps_orphans():
    from celery.signals import worker_ready

    # the train and eval workers import these; each connects the sweep to worker_ready
    import services.eval.tasks
    import services.trainer.tasks  # noqa: F401

    dead = subprocess.Popen(SLEEPER)
    dead_marker = marker_of(dead.pid)
    dead.kill()
    dead.wait()
    orphan = subprocess.Popen(SLEEPER, env={**os.environ, MARKER: dead_marker})
    try:
        time.sleep(0.3)
        worker_ready.send(sender=None)  # what Celery sends once the worker is up
        assert orphan.wait(timeout=10) is not None
    finally:
        _kill_all([orphan.pid])
        orphan.wait()

"""Symbolic equivalence (math-verify) under a hard time limit, safe to call from any thread.

math-verify limits itself with ``signal.alarm``, which works only in a main thread, and a Python signal
cannot interrupt a long C-level computation (a huge integer power). So every check runs in a small pool of
helper processes (services/reward/metrics/mathhelper.py): the helper arms its own timer in its main thread,
and the caller waits on the pipe with a slightly longer deadline and kills a helper that does not answer.
A pathological expression costs at most one helper restart, never a stuck worker.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import selectors
import subprocess
import sys
import threading
import time
from collections import OrderedDict

log = logging.getLogger(__name__)

# The caller waits this much longer than the helper's own timer before it kills the helper.
_KILL_GRACE_S = 1.0
_START_TIMEOUT_S = 120.0


class MathTimeout(Exception):
    """The equivalence check did not finish within its time limit."""


class _HelperGaveUp(MathTimeout):
    """The helper's own timer fired: it is still healthy and can be reused."""


class HelperDied(RuntimeError):
    """The helper process exited or stopped answering coherently."""


class _Helper:
    """One ``python -m services.reward.metrics.mathhelper`` process speaking JSON lines.

    A plain subprocess rather than multiprocessing: nothing re-imports the caller's ``__main__``, and
    nothing is forked from a threaded server.
    """

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.reward.metrics.mathhelper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._buffer = b""
        try:
            ready = self._read_line(time.monotonic() + _START_TIMEOUT_S)
        except (MathTimeout, HelperDied) as exc:
            self.kill()
            raise HelperDied(f"math helper process did not start: {exc}") from None
        if ready.get("status") != "ready":
            self.kill()
            raise HelperDied(f"math helper process sent {ready!r} instead of ready")

    def _read_line(self, deadline: float) -> dict:
        stdout = self.process.stdout
        assert stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    raise MathTimeout("no answer in time")
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    raise HelperDied(f"math helper exited with code {self.process.poll()}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def check(self, gold: str, pred: str, timeout_s: float) -> bool:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps({"gold": gold, "pred": pred, "timeout_s": timeout_s}) + "\n").encode())
            stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise HelperDied(f"math helper pipe closed: {exc}") from None
        reply = self._read_line(time.monotonic() + timeout_s + _KILL_GRACE_S)
        if reply.get("status") == "timeout":
            raise _HelperGaveUp(f"gave up after {timeout_s:.1f}s")
        return bool(reply["same"])

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class MathChecker:
    """Up to ``workers`` helper processes, started on first use and replaced when killed.

    Verdicts (timeouts included) are remembered for the last ``cache_size`` (gold, pred) pairs: the
    responses of one GRPO group often end in the same expression, and a pathological one repeated across
    the group must not cost the time limit again each time.
    """

    def __init__(self, workers: int = 1, cache_size: int = 4096) -> None:
        if workers < 1:
            raise ValueError(f"math checker needs at least 1 worker, got {workers}")
        self.workers = workers
        self._cache: OrderedDict[tuple[str, str], bool | None] = OrderedDict()
        self._cache_size = cache_size
        self._idle: queue.SimpleQueue[_Helper] = queue.SimpleQueue()
        self._alive: set[_Helper] = set()
        self._started = 0  # helpers alive or being started
        self._lock = threading.Lock()

    @property
    def pids(self) -> list[int]:
        """Process ids of the live helpers."""
        with self._lock:
            return sorted(h.process.pid for h in self._alive)

    def _new_helper(self) -> _Helper:
        helper = _Helper()
        with self._lock:
            self._alive.add(helper)
        return helper

    def _take(self) -> _Helper:
        with self._lock:
            start_new = self._idle.empty() and self._started < self.workers
            if start_new:
                self._started += 1
        if start_new:
            try:
                return self._new_helper()
            except BaseException:
                with self._lock:
                    self._started -= 1
                raise
        return self._idle.get()

    def _discard(self, helper: _Helper) -> None:
        helper.kill()
        with self._lock:
            self._alive.discard(helper)
            self._started -= 1

    def equivalent(self, gold: str, pred: str, timeout_s: float) -> bool:
        """True iff math-verify finds ``pred`` equivalent to ``gold``; raises MathTimeout past the limit."""
        key = (gold, pred)
        with self._lock:
            known = self._cache.get(key, ...)
            if known is not ...:
                self._cache.move_to_end(key)
        if known is None:
            raise MathTimeout("timed out before (cached verdict)")
        if known is not ...:
            return bool(known)
        try:
            same = self._check(gold, pred, timeout_s)
        except MathTimeout:
            self._remember(key, None)
            raise
        self._remember(key, same)
        return same

    def _remember(self, key: tuple[str, str], verdict: bool | None) -> None:
        with self._lock:
            self._cache[key] = verdict
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _check(self, gold: str, pred: str, timeout_s: float, retries: int = 1) -> bool:
        helper = self._take()
        try:
            same = helper.check(gold, pred, timeout_s)
        except _HelperGaveUp:
            self._idle.put(helper)
            raise
        except MathTimeout:
            log.warning("math check timed out after %.1fs; restarting its helper: %.80r", timeout_s, pred)
            self._discard(helper)
            raise
        except HelperDied as exc:
            self._discard(helper)
            if retries <= 0:
                raise
            log.warning("math helper died (%s); retrying on a fresh one", exc)
            return self._check(gold, pred, timeout_s, retries - 1)
        self._idle.put(helper)
        return same

    def warm(self) -> None:
        """Start every helper now, so the first request does not wait for math-verify's import."""
        helpers = []
        with self._lock:
            missing = self.workers - self._started
            self._started += missing
        try:
            for _ in range(missing):
                helpers.append(self._new_helper())
        finally:
            with self._lock:
                self._started -= missing - len(helpers)
            for helper in helpers:
                self._idle.put(helper)

    def close(self) -> None:
        with self._lock:
            while not self._idle.empty():
                helper = self._idle.get()
                helper.kill()
                self._alive.discard(helper)
                self._started -= 1


_checker: MathChecker | None = None
_checker_lock = threading.Lock()


def get_math_checker(workers: int = 1) -> MathChecker:
    """The process-wide checker (created with ``workers`` helpers on first call)."""
    global _checker
    with _checker_lock:
        if _checker is None:
            _checker = MathChecker(workers)
        return _checker

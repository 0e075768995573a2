"""Symbolic equivalence (math-verify) under a hard time limit, safe to call from any thread.

math-verify limits itself with ``signal.alarm``, which works only in a main thread, and a Python signal
cannot interrupt a long C-level computation (a huge integer power). So every check runs in a small pool of
helper processes (services/reward/metrics/mathhelper.py): the helper arms its own timer in its main thread,
and the caller waits on the pipe with a slightly longer deadline and kills a helper that does not answer.
A pathological expression costs at most one helper restart, never a stuck worker; the absurd ones
(services/reward/metrics/mathguard.py) never reach a helper at all. The pool is bounded, and each check
runs under its own time limit and its request's deadline.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from services.reward.config import default_math_workers
from services.reward.metrics.mathguard import refusal

log = logging.getLogger(__name__)

# The caller waits this much longer than the helper's own timer before it kills the helper.
_KILL_GRACE_S = 1.0
_START_TIMEOUT_S = 120.0


class MathCheckError(Exception):
    """No verdict for this pair: the item scores 0 with a note saying why."""


class MathTimeout(MathCheckError):
    """The equivalence check did not finish within its time limit (or its request's deadline)."""


class _HelperGaveUp(MathTimeout):
    """The helper's own timer fired: it is still healthy and can be reused."""


class _CutShort(MathTimeout):
    """Timed out with less than the full limit, because of the request's deadline: not remembered."""


class ExpressionRefused(MathCheckError):
    """A cheap pre-check found the expression absurd (services/reward/metrics/mathguard.py)."""


class HelperDied(MathCheckError):
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
    """A bounded pool of up to ``workers`` helper processes, started on first use and replaced when killed.

    Many threads may call ``equivalent`` at once: each takes an idle helper (or starts one while fewer
    than ``workers`` are alive) and waits for one no longer than its deadline, so a few slow checks hold
    at most the helpers they occupy, never the items queued behind them past their deadline.

    Before any helper sees a pair, ``mathguard.refusal`` refuses absurd expressions (exponent towers,
    numbers of millions of digits, huge expansions): those raise ExpressionRefused in microseconds.

    Verdicts (timeouts at the full limit included) are remembered for the last ``cache_size`` (gold, pred)
    pairs: the responses of one GRPO group often end in the same expression, and a pathological one
    repeated across the group must not cost the time limit again each time.
    """

    def __init__(self, workers: int = 1, cache_size: int = 4096) -> None:
        self.workers = _check_workers(workers)
        self.sent = 0  # checks handed to a helper process (refused and cached pairs never are)
        self._cache: OrderedDict[tuple[str, str], bool | None] = OrderedDict()
        self._cache_size = cache_size
        self._idle: list[_Helper] = []
        self._alive: set[_Helper] = set()
        self._started = 0  # helpers alive or being started
        self._lock = threading.Lock()
        self._available = threading.Condition(self._lock)  # an idle helper, or room to start one

    @property
    def pids(self) -> list[int]:
        """Process ids of the live helpers."""
        with self._lock:
            return sorted(h.process.pid for h in self._alive)

    def resize(self, workers: int) -> None:
        """Change the pool's bound; extra helpers are stopped as they come back idle."""
        with self._available:
            self.workers = _check_workers(workers)
            while self._idle and self._started > self.workers:
                self._retire(self._idle.pop())
            self._available.notify_all()

    def _new_helper(self) -> _Helper:
        helper = _Helper()
        with self._lock:
            self._alive.add(helper)
        return helper

    def _take(self, deadline: float | None) -> _Helper:
        with self._available:
            while not self._idle and self._started >= self.workers:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise _CutShort(f"all {self.workers} math helpers stayed busy until the request deadline")
                self._available.wait(remaining)
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            return self._new_helper()
        except BaseException:
            with self._available:
                self._started -= 1
                self._available.notify()
            raise

    def _give_back(self, helper: _Helper) -> None:
        with self._available:
            if self._started > self.workers:  # the pool was shrunk while this helper was busy
                self._retire(helper)
            else:
                self._idle.append(helper)
            self._available.notify()

    def _retire(self, helper: _Helper) -> None:
        # with the lock held
        helper.kill()
        self._alive.discard(helper)
        self._started -= 1

    def _discard(self, helper: _Helper) -> None:
        helper.kill()
        with self._available:
            self._alive.discard(helper)
            self._started -= 1
            self._available.notify()  # a waiter may start a replacement

    def equivalent(self, gold: str, pred: str, timeout_s: float, deadline: float | None = None) -> bool:
        """True iff math-verify finds ``pred`` equivalent to ``gold``.

        ``timeout_s`` bounds this check; ``deadline`` (``time.monotonic()`` value) bounds its request: the
        check gets ``min(timeout_s, deadline - now)``. Raises ExpressionRefused for an absurd expression,
        MathTimeout past either limit, HelperDied when the helper failed twice.
        """
        key = (gold, pred)
        with self._lock:
            known = self._cache.get(key, ...)
            if known is not ...:
                self._cache.move_to_end(key)
        if known is None:
            raise MathTimeout("timed out before (cached verdict)")
        if known is not ...:
            return bool(known)
        for role, expr in (("truth", gold), ("answer", pred)):
            reason = refusal(expr)
            if reason is not None:
                raise ExpressionRefused(f"{role}: {reason}")
        if deadline is not None and deadline <= time.monotonic():
            raise _CutShort("the request deadline passed before this check started")
        try:
            same = self._check(gold, pred, timeout_s, deadline)
        except _CutShort:
            raise  # with its full limit, the pair may pass another time
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

    def _check(
        self, gold: str, pred: str, timeout_s: float, deadline: float | None, retries: int = 1
    ) -> bool:
        helper = self._take(deadline)
        limit = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if limit <= 0:
            self._give_back(helper)
            raise _CutShort("the request deadline passed while waiting for a math helper")
        with self._lock:
            self.sent += 1
        try:
            same = helper.check(gold, pred, limit)
        except MathTimeout as exc:
            if isinstance(exc, _HelperGaveUp):
                self._give_back(helper)  # its own timer fired: healthy
            else:
                log.warning("math check timed out after %.1fs; restarting its helper: %.80r", limit, pred)
                self._discard(helper)
            if limit < timeout_s:
                raise _CutShort(f"{exc}, cut short by the request deadline") from None
            raise
        except HelperDied as exc:
            self._discard(helper)
            if retries <= 0:
                raise
            log.warning("math helper died (%s); retrying on a fresh one", exc)
            return self._check(gold, pred, timeout_s, deadline, retries - 1)
        self._give_back(helper)
        return same

    def warm(self) -> None:
        """Start every helper now (side by side), so the first request does not wait for math-verify's
        import. Raises HelperDied if one fails to start; those that started stay in the pool."""
        with self._lock:
            missing = max(self.workers - self._started, 0)
            self._started += missing
        if not missing:
            return
        with ThreadPoolExecutor(missing, thread_name_prefix="math-helper-start") as starters:
            attempts = [starters.submit(self._new_helper) for _ in range(missing)]
        helpers = [a.result() for a in attempts if a.exception() is None]
        failures = [a.exception() for a in attempts if a.exception() is not None]
        with self._available:
            self._started -= len(failures)
            self._idle.extend(helpers)
            self._available.notify_all()
        if failures:
            raise failures[0]

    def close(self) -> None:
        """Stop the idle helpers."""
        with self._available:
            while self._idle:
                self._retire(self._idle.pop())


def _check_workers(workers: int) -> int:
    if workers < 1:
        raise ValueError(f"math checker needs at least 1 worker, got {workers}")
    return workers


_checker: MathChecker | None = None
_checker_lock = threading.Lock()


def get_math_checker(workers: int | None = None) -> MathChecker:
    """The process-wide checker; ``workers`` (when given) sets its pool's bound, growing or shrinking it."""
    global _checker
    with _checker_lock:
        if _checker is None:
            _checker = MathChecker(workers or default_math_workers())
        elif workers is not None and workers != _checker.workers:
            _checker.resize(workers)
        return _checker

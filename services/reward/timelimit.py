"""A time limit on a block of pure-Python work in whatever thread runs it: scoring one item.

Scoring runs in the caller's thread (an anyio worker thread in the service, the trainer's or evaluator's
thread in-process), where ``signal.alarm`` cannot reach (main thread only) and nothing can be killed (only
processes can). So one watchdog thread per process holds the deadlines of the blocks running now, and
when one passes it raises ``_Expired`` in that block's thread (``PyThreadState_SetAsyncExc``); the
interpreter raises it at that thread's next bytecode boundary, and the block's exit turns it into
``ItemTimeout``. A single long C call (one regex search, one ``ast.parse``) finishes before the exception
can be raised; the input bounds keep each of those linear in the input (docs/rewards.md, "Bounds").

``_Expired`` derives from BaseException, so a scorer's ``except Exception`` / ``except ValueError`` does not
swallow it. It is raised at most once per block, only while the block is running: leaving the block
withdraws its deadline and clears an exception sent but not yet raised. Do not put waits on other threads
or processes inside a block (the math helper pool): an exception landing in the middle of the pool's
bookkeeping would leak a helper. Those waits have their own limits.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
from types import TracebackType

from services.reward.errors import ItemTimeout


class _Expired(BaseException):
    """Raised in a thread whose block ran past its deadline; becomes ItemTimeout as the block exits."""


def _send(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``thread_id`` at its next bytecode boundary (None: clear a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


class _Deadline:
    __slots__ = ("at", "fired", "thread_id")

    def __init__(self, seconds: float) -> None:
        self.thread_id = threading.get_ident()
        self.at = time.monotonic() + seconds
        self.fired = False


class _Watchdog:
    """One daemon thread per process, asleep until the earliest deadline of the blocks running now."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: set[_Deadline] = set()
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def add(self, deadline: _Deadline) -> None:
        with self._changed:
            self._running.add(deadline)
            if self._thread is None or not self._thread.is_alive():  # first use, or a forked child
                self._thread = threading.Thread(target=self._watch, name="reward-item-deadline", daemon=True)
                self._thread.start()
            if deadline.at < self._wake_at:
                self._changed.notify()

    def remove(self, deadline: _Deadline) -> bool:
        """Withdraw ``deadline``; True when it had fired (an exception sent and not yet raised is cleared)."""
        with self._changed:
            self._running.discard(deadline)
            if deadline.fired:
                _send(deadline.thread_id, None)
            return deadline.fired

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for deadline in self._running:
                    if not deadline.fired and deadline.at <= now:
                        deadline.fired = True
                        _send(deadline.thread_id, _Expired)
                self._wake_at = min((d.at for d in self._running if not d.fired), default=math.inf)
                self._changed.wait(None if self._wake_at == math.inf else self._wake_at - now)


_watchdog = _Watchdog()


def _after_fork_in_child() -> None:
    # A fork copies the Condition's lock as it was (held, if the watchdog thread was inside it) and no
    # thread: the child starts over with a fresh watchdog and none of the parent's deadlines.
    global _watchdog
    _watchdog = _Watchdog()


os.register_at_fork(after_in_child=_after_fork_in_child)


class time_limit:
    """``with time_limit(seconds): …`` raises ItemTimeout when the block runs longer than ``seconds``
    (None: no limit). The block is stopped at the next bytecode boundary after the deadline."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._deadline: _Deadline | None = None

    def __enter__(self) -> time_limit:
        if self.seconds is None:
            return self
        if self.seconds <= 0:
            raise ItemTimeout(self._message())
        self._deadline = _Deadline(self.seconds)
        try:
            _watchdog.add(self._deadline)
            return self
        except _Expired:  # a deadline shorter than the bookkeeping: the block never starts
            _watchdog.remove(self._deadline)
            raise ItemTimeout(self._message()) from None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._deadline is None:
            return False
        try:
            fired = _watchdog.remove(self._deadline)
        except _Expired:  # sent just before removal and raised in it: removal is idempotent
            fired = _watchdog.remove(self._deadline)
        if fired or exc_type is _Expired:
            raise ItemTimeout(self._message()) from None
        return False

    def _message(self) -> str:
        return f"took longer than {self.seconds:g} s"

"""time_limit: a busy block is stopped at its deadline in its own thread; a finished one never is."""

import threading
import time

import pytest

from services.reward.errors import ItemTimeout
from services.reward.timelimit import time_limit


def _busy(seconds: float) -> int:
    """Pure-Python work for ``seconds`` (a cap the time limits below stop long before), swallowing what
    a careless scorer would swallow."""
    stop, steps = time.monotonic() + seconds, 0
    while time.monotonic() < stop:
        try:
            steps += 1
        except Exception:  # the limit must get through a scorer's broad except
            continue
    return steps


def test_a_busy_block_is_stopped_at_its_deadline():
    started = time.monotonic()
    with pytest.raises(ItemTimeout, match=r"took longer than 0\.2 s"), time_limit(0.2):
        _busy(60)
    assert time.monotonic() - started < 10  # 0.2 s, with a generous margin for a loaded machine


def test_blocks_in_several_threads_are_stopped_each_at_its_own_deadline():
    stopped: dict[int, bool] = {}

    def work(index: int) -> None:
        try:
            with time_limit(0.2 if index % 2 else 60):
                _busy(60 if index % 2 else 0.5)
            stopped[index] = False
        except ItemTimeout:
            stopped[index] = True

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert stopped == {0: False, 1: True, 2: False, 3: True}


def test_a_finished_block_is_never_interrupted_afterwards():
    for _ in range(2000):  # deadlines that pass just as the block ends, or just after
        try:
            with time_limit(0.0005):
                sum(range(2000))
        except ItemTimeout:
            pass
    _busy(0.2)  # any exception sent and not withdrawn would be raised here


def test_no_limit_and_an_exhausted_limit():
    with time_limit(None):
        assert _busy(0.01) > 0
    with pytest.raises(ItemTimeout), time_limit(0):
        pytest.fail("a block with no time left must not start")


def test_a_forked_child_gets_a_fresh_watchdog():
    """A fork copies the watchdog's lock as it was (held, if its thread was inside) and not its thread:
    the child must start over, or its first time limit could wait forever on that lock."""
    import os

    from services.reward import timelimit

    with timelimit.time_limit(30):  # the parent's watchdog running, a deadline pending
        parent = timelimit._watchdog
        pid = os.fork()
        if pid == 0:  # the child: a new watchdog, no inherited deadline, and limits work
            ok = timelimit._watchdog is not parent and not timelimit._watchdog._running
            try:
                with timelimit.time_limit(0.05):
                    while True:
                        pass
            except timelimit.ItemTimeout:
                os._exit(0 if ok else 2)
            os._exit(3)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

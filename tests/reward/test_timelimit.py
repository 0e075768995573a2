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

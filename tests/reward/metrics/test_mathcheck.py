"""The time-limited math-verify checker: real helper processes, from threads, killed when stuck."""

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.reward.metrics.mathcheck import MathChecker, MathTimeout


@pytest.fixture(scope="module")
def checker():
    checker = MathChecker(workers=1)
    yield checker
    checker.close()


@pytest.mark.parametrize(
    ("gold", "pred", "same"),
    [
        (r"\frac{1}{2}", "0.5", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("x^2+2x+1", "(x+1)^3", False),
        (r"\sqrt{2}", "1.414214", True),  # math-verify compares floats to 6 decimals
        (r"2\pi", "6.283185", True),
        (r"\{1,2\}", r"\{2,1\}", True),  # sets are unordered
        ("3", "4", False),
    ],
)
def test_equivalence(checker, gold, pred, same):
    assert checker.equivalent(gold, pred, timeout_s=10.0) is same


def test_works_from_worker_threads(checker):
    # math-verify's own signal timeout would raise in a thread; the helper process makes this safe
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(lambda k: checker.equivalent(f"{k}/4", f"{k * 25}/100", 10.0), range(1, 9)))
    assert verdicts == [True] * 8


@pytest.mark.slow
def test_pathological_expression_times_out_and_the_verdict_is_remembered(checker):
    with pytest.raises(MathTimeout):
        checker.equivalent("1", "10^{10^{10}}", timeout_s=0.5)
    with pytest.raises(MathTimeout, match="cached"):
        checker.equivalent("1", "10^{10^{10}}", timeout_s=0.5)
    assert checker.equivalent("2", "1+1", timeout_s=10.0) is True  # the helper is still usable


@pytest.mark.slow
def test_unresponsive_helper_is_killed_and_replaced():
    checker = MathChecker(workers=1)
    try:
        checker.warm()
        (stuck,) = checker.pids
        os.kill(stuck, signal.SIGSTOP)  # a helper frozen in C code answers nothing, timer or not
        with pytest.raises(MathTimeout, match="no answer"):
            checker.equivalent("1", "2-1", timeout_s=0.3)
        assert checker.pids == []
        with pytest.raises(ProcessLookupError):
            os.kill(stuck, 0)  # killed and reaped
        assert checker.equivalent("1", "3-2", timeout_s=10.0) is True
        assert checker.pids not in ([], [stuck])
    finally:
        checker.close()


def test_rejects_zero_workers():
    with pytest.raises(ValueError, match="at least 1"):
        MathChecker(workers=0)

"""The time-limited math-verify checker: real helper processes, from threads, killed when stuck."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.reward.metrics.mathcheck import ExpressionRefused, MathChecker, MathTimeout


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


# Not refused by the pre-check (a product of sums, not a sum, is raised to the power), yet sympy's
# expansion takes far longer than any limit used here (over 10 s measured).
SLOW = "((x+1)(y+1)(z+1))^{20}"


@pytest.mark.slow
def test_pathological_expression_times_out_and_the_verdict_is_remembered(checker):
    with pytest.raises(MathTimeout):
        checker.equivalent("1", SLOW, timeout_s=0.5)
    sent = checker.sent
    with pytest.raises(MathTimeout, match="cached"):
        checker.equivalent("1", SLOW, timeout_s=0.5)
    assert checker.sent == sent  # the repeat never reached a helper
    assert checker.equivalent("2", "1+1", timeout_s=10.0) is True  # the helper is still usable


@pytest.mark.parametrize(
    ("gold", "pred", "match"),
    [
        ("10", r"9^{9^{9^{9}}}", r"answer: 9\^\{9\^\{9\}\} needs about 369,693,100 digits"),
        ("10", r"2^{2^{2^{2}}}", "answer: .* power tower 4 levels high"),
        ("10", r"(10^{6})!", "answer: .* needs about 6,000,000 digits"),
        ("10", "(x+y+z+1)^{20}", "answer: .* expands into more than 500 terms"),
        ("10", "7" * 301, "answer: a number literal has 301 digits"),
        ("x" * 1001, "x", "truth: expression has 1,001 characters"),
    ],
)
def test_absurd_expressions_are_refused_before_any_helper_starts(gold, pred, match):
    fresh = MathChecker(workers=1)
    with pytest.raises(ExpressionRefused, match=match):
        fresh.equivalent(gold, pred, timeout_s=10.0)
    assert (fresh.sent, fresh.pids) == (0, [])  # sympy never saw it: no helper was even started


@pytest.mark.slow
def test_the_pool_is_bounded_and_serves_many_threads():
    pool = MathChecker(workers=2)
    try:
        with ThreadPoolExecutor(6) as threads:
            verdicts = list(
                threads.map(lambda k: pool.equivalent(f"{k}x", f"x \\cdot {k}", 10.0), range(2, 14))
            )
        assert verdicts == [True] * 12
        assert len(pool.pids) <= 2 and pool.sent == 12
        pool.resize(1)  # shrinking stops idle helpers at once
        assert len(pool.pids) <= 1
        with pytest.raises(ValueError, match="at least 1"):
            pool.resize(0)
    finally:
        pool.close()


@pytest.mark.slow
def test_a_check_waits_for_a_busy_pool_only_until_its_deadline():
    pool = MathChecker(workers=1)
    try:
        pool.warm()
        with ThreadPoolExecutor(1) as threads:
            slow = threads.submit(pool.equivalent, "1", SLOW, 3.0)
            while pool.sent == 0:  # the one helper is now busy with SLOW
                time.sleep(0.01)
            with pytest.raises(MathTimeout, match="busy until the request deadline"):
                pool.equivalent("2", "1+1", timeout_s=10.0, deadline=time.monotonic() + 0.2)
            with pytest.raises(MathTimeout):
                slow.result()
        # a verdict cut short by a deadline is not remembered as a timeout: the pair is checked again
        assert pool.equivalent("2", "1+1", timeout_s=10.0) is True
        with pytest.raises(MathTimeout, match="deadline passed before this check started"):
            pool.equivalent("3", "1+2", timeout_s=10.0, deadline=time.monotonic() - 1)
        assert pool.sent == 2
        # cut short mid-check by the deadline: not remembered, so the full limit is tried next time
        with pytest.raises(MathTimeout, match="cut short by the request deadline"):
            pool.equivalent("5", SLOW, timeout_s=10.0, deadline=time.monotonic() + 0.3)
        with pytest.raises(MathTimeout, match=r"gave up after 0\.3s$"):
            pool.equivalent("5", SLOW, timeout_s=0.3)
        assert pool.sent == 4
    finally:
        pool.close()


@pytest.mark.slow
def test_a_waiter_starts_a_replacement_when_the_busy_helper_is_killed():
    pool = MathChecker(workers=1)
    try:
        pool.warm()
        (stuck,) = pool.pids
        os.kill(stuck, signal.SIGSTOP)
        with ThreadPoolExecutor(2) as threads:
            doomed = threads.submit(pool.equivalent, "1", "2-1", 0.3)
            while pool.sent == 0:
                time.sleep(0.01)
            # waits for the only helper; when it is killed, this check must start a fresh one, not hang
            waiter = threads.submit(pool.equivalent, "4", "2+2", 10.0)
            with pytest.raises(MathTimeout, match="no answer"):
                doomed.result(timeout=60)
            assert waiter.result(timeout=120) is True
        assert stuck not in pool.pids
    finally:
        pool.close()


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

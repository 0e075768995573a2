"""Format score, weights, strict mode, components, batches and errors."""

import time

import pytest
from pydantic import ValidationError

from services.reward import (
    InvalidSample,
    ItemTimeout,
    RewardConfig,
    RewardError,
    UnknownProblemType,
    get_type,
    score,
    score_batch,
    score_items,
)
from services.reward.metrics.mathcheck import get_math_checker

MC = {"problem_type": "multiple choice", "answer": "B", "options": ["A. red", "B. blue"]}


@pytest.mark.parametrize(
    ("response", "strict", "fmt"),
    [
        ("<answer>B</answer>", False, 1.0),  # a tag whose content fits the type
        ("<answer>purple</answer>", False, 0.5),  # a tag with ill-typed content
        ("B", False, 0.0),  # no tag
        ("<answer>A</answer><answer>B</answer>", False, 0.0),  # repeated tags
        ("<think>x</think><answer>B</answer>", True, 1.0),
        ("<think>x</think>\n<answer>purple</answer>\n", True, 0.5),
        ("<answer>B</answer>", True, 0.0),  # strict: thinking required
        ("<think>x</think><answer>B</answer> trailing", True, 0.0),
        ("x</think><answer>B</answer>", True, 0.0),  # the opening tag must be in the response
    ],
)
def test_format_score(response, strict, fmt):
    assert score(MC, response, RewardConfig(strict_format=strict)).format == fmt


@pytest.mark.parametrize(
    ("w_acc", "w_fmt", "response", "overall"),
    [
        (0.9, 0.1, "<answer>B</answer>", 1.0),  # 0.9·1 + 0.1·1
        (0.9, 0.1, "<answer>A</answer>", 0.1),  # 0.9·0 + 0.1·1
        (0.9, 0.1, "B", 0.9),  # 0.9·1 + 0.1·0
        (0.5, 0.5, "<answer>purple</answer>", 0.25),  # 0.5·0 + 0.5·0.5
        (1.0, 0.0, "<answer>A</answer>", 0.0),
    ],
)
def test_overall_is_the_weighted_sum(w_acc, w_fmt, response, overall):
    result = score(MC, response, RewardConfig(w_acc=w_acc, w_fmt=w_fmt))
    assert result.overall == pytest.approx(overall)
    assert result.overall == pytest.approx(w_acc * result.accuracy + w_fmt * result.format)


def test_config_rejects_bad_weights():
    with pytest.raises(ValidationError, match="w_acc \\+ w_fmt must be > 0"):
        RewardConfig(w_acc=0, w_fmt=0)
    with pytest.raises(ValidationError):
        RewardConfig(w_acc=float("nan"))
    with pytest.raises(ValidationError):
        RewardConfig(w_fmt=-0.1)


def test_unknown_problem_type_names_the_known_ones():
    with pytest.raises(UnknownProblemType) as info:
        score({"problem_type": "astrology", "answer": "B"}, "<answer>B</answer>")
    message = str(info.value)
    assert "'astrology'" in message
    for known in ("multiple choice", "regression", "spatial-temporal grounding", "preference"):
        assert known in message


@pytest.mark.parametrize(
    ("sample", "match"),
    [
        ({"problem_type": "mcq"}, "field answer: Field required"),
        ({"problem_type": "mcq", "answer": "  "}, "no answer"),
        ({"problem_type": "mcq", "solution": "<answer>B</answer>"}, None),  # Video-R1 schema: accepted
        ({"answer": "B"}, "field problem_type"),
        ({"problem_type": "mcq", "answer": "B", "options": [{"x": 1}]}, "options must be"),
        ({"problem_type": "mcq", "answer": "B", "width": -3}, "field width"),
        ({"id": 17, "problem_type": "numerical", "answer": "lots"}, "sample '17'"),
    ],
)
def test_invalid_samples_are_explained(sample, match):
    if match is None:
        assert score(sample, "<answer>B</answer>").accuracy == 1.0
        return
    with pytest.raises(InvalidSample, match=match):
        score(sample, "<answer>B</answer>")


def test_score_batch_shares_a_groups_truth_and_keeps_order():
    group = [(MC, "<answer>B</answer>"), (MC, "<answer>A</answer>"), (MC, "no idea")]
    results = score_batch(group)
    assert [r.accuracy for r in results] == [1.0, 0.0, 0.0]
    assert [r.format for r in results] == [1.0, 1.0, 0.0]


def test_score_batch_raises_naming_the_item():
    with pytest.raises(UnknownProblemType, match="item 1: unknown problem_type 'nope'"):
        score_batch([(MC, "B"), ({"problem_type": "nope", "answer": "x"}, "B")])


def test_score_items_fails_bad_items_alone():
    results = score_items(
        [
            (MC, "<answer>B</answer>"),
            ({"problem_type": "nope", "answer": "x"}, "B"),
            ("not a dict", "B"),
            (MC, 7),
        ]
    )
    assert results[0].accuracy == 1.0 and results[0].error is None
    assert "unknown problem_type" in results[1].error
    assert "must be a JSON object" in results[2].error
    assert "response must be a string" in results[3].error
    assert all(r.overall == 0.0 for r in results[1:])


def _math(answer: str, boxed: str) -> tuple[dict, str]:
    return {"problem_type": "math", "answer": answer}, f"<answer>\\boxed{{{boxed}}}</answer>"


def test_absurd_math_answers_are_refused_without_a_helper_and_the_rest_still_score():
    # the case: towers against 10 cost 5 s each in sympy, and simple items behind them waited
    absurd = [_math("10", r"9^{9^{9^{9}}}")] * 6 + [_math("10", r"2^{2^{2^{2}}}"), _math("10", r"(10^{6})!")]
    simple = [  # pairs no other test uses, so none is a cached verdict
        _math("7", r"\sqrt{49}"),
        _math("y^2+6y+9", "(y+3)^2"),
        _math("11", r"\sqrt{121}"),
        _math("3", "3"),  # decided in-process
    ]
    checker = get_math_checker()
    sent = checker.sent
    results = score_items(absurd + simple, RewardConfig(math_workers=2))
    for result in results[: len(absurd)]:
        assert (result.accuracy, result.format, result.error) == (0.0, 1.0, None)
        assert result.note.startswith("math equivalence check refused (answer: ")
    assert "369,693,100 digits" in results[0].note and "power tower 4 levels" in results[6].note
    assert [r.accuracy for r in results[len(absurd) :]] == [1.0, 1.0, 1.0, 1.0]
    assert checker.sent - sent == 3  # only the three simple symbolic pairs reached sympy


def test_score_batch_scores_math_on_the_pool_in_order():
    items = [_math(f"{k}", rf"\sqrt{{{k * k}}}") for k in range(13, 19)] + [(MC, "<answer>A</answer>")]
    results = score_batch(items, RewardConfig(math_workers=3))
    assert [r.accuracy for r in results] == [1.0] * 6 + [0.0]
    assert [r.extracted for r in results[:6]] == [rf"\sqrt{{{k * k}}}" for k in range(13, 19)]


def test_an_absurd_math_truth_is_an_invalid_sample():
    with pytest.raises(InvalidSample, match=r"math answer is too absurd to check: .*power tower 4 levels"):
        score({"problem_type": "math", "answer": r"2^{2^{2^{2}}}"}, "<answer>1</answer>")


# Not refused by the pre-check, yet far slower than any limit here (over 10 s measured).
SLOW = "((x+1)(y+1)(z+1))^{20}"


@pytest.mark.slow
def test_slow_checks_run_beside_simple_ones_within_the_batch_deadline():
    get_math_checker(3).warm()  # helper start-up must not eat the deadline
    slow = [_math("1", SLOW), _math("2", SLOW)]
    simple = [_math("8", r"\sqrt{64}"), _math("x^2-4", "(x-2)(x+2)")]
    # One after another, the two slow checks alone would use the whole 4 s deadline (2.5 s each) and the
    # simple items behind them would get none: they score only because they run beside the slow ones.
    config = RewardConfig(math_workers=3, math_timeout_s=2.5, math_deadline_s=4.0)
    results = score_items(slow + simple, config)
    assert [r.accuracy for r in results] == [0.0, 0.0, 1.0, 1.0]
    assert all("timed out" in r.note for r in results[:2])
    assert [r.note for r in results[2:]] == [None, None]


@pytest.mark.slow
def test_the_batch_deadline_bounds_many_slow_checks():
    get_math_checker(2).warm()
    slow = [_math(str(k), SLOW) for k in range(10, 14)]  # pairs no other test uses: no cached verdicts
    config = RewardConfig(math_workers=2, math_timeout_s=5.0, math_deadline_s=2.0)
    started = time.monotonic()
    results = score_items([*slow, _math("5", "5")], config)
    elapsed = time.monotonic() - started
    assert [r.accuracy for r in results] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert all("timed out" in r.note and "deadline" in r.note for r in results[2:4])  # never got a helper
    # a deadline check, not a benchmark: one after another these cost 4 × 5 s
    assert elapsed < 10.0


def _spin(*_args):
    """A scorer stuck in pure-Python work (a parser gone quadratic): 60 s unless a time limit stops it."""
    stop = time.monotonic() + 60
    while time.monotonic() < stop:
        pass
    return 1.0


OCR = {"problem_type": "ocr", "answer": "stop here"}


def test_an_item_past_item_timeout_s_fails_alone_within_the_limit(monkeypatch):
    monkeypatch.setattr(get_type("ocr"), "accuracy", _spin)
    items = [(OCR, "stop here"), (MC, "<answer>B</answer>"), (dict(OCR), "stop"), (MC, "A")]
    started = time.monotonic()
    results = score_items(items, RewardConfig(item_timeout_s=0.5))
    elapsed = time.monotonic() - started
    for index in (0, 2):
        stuck = results[index]
        assert (stuck.overall, stuck.problem_type) == (0.0, "ocr")
        assert stuck.error == f"item {index}: scoring took longer than item_timeout_s=0.5 s; stopped"
    assert [(r.accuracy, r.error) for r in results[1::2]] == [(1.0, None), (0.0, None)]
    assert elapsed < 15  # two items stopped at 0.5 s each, with a generous margin (unstopped: 120 s)


def test_score_and_score_batch_raise_item_timeout(monkeypatch):
    monkeypatch.setattr(get_type("ocr"), "accuracy", _spin)
    config = RewardConfig(item_timeout_s=0.3)
    with pytest.raises(ItemTimeout, match=r"item 1: scoring took longer than item_timeout_s=0.3 s"):
        score_batch([(MC, "B"), (OCR, "stop here")], config)
    with pytest.raises(ItemTimeout, match=r"sample \(no id\): scoring took longer than item_timeout_s=0.3 s"):
        score(OCR, "stop here", config)
    assert isinstance(ItemTimeout("x"), RewardError)


def test_a_truth_too_slow_to_read_fails_its_whole_group_once(monkeypatch):
    calls = []

    def slow_truth(sample):
        calls.append(sample)
        return _spin()

    monkeypatch.setattr(get_type("ocr"), "parse_truth", slow_truth)
    sample = {"problem_type": "ocr", "answer": "stop here", "id": "v1"}
    results = score_items(
        [(sample, "stop"), (sample, "stop here"), (MC, "B")], RewardConfig(item_timeout_s=0.3)
    )
    expected = "sample 'v1': reading its ground truth took longer than item_timeout_s=0.3 s"
    assert [r.error for r in results] == [expected, expected, None]
    assert len(calls) == 1  # the group's other responses did not wait again


def test_a_math_check_waits_outside_the_item_timeout(monkeypatch):
    # Waiting on a helper process has its own limits (math_timeout_s, math_deadline_s); an exception
    # raised in the middle of the pool's bookkeeping would leak a helper, so the item limit stays out.
    def slow_check(self, gold, pred, timeout_s, deadline=None):
        time.sleep(1.0)  # a check longer than the item limit below
        return True

    monkeypatch.setattr(type(get_math_checker()), "equivalent", slow_check)
    for scored in (score_items([_math("x^2+2x+1", "(x+1)^2")], RewardConfig(item_timeout_s=0.3))[0],
                   score(*_math("x^2+2x+1", "(x+1)^2"), RewardConfig(item_timeout_s=0.3))):  # fmt: skip
        assert (scored.accuracy, scored.error) == (1.0, None)

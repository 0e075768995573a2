"""Segmentation, code and preference, table-driven through ``score``."""

import json

import pytest

from services.reward import InvalidSample, score

TRUTH_BOX = {"bbox": [0, 0, 10, 10]}


def seg(value) -> str:
    return f"<answer>{json.dumps(value)}</answer>"


@pytest.mark.parametrize(
    ("response", "accuracy", "fmt"),
    [
        # IoU 1; one positive inside → pos 1, no negatives → neg 1: 0.5·1 + 0.5·1·1
        (seg({"bbox": [0, 0, 10, 10], "positive_points": [[5, 5]]}), 1.0, 1.0),
        # IoU 50/150; positives (5,5) in, (15,5) out → 1/2; negative (20,20) out → 1: 0.5/3 + 0.5·0.5
        (
            seg(
                {"bbox": [5, 0, 15, 10], "positive_points": [[5, 5], [15, 5]], "negative_points": [[20, 20]]}
            ),
            0.5 / 3 + 0.25,
            1.0,
        ),
        # a negative point inside the object halves the point term: 0.5·1 + 0.5·1·(1/2)
        (
            seg({"bbox_2d": [0, 0, 10, 10], "points_pos": [[5, 5]], "points_neg": [[1, 1], [50, 50]]}),
            0.75,
            1.0,
        ),
        # no positive points: the point term is 0
        (seg({"bbox": [0, 0, 10, 10], "negative_points": [[50, 50]]}), 0.5, 1.0),
        # a single point written flat is one point
        (seg({"bbox": [0, 0, 10, 10], "positive_points": [5, 5]}), 1.0, 1.0),
        (seg({"bbox": [0, 0, 10, 10], "positive_points": [[5, 5]] * 11}), 0.0, 0.5),  # > 10 points
        (seg({"positive_points": [[5, 5]]}), 0.0, 0.5),  # no box
        # Qwen's one-element list with a single "point_2d", and a "points" key: 0.5·1 + 0.5·1·1
        (seg([{"bbox_2d": [0, 0, 10, 10], "point_2d": [5, 5]}]), 1.0, 1.0),
        (seg({"bbox": [0, 0, 10, 10], "points": [[5, 5], [50, 50]]}), 0.75, 1.0),  # 0.5 + 0.5·(1/2)·1
        (seg([{"bbox": [0, 0, 10, 10]}, {"bbox": [0, 0, 5, 5]}]), 0.0, 0.5),  # two prompts: no answer
    ],
)
def test_segmentation(response, accuracy, fmt):
    result = score({"problem_type": "segmentation", "answer": TRUTH_BOX}, response)
    assert (result.accuracy, result.format) == (pytest.approx(accuracy), fmt)


SVG = '<svg xmlns="http://www.w3.org/2000/svg"><rect x="1" width="2"/><circle r="3"/></svg>'


@pytest.mark.parametrize(
    ("kind", "truth", "response", "accuracy"),
    [
        ("svg-code", SVG, f"<answer>```svg\n{SVG}\n```</answer>", 1.0),
        # reference features: svg, svg@xmlns?… no: xmlns is a namespace, not an attribute → svg, rect, rect@x,
        # rect@width, circle, circle@r = 6. Answer <svg><rect x="3"/></svg> → svg, rect, rect@x = 3, all shared.
        # P = 3/3, R = 3/6 → F1 = 2·0.5/1.5 = 2/3
        ("svg-code", SVG, '<answer><svg><rect x="3"/></svg></answer>', 2 / 3),
        ("svg-code", SVG, "<answer><svg><rect></svg></answer>", 0.0),  # not well-formed
        ("code", SVG, "<answer><html><body></body></html></answer>", 0.0),  # root is not <svg>
        # html: reference html, body, p, p@class = 4; answer html, body, p = 3 shared → P 1, R 3/4 → 6/7
        (
            "html-code",
            '<html><body><p class="x">hi</p></body></html>',
            "<answer><html><body><p>yo</body></html></answer>",
            6 / 7,
        ),
        (
            "html-code",
            "<html><body><div></div></body></html>",
            "<answer><html><body><div></div></body></html></answer>",
            1.0,
        ),
        (
            "html-code",
            "<html><body></body></html>",
            "<answer><html><body><div></body></html></answer>",
            0.0,
        ),  # <div> open
        ("html-code", "<p>a<br>b", "<answer><p>x<br>y</p></answer>", 1.0),  # optional close and void tags
        # python: same AST node types → 1
        (
            "code",
            "def f(x):\n    return x + 1",
            "<answer>```python\ndef g(y):\n    return y + 2\n```</answer>",
            1.0,
        ),
        ("code", "def f(x):\n    return x + 1", "<answer>def f(x) return x</answer>", 0.0),  # syntax error
    ],
)
def test_code(kind, truth, response, accuracy):
    result = score({"problem_type": kind, "answer": truth}, response)
    assert result.accuracy == pytest.approx(accuracy)
    assert result.problem_type == "code"


def test_code_language_field_must_be_supported():
    with pytest.raises(InvalidSample, match="supported: svg, html, python"):
        score({"problem_type": "code", "answer": "x", "language": "cobol"}, "<answer>x</answer>")


@pytest.mark.parametrize(
    ("truth", "response", "accuracy", "extracted"),
    [
        ("Response 1", "<answer>Response 1</answer>", 1.0, "first"),
        ("1", "<answer>Response 1 is better than Response 2.</answer>", 1.0, "first"),
        ("Response 2", "<answer>I prefer Answer B.</answer>", 1.0, "second"),
        ("[[B]]", "<answer>[[B]]</answer>", 1.0, "second"),
        ("Tie", "<answer>Both are equally good.</answer>", 1.0, "tie"),
        ("Response 1", "<answer>Response 2</answer>", 0.0, "second"),
        # names both as better: a hedge
        ("Response 1", "<answer>Response 1 is better. Response 2 is better.</answer>", 0.0, None),
    ],
)
def test_preference_pairwise(truth, response, accuracy, extracted):
    result = score({"problem_type": "critic", "answer": truth}, response)
    assert (result.accuracy, result.extracted) == (accuracy, extracted)


@pytest.mark.parametrize(
    ("response", "accuracy", "fmt"),
    [
        ("<answer>7</answer>", 1.0, 1.0),
        ("<answer>9</answer>", 1 - 2 / 9, 1.0),  # |9 − 7| over the range 10 − 1 = 9
        ("<answer>1</answer>", 1 - 6 / 9, 1.0),
        ("<answer>11</answer>", 0.0, 0.5),  # outside the range: no score
    ],
)
def test_preference_pointwise(response, accuracy, fmt):
    result = score({"problem_type": "llava", "answer": "7", "score_range": [1, 10]}, response)
    assert (result.accuracy, result.format) == (pytest.approx(accuracy), fmt)

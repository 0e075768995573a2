"""Multiple choice, table-driven through ``score``."""

import pytest

from services.reward import InvalidSample, score

OPTIONS = ["A. a red car", "B. a blue car", "C. a green bus", "D. nothing moves"]


def mc(answer, options=OPTIONS, **extra):
    return {"problem_type": "multiple choice", "answer": answer, "options": options, **extra}


@pytest.mark.parametrize(
    ("sample", "response", "accuracy", "fmt", "extracted"),
    [
        (mc("B"), "<answer>B</answer>", 1.0, 1.0, "B"),
        (mc("B"), "<think>the car is blue</think><answer>(B)</answer>", 1.0, 1.0, "B"),
        (mc("B"), "<answer>**B**</answer>", 1.0, 1.0, "B"),
        (mc("B"), "<answer>B. a blue car</answer>", 1.0, 1.0, "B"),
        (mc("B"), "<answer>a blue car</answer>", 1.0, 1.0, "B"),  # option text
        (mc("B"), "<answer>The answer is B.</answer>", 1.0, 1.0, "B"),
        (mc("B"), "Answer: B", 1.0, 0.0, "B"),  # right, but no answer tag → format 0
        (mc("B"), "Therefore, the final answer is: (B)", 1.0, 0.0, "B"),
        (mc("B"), "<answer>C</answer>", 0.0, 1.0, "C"),
        (mc("B"), "<answer>E</answer>", 0.0, 0.5, None),  # not an option: ill-typed content
        (mc("B"), "<answer>I am not sure</answer>", 0.0, 0.5, None),
        (mc("a blue car"), "<answer>B</answer>", 1.0, 1.0, "B"),  # truth given as option text
        (mc("B. a blue car"), "<answer>B</answer>", 1.0, 1.0, "B"),  # truth given lettered
        (mc("<answer>B</answer>"), "<answer>B</answer>", 1.0, 1.0, "B"),  # wrapped truth
        (
            mc("B", options=["a red car", "a blue car"]),
            "<answer>B</answer>",
            1.0,
            1.0,
            "B",
        ),  # letters assigned
        (mc("B", options={"A": "red", "B": "blue"}), "<answer>blue</answer>", 1.0, 1.0, "B"),
        (mc("B", options="A. red\nB. blue"), "<answer>B</answer>", 1.0, 1.0, "B"),  # newline-joined
        (mc("F", options=None), "<answer>(F)</answer>", 1.0, 1.0, "F"),  # no options: A…F valid
        (mc("G. a tree", options=None), "<answer>G</answer>", 1.0, 1.0, "G"),  # lettered truth, no options
        (mc("C"), "<answer>C is correct</answer>", 1.0, 1.0, "C"),  # only A and I are English words
        (mc("D"), "<answer>D seems right</answer>", 1.0, 1.0, "D"),
        (mc("A"), "<answer>A red car</answer>", 1.0, 1.0, "A"),  # "A" + word: the article, option text
        (mc("B"), "<answer>I think B</answer>", 1.0, 1.0, "B"),  # "I" + word: the pronoun
        (mc("B"), "<answer>C is wrong, B is right</answer>", 0.0, 0.5, None),  # two letters: a hedge
        # full-width letters read as their ASCII letters (NFKC; issue 36 §4): U+FF22 is "B"
        (mc("B"), "<answer>\uff22</answer>", 1.0, 1.0, "B"),
        (mc("B"), "<answer>\uff08\uff22\uff09</answer>", 1.0, 1.0, "B"),  # （Ｂ）
        (mc("B"), "The answer is \uff22.", 1.0, 0.0, "B"),
        (mc("C"), "<answer>\uff22</answer>", 0.0, 1.0, "B"),
        (mc("B"), "<answer>\uff21 or \uff22</answer>", 0.0, 0.5, None),  # Ａ or Ｂ: a hedge
    ],
)
def test_multiple_choice(sample, response, accuracy, fmt, extracted):
    result = score(sample, response)
    assert (result.accuracy, result.format, result.extracted) == (accuracy, fmt, extracted)
    assert result.overall == pytest.approx(0.9 * accuracy + 0.1 * fmt)
    assert result.problem_type == "multiple choice"


@pytest.mark.parametrize("alias", ["multiple_choice", "mcq", "Multiple-Choice", "MULTIPLE CHOICE"])
def test_aliases(alias):
    assert score({"problem_type": alias, "answer": "A"}, "<answer>A</answer>").accuracy == 1.0


def test_truth_that_is_no_option_is_rejected_naming_the_sample():
    with pytest.raises(InvalidSample, match=r"sample 'q7'.*'purple'"):
        score(mc("purple", id="q7"), "<answer>A</answer>")

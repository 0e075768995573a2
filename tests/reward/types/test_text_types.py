"""Boolean, OCR and open-ended, table-driven through ``score``."""

import pytest

from services.reward import InvalidSample, RewardConfig, score, score_items


@pytest.mark.parametrize(
    ("answer", "response", "accuracy", "fmt", "extracted"),
    [
        ("yes", "<answer>Yes.</answer>", 1.0, 1.0, "yes"),
        ("Yes", "<answer>**yes**</answer>", 1.0, 1.0, "yes"),
        (True, "<answer>true</answer>", 1.0, 1.0, "yes"),
        ("no", "<answer>No, the door stays shut.</answer>", 1.0, 1.0, "no"),
        ("no", "<answer>N</answer>", 1.0, 1.0, "no"),
        ("no", "<answer>yes</answer>", 0.0, 1.0, "yes"),
        ("no", "<answer>yes or no</answer>", 0.0, 0.5, None),  # both: a hedge
        ("no", "<answer>maybe</answer>", 0.0, 0.5, None),
        # a leading yes/no closed by punctuation decides, whatever words follow
        ("no", "<answer>No, that's not true</answer>", 1.0, 1.0, "no"),
        ("yes", "<answer>Yes, there is a dog</answer>", 1.0, 1.0, "yes"),
        ("yes", "<answer>**Yes**. No cat, though.</answer>", 1.0, 1.0, "yes"),  # "no cat": not an answer
        ("no", "<answer>No, no, no</answer>", 1.0, 1.0, "no"),
        ("no", "<answer>Yes, no.</answer>", 0.0, 0.5, None),  # the opposite stated on its own: a hedge
        ("no", "<answer>No, yes</answer>", 0.0, 0.5, None),
        ("no", "<answer>Yes/No</answer>", 0.0, 0.5, None),  # no punctuation after the first word
    ],
)
def test_boolean(answer, response, accuracy, fmt, extracted):
    result = score({"problem_type": "yes/no", "answer": answer}, response)
    assert (result.accuracy, result.format, result.extracted) == (accuracy, fmt, extracted)
    assert result.problem_type == "boolean"


@pytest.mark.parametrize(
    ("answer", "response", "accuracy"),
    [
        ("STOP here now", "<answer>stop here now</answer>", 1.0),  # casefolded
        ("STOP here now", "<answer>stop, here; now!</answer>", 1.0),  # punctuation dropped
        ("STOP here now", "<answer>stop here</answer>", 1 - 1 / 3),  # 1 deletion over 3 words
        ("STOP here now", "<answer>stop there now</answer>", 1 - 1 / 3),  # 1 substitution
        ("STOP here now", "<answer>go go go go go go go</answer>", 0.0),  # WER 7/3 > 1 → floored at 0
        ("Exit 12", "<answer>exit 12 north</answer>", 0.5),  # 1 insertion over 2 words
    ],
)
def test_ocr(answer, response, accuracy):
    assert score({"problem_type": "ocr", "answer": answer}, response).accuracy == pytest.approx(accuracy)


@pytest.mark.parametrize(
    ("answer", "response", "accuracy"),
    [
        # short truth (≤ 3 words): normalised exact match
        ("Paris", "<answer>paris.</answer>", 1.0),
        ("the Eiffel Tower", "<answer>Eiffel tower</answer>", 1.0),  # article dropped
        ("Paris", "<answer>The answer is Paris.</answer>", 1.0),  # phrase removed before matching
        ("Paris", "<answer>Paris, France</answer>", 0.0),
        # long truth: mean ROUGE F1. truth 6 tokens, pred 3 (see metrics test): (2/3 + 4/7 + 2/3)/3
        ("the cat sat on the mat", "<answer>the cat sat</answer>", (2 / 3 + 4 / 7 + 2 / 3) / 3),
        ("the cat sat on the mat", "<answer>The cat sat on the mat.</answer>", 1.0),
        # other scripts: tokens, not ASCII words (rouge-score's own tokenizer would give 0 here)
        ("Мужчина едет на красном велосипеде", "<answer>Мужчина едет на красном велосипеде</answer>", 1.0),
        ("红色自行车", "<answer>红色自行车</answer>", 1.0),  # 5 tokens > 3: ROUGE
        ("红色自行车", "<answer>红色汽车</answer>", 34 / 63),  # see the metrics test
        ("巴黎", "<answer>巴黎。</answer>", 1.0),  # 2 tokens ≤ 3: exact match
    ],
)
def test_open_ended(answer, response, accuracy):
    result = score({"problem_type": "free-form", "answer": answer}, response)
    assert result.accuracy == pytest.approx(accuracy)
    assert result.problem_type == "open-ended"


@pytest.mark.parametrize("kind", ["open-ended", "ocr"])
@pytest.mark.parametrize("answer", ["!!!", "…", "?!"])
def test_a_truth_without_words_is_refused(kind, answer):
    with pytest.raises(InvalidSample, match=r"sample 'p1': .* has no words, only punctuation"):
        score({"problem_type": kind, "answer": answer, "id": "p1"}, "<answer>???</answer>")


# 12,000 distinct words (about 83,000 characters, under MAX_ANSWER_CHARS), and the same text with every
# 10th word (positions 5, 15, …, 11,995) replaced by a word the reference lacks: 1,200 replacements.
LONG_REFERENCE = [f"w{i}" for i in range(12_000)]
LONG_RESPONSE = " ".join("zz" if i % 10 == 5 else word for i, word in enumerate(LONG_REFERENCE))
# Under the default item_timeout_s (10 s): the tables took 42 s (WER) and 32 s (ROUGE-L) here, on the
# loaded 2-core machine where the bit-parallel scorers took 0.13 s and 0.5 s.
LONG = RewardConfig(max_response_chars=200_000)


def test_a_long_ocr_item_scores_exactly_within_its_time_limit():
    # Each replaced word costs one edit and no alignment does better: WER = 1,200/12,000 → 0.9.
    sample = {"problem_type": "ocr", "answer": " ".join(LONG_REFERENCE)}
    (result,) = score_items([(sample, LONG_RESPONSE)], LONG)
    assert result.error is None
    assert result.accuracy == pytest.approx(0.9)


def test_a_long_open_ended_item_scores_exactly_within_its_time_limit():
    # ROUGE-1: 10,800 of 12,000 tokens shared → P = R = 0.9. ROUGE-L: LCS 10,800 → 0.9.
    # ROUGE-2: 11,999 distinct bigrams; each interior replacement breaks 2 → 11,999 − 2,400 = 9,599 shared.
    sample = {"problem_type": "open-ended", "answer": " ".join(LONG_REFERENCE)}
    (result,) = score_items([(sample, LONG_RESPONSE)], LONG)
    assert result.error is None
    assert result.accuracy == pytest.approx((0.9 + 9_599 / 11_999 + 0.9) / 3)

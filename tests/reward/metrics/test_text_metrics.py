"""WER and ROUGE, computed by hand."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer

from services.reward.extract.normalise import normalise_text, tokens, words
from services.reward.metrics import wer
from services.reward.metrics.rouge import UnicodeTokenizer, exact_match, rouge_f1_mean
from services.reward.metrics.wer import edit_distance, wer_accuracy, word_error_rate


@pytest.mark.parametrize(
    ("ref", "hyp", "edits"),
    [
        ("a b c", "a b c", 0),
        ("a b c", "a c", 1),  # one deletion
        ("a b c", "a x c", 1),  # one substitution
        ("a b c", "a b c d", 1),  # one insertion
        ("a b c", "", 3),
        ("kitten sat on mat", "sitting sat mat", 2),  # substitute kitten→sitting, delete on
    ],
)
def test_edit_distance(ref, hyp, edits):
    assert edit_distance(ref.split(), hyp.split()) == edits


def test_word_error_rate():
    assert word_error_rate(["a", "b", "c"], ["a", "x", "c"]) == pytest.approx(1 / 3)
    assert word_error_rate(["a"], ["x", "y", "z"]) == pytest.approx(3.0)  # 1 sub + 2 ins over 1 word
    assert word_error_rate([], []) == 0.0
    assert word_error_rate([], ["x"]) == 1.0


def test_rouge_f1_mean_by_hand():
    # truth "the cat sat on the mat" (6 tokens), pred "the cat sat" (3 tokens)
    # ROUGE-1: overlap 3 → P = 3/3, R = 3/6 → F1 = 2·1·0.5/1.5 = 2/3
    # ROUGE-2: pred bigrams {the cat, cat sat} both in truth → P = 2/2, R = 2/5 → F1 = 2·0.4/1.4 = 4/7
    # ROUGE-L: LCS = 3 → same as ROUGE-1: 2/3
    expected = (2 / 3 + 4 / 7 + 2 / 3) / 3
    assert rouge_f1_mean("the cat sat", "the cat sat on the mat") == pytest.approx(expected)
    assert rouge_f1_mean("completely different words", "the cat sat on the mat") == 0.0


def test_exact_match_normalises_case_punctuation_and_articles():
    assert normalise_text("The  Eiffel-Tower!") == "eiffel tower"
    assert words("The  Eiffel-Tower!") == ["the", "eiffel", "tower"]  # OCR keeps articles
    assert exact_match("an apple.", "Apple") == 1.0
    assert exact_match("apples", "apple") == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The T-shirt, 3.14!", ["the", "t", "shirt", "3", "14"]),  # as rouge-score splits ASCII
        ("Мужчина едет", ["мужчина", "едет"]),  # Cyrillic kept, casefolded
        ("Der Straße", ["der", "strasse"]),  # casefold: ß → ss
        ("红色车 in パリ", ["红", "色", "车", "in", "パ", "リ"]),  # one token per ideograph / kana
        ("한국어", ["한", "국", "어"]),  # one per hangul syllable
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # combining vowel signs stay inside their word
        ("snake_case", ["snake", "case"]),
        ("!!! …", []),
    ],
)
def test_unicode_tokens(text, expected):
    assert tokens(text) == expected


@pytest.mark.parametrize(
    ("pred", "truth", "expected"),
    [
        ("Мужчина едет на красном велосипеде", "Мужчина едет на красном велосипеде", 1.0),
        ("一个男人骑着红色的自行车", "一个男人骑着红色的自行车", 1.0),
        # truth 红 色 自 行 车 (5 tokens), pred 红 色 汽 车 (4)
        # ROUGE-1: overlap {红, 色, 车} = 3 → P = 3/4, R = 3/5 → F1 = 2·0.45/1.35 = 2/3
        # ROUGE-2: truth bigrams 红色 色自 自行 行车, pred 红色 色汽 汽车; overlap 1 → P = 1/3, R = 1/4
        #          → F1 = 2·(1/12)/(7/12) = 2/7
        # ROUGE-L: LCS 红色车 = 3 → 2/3.  Mean = (2/3 + 2/7 + 2/3)/3 = 34/63
        ("红色汽车", "红色自行车", 34 / 63),
        # ASCII words are still Porter-stemmed: cat run vs the cat run
        # ROUGE-1: P = 2/2, R = 2/3 → F1 = 4/5; ROUGE-2: "cat run" in truth → P = 1, R = 1/2 → 2/3;
        # ROUGE-L: LCS 2 → 4/5.  Mean = (4/5 + 2/3 + 4/5)/3 = 34/45
        ("cats running", "the cat runs", 34 / 45),
    ],
)
def test_rouge_on_any_script(pred, truth, expected):
    assert rouge_f1_mean(pred, truth) == pytest.approx(expected)


def test_wer_accuracy_floors_at_zero_and_skips_hopeless_hypotheses(monkeypatch):
    assert wer_accuracy(["a", "b", "c"], ["a", "x", "c"]) == pytest.approx(2 / 3)
    assert wer_accuracy(["a"], ["x", "y", "z"]) == 0.0  # WER 3 → 0
    assert wer_accuracy([], []) == 1.0
    # twice the reference's length or more: at least len(ref) insertions, WER ≥ 1, no distance computed
    monkeypatch.setattr(wer, "edit_distance", lambda *_: pytest.fail("computed a hopeless distance"))
    assert wer_accuracy(["a", "b"], ["a", "b", "a", "b"]) == 0.0


_VOCABULARY = [
    "the", "cat", "cats", "running", "runs", "sat", "on", "mat", "红", "色", "车", "Мужчина", "!", ",",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_VOCABULARY), max_size=30), st.lists(st.sampled_from(_VOCABULARY), max_size=30)
)
def test_rouge_is_rouge_scores_own_computation(pred, truth):
    """Same numbers as rouge-score's RougeScorer over the same tokenizer (its LCS table, its n-gram
    counts), to the last bit."""
    pred, truth = " ".join(pred), " ".join(truth)
    scores = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=UnicodeTokenizer()).score(
        truth, pred
    )
    expected = (scores["rouge1"].fmeasure + scores["rouge2"].fmeasure + scores["rougeL"].fmeasure) / 3.0
    assert rouge_f1_mean(pred, truth) == expected

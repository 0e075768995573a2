"""Option letters tokenise alike in the tiny BPE, so RL sees every answer letter with the same odds."""

from __future__ import annotations

import pytest

from services.common.tiny_models.tokenizer import OPTION_LETTERS, trained_tokenizer, with_letter_merges


@pytest.fixture(scope="module")
def tokenizer():
    return trained_tokenizer()


def test_every_answer_letter_is_one_token(tokenizer) -> None:
    lengths = {x: len(tokenizer.tokenize(f"<answer>{x}</answer>")) for x in OPTION_LETTERS}
    spaced = {x: tokenizer.tokenize(f" {x}") for x in OPTION_LETTERS}
    assert set(lengths.values()) == {5}, lengths  # '<answer', '>X', '</', 'answer', '>'
    assert all(len(t) == 1 for t in spaced.values()), spaced


def test_letter_merges_only_append() -> None:
    vocab = {">": 0, "A": 1, "B": 2, ">A": 3, "Ġ": 4}
    merges = [(">", "A")]
    out_vocab, out_merges = with_letter_merges(vocab, merges)
    assert out_merges[0] == (">", "A") and out_merges[1] == (">", "B")
    assert out_vocab[">A"] == 3 and out_vocab[">B"] == 5  # existing ids kept, new ones follow the largest
    assert len(out_merges) == 1 + 25 + 26

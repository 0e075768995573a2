"""Text normalisation shared by option-text matching, OCR and short-answer exact match."""

from __future__ import annotations

import re

_ARTICLES = frozenset({"a", "an", "the"})
_NON_WORD = re.compile(r"[^\w\s]")


def words(text: str) -> list[str]:
    """Casefolded words, punctuation dropped."""
    return _NON_WORD.sub(" ", text.casefold()).split()


def normalise_text(text: str) -> str:
    """Casefolded words without punctuation or English articles, single-spaced."""
    return " ".join(w for w in words(text) if w not in _ARTICLES)

"""Text normalisation shared by option-text matching, OCR, short-answer exact match and ROUGE."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

ARTICLES = frozenset({"a", "an", "the"})
_NON_WORD = re.compile(r"[^\w\s]")
# Scripts written without spaces between words: every ideograph, kana or hangul syllable is a token.
_CJK = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)


def words(text: str) -> list[str]:
    """Casefolded words, punctuation dropped."""
    return _NON_WORD.sub(" ", text.casefold()).split()


def normalise_text(text: str) -> str:
    """Casefolded words without punctuation or English articles, single-spaced."""
    return " ".join(w for w in words(text) if w not in ARTICLES)


@lru_cache(maxsize=1)
def _token_pattern() -> re.Pattern[str]:
    # Combining marks (Devanagari vowel signs, decomposed accents) are not \w, yet belong to their word.
    marks = "".join(re.escape(chr(c)) for c in range(0x10000) if unicodedata.category(chr(c)).startswith("M"))
    return re.compile(rf"(?:[^\W_]|[{marks}])+")


def tokens(text: str) -> list[str]:
    """Casefolded Unicode words (letters, digits and their combining marks; punctuation and ``_``
    separate), with each CJK ideograph, kana and hangul syllable a token of its own.

    Example: ``"Der Straße, 红色车!"`` → ``["der", "strasse", "红", "色", "车"]``.
    """
    spaced = _CJK.sub(r" \g<0> ", unicodedata.normalize("NFC", text).casefold())
    return _token_pattern().findall(spaced)

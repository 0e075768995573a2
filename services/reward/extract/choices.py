"""Option letters as people and models write them — "B", "(B)", "B.", "B)", "**B**", "[B]", "Answer: B"
(the phrase is removed upstream) — and option TEXT when the options are known.

Text is read after NFKC normalisation, so full-width forms are their ASCII letters: "Ｂ" (U+FF22),
"（Ｂ）" and "ｂ" read as "B", "(B)" and "b".

An answer naming two different letters, or the texts of two options, is a hedge and reads as no answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from services.reward.extract.normalise import normalise_text
from services.reward.sample import Option

# A capital letter standing alone, optionally decorated: (B) [B] **B** B. B) B:
# At most 8 opening marks are read before the letter: a longer run is matched from its last 8 (the letter
# and whether it is decorated are the same), and an unbounded run was re-read from every one of its
# positions inside one regex call: O(n²), 29 s for a response of 60,000 "(".
_LETTER = re.compile(
    r"(?<![A-Za-z0-9'’])(?P<open>[(\[*]{0,8})(?P<letter>[A-Z])(?P<close>[)\]*.:：]*)(?![A-Za-z0-9'’])"
)
# ...unless that word joins letters: "A or C" is a hedge, not an article.
_LOWER_WORD_AHEAD = re.compile(r"\s+(?!(?:or|and|nor|vs|versus|and/or)\b)[a-z]")
_WORD_LETTERS = "AI"  # the capitals that are English words on their own
# A lowercase letter closed by a bracket or bold, "(b)", "b)", "[b]", "**b**": an option written small. (A
# bare "b" is a letter only as the whole answer; "a" is an article.) Reading capitals alone let "(b) or (C)"
# answer twice, read as C.
_SMALL_LETTER = re.compile(r"(?<![A-Za-z0-9'’])[(\[*]{0,8}(?P<letter>[a-z])(?:[)\]]|\*\*)(?![A-Za-z0-9'’])")
_DECORATION = "()[]{}*.:,;!?\"'`“”‘’ \t\n"


def letter_candidates(text: str, letters: str) -> set[str]:
    """Letters in ``letters`` that ``text`` names as an option.

    A bare "A" or "I" followed by a lowercase word is an English word ("A man walks", "I think"), not a
    letter; any other capital is a letter whatever follows ("C is correct"). A lowercase letter is one
    when closed by a bracket or bold ("(b)", "b)") or when it is the whole answer.
    """
    text = unicodedata.normalize("NFKC", text)
    stripped = text.strip(_DECORATION)
    if len(stripped) == 1 and stripped.upper() in letters:
        return {stripped.upper()}
    found: set[str] = set()
    for m in _LETTER.finditer(text):
        letter = m.group("letter")
        if letter not in letters:
            continue
        decorated = bool(m.group("open") or m.group("close"))
        if not decorated and letter in _WORD_LETTERS and _LOWER_WORD_AHEAD.match(text, m.end()):
            continue
        found.add(letter)
    found.update(m.group("letter").upper() for m in _SMALL_LETTER.finditer(text))
    return found & set(letters)


def _normalised(text: str) -> str:
    return normalise_text(unicodedata.normalize("NFKC", text))


def option_text_candidates(text: str, options: Sequence[Option]) -> set[str]:
    """Letters of the options whose text ``text`` contains; an option contained in a longer matched
    option ("red" inside "dark red") does not count on its own."""
    norm = f" {_normalised(text)} "
    hits = {o.letter: _normalised(o.text) for o in options}
    hits = {k: t for k, t in hits.items() if t and f" {t} " in norm}
    return {k for k, t in hits.items() if not any(t != u and f" {t} " in f" {u} " for u in hits.values())}


def extract_choice(text: str, options: Sequence[Option], letters: str) -> str | None:
    """The single option letter ``text`` answers with, or None (no answer, or a hedge)."""
    found = letter_candidates(text, letters)
    if not found and options:
        found = option_text_candidates(text, options)
    return found.pop() if len(found) == 1 else None

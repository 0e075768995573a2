"""Option lists as benchmarks write them, normalised to the shared ``"A. text"`` form, and back out in the
style a benchmark's prompt uses. Letter parsing is the reward library's (``parse_options``)."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from services.eval.benchmarks.errors import BenchmarkError
from services.reward.sample import Option, parse_options

# An option line inside a question: "(A) 1636", "A. red", "A: red", "A) red".
_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])\s*[.):：]\s*(.+?)\s*$")


def lettered(texts: Sequence[Any]) -> list[str]:
    """Plain option texts as ``["A. x", "B. y", …]``."""
    if len(texts) > 26:
        raise BenchmarkError(f"{len(texts)} options; at most 26 are supported")
    return [f"{string.ascii_uppercase[i]}. {str(t).strip()}" for i, t in enumerate(texts)]


def options_of(raw: Any) -> tuple[Option, ...]:
    """Letters and texts of options written any way the reward library reads."""
    return parse_options(raw)


def render(raw: Any, style: str = "{letter}. {text}", sep: str = "\n") -> str:
    """The options of a sample in a prompt's style, e.g. ``"({letter}) {text}"`` joined by newlines."""
    return sep.join(style.format(letter=o.letter, text=o.text) for o in options_of(raw))


def letters_of(raw: Any) -> str:
    return "".join(o.letter for o in options_of(raw))


def split_embedded(question: str, where: str) -> tuple[str, list[str]]:
    """A question whose last lines list its options ("(A) x" / "A. x") → (question, ["A. x", …]).

    The option lines must be consecutive letters from A at the end of the text; otherwise the whole
    text is the question and there are no options (an error for callers that need them).
    """
    lines = question.rstrip().splitlines()
    found: list[tuple[str, str]] = []
    while lines:
        match = _OPTION_LINE.match(lines[-1])
        if not match:
            break
        found.insert(0, (match.group(1), match.group(2)))
        lines.pop()
    expected = string.ascii_uppercase[: len(found)]
    if not found or "".join(letter for letter, _ in found) != expected:
        raise BenchmarkError(f"{where}: could not read lettered options at the end of the question")
    return "\n".join(lines).strip(), [f"{letter}. {text}" for letter, text in found]


def letter_of_text(candidates: Sequence[Any], answer: Any, where: str) -> str:
    """The letter of ``answer`` among plain ``candidates`` (answers written as option text)."""
    texts = [str(c).strip() for c in candidates]
    wanted = str(answer).strip()
    if texts.count(wanted) != 1:
        raise BenchmarkError(f"{where}: answer {wanted[:60]!r} is not exactly one of the candidates {texts}")
    return string.ascii_uppercase[texts.index(wanted)]


def letter_of_index(index: Any, count: int, where: str) -> str:
    """The letter of a 0-based answer index (LongVideoBench ``correct_choice``, MINERVA ``answer_id``)."""
    if isinstance(index, bool) or not isinstance(index, int | str) or not str(index).strip().isdigit():
        raise BenchmarkError(f"{where}: answer index {index!r} is not a non-negative integer")
    value = int(index)
    if value >= count:
        raise BenchmarkError(f"{where}: answer index {value} is out of range for {count} options")
    return string.ascii_uppercase[value]

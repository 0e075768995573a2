"""Numbers as people and models write them: "1,234.5", "-3", "3/4", "\\frac{3}{4}", "45%", "1.2e3",
"1.2 × 10^3", "1.5 million", "12 meters", "twenty-one", "twice".

``read_numbers`` returns every value in reading order, each marked when written as a percent;
``single_reading`` / ``single_number`` insist on exactly one distinct value, so an answer that hedges
("10 or 12", and "4 or five": a spelled-out number beside digits counts there) reads as no answer. ``value_pairs`` says which values two readings may be compared as.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

_MANTISSA = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+\.(?!\d)|\d+|\.\d+)"
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+−–])?\s?(?P<mant>" + _MANTISSA + r")"
    r"(?:[eE](?P<exp>[-+]?\d{1,6})"
    r"|\s*(?:[x×*]|\\times|\\cdot)\s*10\s*\^\s*\{?(?P<exp10>[-+−]?\d{1,6})\}?)?"
    r"(?:\s*(?P<scale>(?i:hundred|thousand|million|billion))\b)?"
    r"(?:\s*/\s*(?P<den>" + _MANTISSA + r"))?"
    r"(?P<pct>\s*(?:%|\\%|percent\b))?"
)
# \frac{a}{b} (also \dfrac, \tfrac); the math type reuses it for exact fractions.
LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}")
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_ADVERBS = {"once": 1, "twice": 2, "thrice": 3, "none": 0}
_WORD = re.compile(r"[a-z]+", re.I)


def _number_from_match(m: re.Match[str]) -> float | None:
    value = float(m.group("mant").replace(",", "").rstrip("."))
    exponent = m.group("exp") or (m.group("exp10") or "0").replace("−", "-")
    if abs(int(exponent)) > 300:  # beyond float range: not a usable number
        return None
    value *= 10.0 ** int(exponent)
    if m.group("scale") is not None:  # "1.5 million"
        value *= _SCALES[m.group("scale").lower()]
    if m.group("den") is not None:
        den = float(m.group("den").replace(",", "").rstrip("."))
        if den == 0:
            return None
        value /= den
    if m.group("sign") in ("-", "−", "–"):
        value = -value
    return value if math.isfinite(value) else None


class Number(NamedTuple):
    """A value read from text; ``percent`` when it was written with %, "percent" ("75%" → 75, True)."""

    value: float
    percent: bool = False


def _digit_numbers(text: str) -> list[Number]:
    text = LATEX_FRAC.sub(r"\1/\2", text)
    found = ((_number_from_match(m), m.group("pct") is not None) for m in _NUMBER.finditer(text))
    return [Number(value, pct) for value, pct in found if value is not None]


def _word_numbers(text: str, *, beside_digits: bool = False) -> list[float]:
    """Spelled-out numbers: "seven", "twenty-one", "three hundred and five", "twice".

    ``beside_digits``: the words that are numbers in a text that also writes digits, where a lone "one"
    ("the one on the left") and the adverbs ("I counted twice", "none of them") are words, not values.
    """
    values: list[float] = []
    total = current = 0
    spelled: list[str] = []  # the words of the number being read
    for word in [*_WORD.findall(text.lower().replace("-", " ")), ""]:  # "" ends the last number
        if word in _UNITS or word in _TENS:
            current += _UNITS.get(word, 0) + _TENS.get(word, 0)
            spelled.append(word)
        elif word in _SCALES and spelled:
            current = max(current, 1) * _SCALES[word]
            if _SCALES[word] >= 1000:
                total, current = total + current, 0
            spelled.append(word)
        elif word == "and" and spelled:
            continue
        else:
            if spelled and not (beside_digits and spelled == ["one"]):
                values.append(float(total + current))
            total = current = 0
            spelled = []
            if word in _ADVERBS and not beside_digits:
                values.append(float(_ADVERBS[word]))
    return values


def read_numbers(text: str) -> list[Number]:
    """Every number in ``text``; spelled-out numbers only when no digits are written."""
    return _digit_numbers(text) or [Number(v) for v in _word_numbers(text)]


def find_numbers(text: str) -> list[float]:
    """The values of ``read_numbers``."""
    return [number.value for number in read_numbers(text)]


def single_reading(text: str) -> Number | None:
    """The one number ``text`` states (a percent if every mention is one), or None when it states none or
    several different ones. Beside digits a spelled-out number counts too ("4 or five" is a hedge; "4
    (four)" one answer), except a lone "one" and the adverbs (see ``_word_numbers``)."""
    numbers = read_numbers(text)
    if not numbers or any(n.value != numbers[0].value for n in numbers[1:]):
        return None
    if any(value != numbers[0].value for value in _word_numbers(text, beside_digits=True)):
        return None
    return Number(numbers[0].value, all(n.percent for n in numbers))


def single_number(text: str) -> float | None:
    """The value of ``single_reading``."""
    reading = single_reading(text)
    return None if reading is None else reading.value


def value_pairs(pred: Number, truth: Number) -> list[tuple[float, float]]:
    """``(pred, truth)`` values to compare: as written, and when exactly one side is a percent also with
    that side divided by 100, since "75%" answers both 75 and 0.75. Both percents compare as written."""
    pairs = [(pred.value, truth.value)]
    if pred.percent and not truth.percent:
        pairs.append((pred.value / 100, truth.value))
    elif truth.percent and not pred.percent:
        pairs.append((pred.value, truth.value / 100))
    return pairs


def numbers_equal(pred: float, truth: float) -> bool:
    """Equal to two decimal places (the seed's evaluation rule), or equal up to float noise."""
    return round(pred, 2) == round(truth, 2) or math.isclose(pred, truth, rel_tol=1e-9)

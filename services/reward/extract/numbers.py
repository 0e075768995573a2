"""Numbers as people and models write them: "1,234.5", "-3", "3/4", "\\frac{3}{4}", "45%", "1.2e3",
"1.2 × 10^3", "12 meters", "twenty-one", "twice".

``find_numbers`` returns every value in reading order; ``single_number`` insists on exactly one distinct
value, so an answer that hedges ("10 or 12") reads as no answer.
"""

from __future__ import annotations

import math
import re

_MANTISSA = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+\.(?!\d)|\d+|\.\d+)"
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+−–])?\s?(?P<mant>" + _MANTISSA + r")"
    r"(?:[eE](?P<exp>[-+]?\d{1,6})"
    r"|\s*(?:[x×*]|\\times|\\cdot)\s*10\s*\^\s*\{?(?P<exp10>[-+−]?\d{1,6})\}?)?"
    r"(?:\s*/\s*(?P<den>" + _MANTISSA + r"))?"
    r"(?P<pct>\s*(?:%|\\%|percent\b))?"
)
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}")
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_ADVERBS = {"once": 1, "twice": 2, "thrice": 3, "none": 0}
_WORD = re.compile(r"[a-z]+", re.I)


def _number_from_match(m: re.Match[str]) -> float | None:
    value = float(m.group("mant").replace(",", "").rstrip("."))
    exponent = m.group("exp") or (m.group("exp10") or "0").replace("−", "-")
    if abs(int(exponent)) > 300:  # beyond float range: not a usable number
        return None
    value *= 10.0 ** int(exponent)
    if m.group("den") is not None:
        den = float(m.group("den").replace(",", "").rstrip("."))
        if den == 0:
            return None
        value /= den
    if m.group("sign") in ("-", "−", "–"):
        value = -value
    return value if math.isfinite(value) else None


def _digit_numbers(text: str) -> list[float]:
    text = _LATEX_FRAC.sub(r"\1/\2", text)
    values = [_number_from_match(m) for m in _NUMBER.finditer(text)]
    return [v for v in values if v is not None]


def _word_numbers(text: str) -> list[float]:
    """Spelled-out numbers: "seven", "twenty-one", "three hundred and five", "twice"."""
    values: list[float] = []
    total = current = 0
    active = False
    for word in _WORD.findall(text.lower().replace("-", " ")):
        if word in _UNITS or word in _TENS:
            current += _UNITS.get(word, 0) + _TENS.get(word, 0)
            active = True
        elif word in _SCALES and active:
            current = max(current, 1) * _SCALES[word]
            if _SCALES[word] >= 1000:
                total, current = total + current, 0
        elif word == "and" and active:
            continue
        else:
            if active:
                values.append(float(total + current))
                total = current = 0
                active = False
            if word in _ADVERBS:
                values.append(float(_ADVERBS[word]))
    if active:
        values.append(float(total + current))
    return values


def find_numbers(text: str) -> list[float]:
    """Every number in ``text``; spelled-out numbers only when no digits are written."""
    return _digit_numbers(text) or _word_numbers(text)


def single_number(text: str) -> float | None:
    """The one number ``text`` states, or None when it states none or several different ones."""
    values = find_numbers(text)
    if not values or any(v != values[0] for v in values[1:]):
        return None
    return values[0]


def numbers_equal(pred: float, truth: float) -> bool:
    """Equal to two decimal places (the seed's evaluation rule), or equal up to float noise."""
    return round(pred, 2) == round(truth, 2) or math.isclose(pred, truth, rel_tol=1e-9)

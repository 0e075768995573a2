"""Math: symbolic equivalence of the final expression (math-verify, time-limited).

The answer is one expression. math-verify reads the last line, the last sentence or the last ``$…$`` of
a text, and a match with any expression it reads counts, so "5\\n4" or "$5$; $4$" earned for 4: an answer
whose statements (lines, LaTeX line breaks outside an environment, sentences, ``$…$`` / ``\\(…\\)`` /
``\\[…\\]`` spans) say different things is a hedge and reads as no answer.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.numbers import LATEX_FRAC
from services.reward.extract.tags import last_boxed
from services.reward.metrics.mathcheck import get_math_checker
from services.reward.metrics.mathguard import MAX_EXPRESSION_CHARS, refusal
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample

_PLAIN = re.compile(r"[-+]?(?:\d{1,300}(?:\.\d{0,300})?|\.\d{1,300})(?:/\d{1,300})?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
# Digit runs are bounded: int() refuses strings over 4,300 digits, and such "answers" are not numbers.
_DIGITS = re.compile(r"\d{1,300}")
_NOISE = re.compile(r"\\left|\\right|\\!|\\,|\\;|\s+|^\$+|\$+$|\.$")
# Math in delimiters: $$…$$, $…$, \(…\), \[…\].
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
# \begin{…}…\end{…}: its \\ are rows of one matrix or case list, not line breaks.
_ENVIRONMENT = re.compile(r"\\begin\{([a-zA-Z]+\*?)\}.*?\\end\{\1\}", re.S)
# Where math-verify starts another statement: a newline, a LaTeX line break, a sentence's end.
_STATEMENT_BREAK = re.compile(r"\n|\\\\|\.\s+(?=\S)")


def _clean(expr: str) -> str:
    expr = expr.strip()
    boxed = last_boxed(expr)
    return (boxed if boxed is not None else expr).strip().strip("$").strip()


def _statements(text: str) -> set[str]:
    """The different things ``text`` states: each delimited math span, else each line or sentence (blanks
    dropped); one item for one expression."""
    spans = [next(g for g in m.groups() if g is not None) for m in _MATH_SPAN.finditer(text)]
    if len(spans) < 2:
        spans = _STATEMENT_BREAK.split(_ENVIRONMENT.sub(lambda m: m.group().replace("\\\\", " "), text))
    return {re.sub(r"\s+", "", span) for span in spans} - {""}


def _as_fraction(expr: str) -> Fraction | None:
    """Plain numbers and ``\\frac{a}{b}`` exactly, so the common case never leaves the process."""
    compact = expr.replace(",", "") if _THOUSANDS.fullmatch(expr) else expr
    if _PLAIN.fullmatch(compact):
        try:
            return Fraction(compact)
        except (ValueError, ZeroDivisionError):
            return None
    sign, body = (compact[0], compact[1:]) if compact[:1] in ("+", "-") else ("", compact)
    frac = LATEX_FRAC.fullmatch(body)
    if frac and all(_DIGITS.fullmatch(part) for part in frac.groups()) and int(frac.group(2)) != 0:
        value = Fraction(int(frac.group(1)), int(frac.group(2)))
        return -value if sign == "-" else value
    return None


@register
class MathExpression(ProblemType):
    name = "math"
    description = "Final expression (\\boxed{} preferred); symbolic equivalence by math-verify, time-limited."

    def parse_truth(self, sample: RewardSample) -> str:
        truth = _clean(str(sample.answer))
        if not truth or len(truth) > MAX_EXPRESSION_CHARS:
            raise InvalidSample(f"{sample.label}: math answer must be 1–{MAX_EXPRESSION_CHARS} characters")
        reason = refusal(truth)
        if reason is not None:
            raise InvalidSample(f"{sample.label}: math answer is too absurd to check: {reason}")
        return truth

    def extract(self, text: str, sample: RewardSample) -> str | None:
        expr = _clean(text)
        if not expr or len(expr) > MAX_EXPRESSION_CHARS or len(_statements(last_boxed(text) or text)) > 1:
            return None
        return expr

    def waits(self, parsed: Any, truth: Any) -> bool:
        return _decided_in_process(parsed, truth) is None

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        decided = _decided_in_process(parsed, truth)
        if decided is not None:
            return decided
        same = get_math_checker().equivalent(truth, parsed, ctx.math_timeout_s, deadline=ctx.deadline)
        return 1.0 if same else 0.0


def _decided_in_process(parsed: str, truth: str) -> float | None:
    """Accuracy when no symbolic check is needed, else None."""
    exact_pred, exact_truth = _as_fraction(parsed), _as_fraction(truth)
    if exact_pred is not None and exact_truth is not None:
        if exact_pred == exact_truth:
            return 1.0
        if "." not in parsed + truth:
            return 0.0  # integers and fractions: math-verify compares them exactly too
        # a decimal is involved: math-verify's rounding (6 places) decides, e.g. 0.142857 = 1/7
    if _NOISE.sub("", parsed) == _NOISE.sub("", truth):
        return 1.0
    return None

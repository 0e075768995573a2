"""Cheap pre-checks that refuse absurd math expressions before the symbolic engine sees them.

sympy computes exact results, and no timer interrupts the C code doing it: ``9^{9^{9}}`` has 370 million
digits, ``(10^{6})!`` five million, and ``(x+y+z+1)^{20}`` expands into 1,771 terms (each took the whole
time limit when measured). ``refusal`` reads the expression's structure and bounds what it asks for,
without evaluating anything:

- more than MAX_EXPRESSION_CHARS characters, or a number literal over MAX_LITERAL_DIGITS digits;
- a power tower more than MAX_TOWER levels high (``a^{b^{c^{d}}}``);
- a number needing more than MAX_DIGITS decimal digits, bounded from above on a log scale through sums,
  products, powers, roots, factorials and binomials (``10^{-10^{9}}`` counts: tiny is as costly as huge);
- a power of a symbolic sum whose expansion has more than MAX_EXPANDED_TERMS terms.

Whatever it cannot read (letters, unknown commands) counts as a symbol: the pre-check refuses only what it
can bound, and the per-check time limit covers everything else. Measured costs behind the limits are in
docs/rewards.md (math).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import NamedTuple

# Longer "final answers" are not expressions but prose; also bounds what a helper process must parse.
MAX_EXPRESSION_CHARS = 1000
MAX_LITERAL_DIGITS = 300
MAX_TOWER = 3
MAX_DIGITS = 100_000  # 10^{10^{5}} checks in ~0.03 s, 10^{10^{6}} in ~0.4 s, 10^{10^{7}} not in 5 s
MAX_EXPANDED_TERMS = 500  # (x+1)^{400} (401 terms) checks in ~1.3 s, (x+y+z+1)^{20} (1,771) not in 8 s
MAX_NESTING = 100

_LONG_LITERAL = re.compile(rf"[0-9]{{{MAX_LITERAL_DIGITS + 1},}}")
_TOKEN = re.compile(
    r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)|(?P<cmd>\\[A-Za-z]+|\\.)|(?P<space>\s+)|(?P<char>.)", re.S
)
_LOG10_2 = math.log10(2)
_CONSTANT_SIZE = math.log10(math.pi)  # e and π: bounded, so e^{1000} is sized like 3^{1000}
_SLACK = 1 + 1e-9  # log-scale bounds drift in the last bits: 10^{10^{5}} must not read as over 10^5 digits

_OPENERS = {"{": "}", "(": ")", "[": "]", "\\{": "\\}", "\\lbrace": "\\rbrace", "\\langle": "\\rangle"}
_CLOSERS = frozenset(_OPENERS.values())
_ADDITIVE = frozenset({"+", "-", "\\pm", "\\mp"})
# Relations and list separators: like "+" for size, but they do not make a sum to expand.
_SEPARATORS = frozenset(
    {"=", ",", ";", ":", "<", ">", "|", "&", "\\\\", r"\le", r"\leq", r"\ge", r"\geq", r"\ne", r"\neq",
     r"\lt", r"\gt", r"\approx", r"\sim", r"\equiv", r"\to", r"\in", r"\cup", r"\cap", r"\setminus",
     r"\mid", r"\quad", r"\qquad", r"\implies", r"\iff", r"\vert"}
)  # fmt: skip
_PRODUCT = frozenset({"*", "/", "\\cdot", "\\times", "\\div", "\\ast"})
_POSTFIX = frozenset({"^", "_", "!", "'"})
_NOT_ATOMS = _CLOSERS | _ADDITIVE | _SEPARATORS | _PRODUCT | _POSTFIX
_IGNORED = frozenset(
    {r"\,", r"\;", r"\!", r"\:", "\\ ", "~", r"\left", r"\right", r"\big", r"\Big", r"\bigg", r"\Bigg",
     r"\bigl", r"\bigr", r"\Bigl", r"\Bigr", r"\displaystyle", r"\textstyle", r"\limits"}
)  # fmt: skip
_CONSTANTS = frozenset({"e", "\\pi", "\\e", "π"})
_FRACTIONS = frozenset({"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"})
_BINOMIALS = frozenset({"\\binom", "\\dbinom", "\\tbinom"})
_FACTORIAL_FUNCTIONS = frozenset({"\\Gamma", "\\Pi"})


class _Refused(Exception):
    """Internal: carries the reason out of the recursive reader."""


class _Bound(NamedTuple):
    """What is known of a sub-expression.

    ``digits``: upper bound of log10(max(|v|, 1/|v|)), the decimal digits an exact value needs; None when
    the sub-expression is symbolic. ``tower``: power levels (1 for a power-free expression).
    ``summands``: top-level terms of a sum (1 when not a sum); a power of a symbolic sum expands.
    """

    digits: float | None
    tower: int = 1
    summands: int = 1


_SYMBOL = _Bound(None)


def _number(text: str) -> _Bound:
    whole, _, fraction = text.partition(".")
    return _Bound(math.log10(max(int(whole or "0"), 1)) + len(fraction))


def _value(digits: float) -> float:
    """Upper bound of |v| for a bound of ``digits``."""
    return math.inf if digits > 300 else 10.0**digits


def _sum(a: _Bound, b: _Bound) -> _Bound:
    digits = None if a.digits is None or b.digits is None else max(a.digits, b.digits) + _LOG10_2
    return _Bound(digits, max(a.tower, b.tower))


def _product(a: _Bound, b: _Bound) -> _Bound:
    digits = None if a.digits is None or b.digits is None else a.digits + b.digits
    return _Bound(digits, max(a.tower, b.tower))


class _Reader:
    """Recursive descent over LaTeX tokens: expression := term (separator term)*, term := factor
    (product? factor)*, factor := sign* atom (^ script | _ script | !)*. Never fails on odd input: a token
    that fits nowhere is read as a separator, an unknown atom as a symbol."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = [
            (m.start(), m.group(), m.lastgroup)
            for m in _TOKEN.finditer(expr)
            if m.lastgroup != "space" and m.group() not in _IGNORED
        ]
        self.pos = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def at_atom(self) -> bool:
        token = self.peek()
        return token is not None and token not in _NOT_ATOMS

    def take(self) -> str:
        token = self.tokens[self.pos][1]
        self.pos += 1
        return token

    def text_from(self, start: int) -> str:
        begin = self.tokens[start][0] if start < len(self.tokens) else len(self.expr)
        end = self.tokens[self.pos][0] if self.pos < len(self.tokens) else len(self.expr)
        snippet = self.expr[begin:end].strip()
        return snippet if len(snippet) <= 40 else snippet[:37] + "..."

    def check(self, bound: _Bound, start: int) -> _Bound:
        if bound.digits is not None and bound.digits > MAX_DIGITS * _SLACK:
            raise _Refused(
                f"{self.text_from(start)} needs about {_describe(bound.digits)} digits (at most {MAX_DIGITS:,})"
            )
        if bound.tower > MAX_TOWER:
            raise _Refused(
                f"{self.text_from(start)} is a power tower {bound.tower} levels high (at most {MAX_TOWER})"
            )
        return bound

    def expression(self) -> _Bound:
        start = self.pos
        bound = self.term()
        summands = 1
        while (token := self.peek()) is not None and token not in _CLOSERS:
            self.take()  # a separator, or a stray token read as one
            summands += token in _ADDITIVE
            bound = self.check(_sum(bound, self.term()), start)
        return _Bound(bound.digits, bound.tower, summands)

    def term(self) -> _Bound:
        start = self.pos
        bound = self.factor()
        while self.at_atom() or (self.peek() in _PRODUCT and self.take()):
            bound = self.check(_product(bound, self.factor()), start)
        return bound

    def factor(self) -> _Bound:
        while self.peek() in _ADDITIVE:
            self.take()
        start = self.pos
        bound = self.atom()
        while (token := self.peek()) in ("^", "_", "!", "'"):
            self.take()
            if token == "^":
                bound = self.power(bound, self.script(), start)
            elif token == "_":
                self.script()  # an index: read for its own limits, no effect on the value
            elif token == "!":
                bound = self.check(_factorial(bound), start)
        return bound

    def script(self) -> _Bound:
        while self.peek() in _ADDITIVE:
            self.take()
        return self.atom()

    def power(self, base: _Bound, exponent: _Bound, start: int) -> _Bound:
        tower = max(base.tower, exponent.tower + 1)
        if exponent.digits is None:
            return self.check(_Bound(None, tower), start)
        n = _value(exponent.digits)
        if base.digits is None:
            if base.summands > 1 and _expanded_terms(base.summands, n) > MAX_EXPANDED_TERMS:
                raise _Refused(f"{self.text_from(start)} expands into more than {MAX_EXPANDED_TERMS} terms")
            return self.check(_Bound(None, tower), start)
        digits = 0.0 if base.digits == 0 else n * base.digits
        return self.check(_Bound(digits, tower), start)

    def atom(self) -> _Bound:
        """One atom; a symbol (consuming nothing) where none starts."""
        if not self.at_atom():
            return _SYMBOL
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _Refused(f"nested more than {MAX_NESTING} levels deep")
        bound = self._atom()
        self.depth -= 1
        return bound

    def _atom(self) -> _Bound:
        start = self.pos
        kind = self.tokens[self.pos][2]
        token = self.take()
        if token in _OPENERS:
            bound = self.expression()
            if self.peek() == _OPENERS[token]:
                self.take()
            return bound
        if kind == "num":
            return _number(token)
        if token in _CONSTANTS:
            return _Bound(_CONSTANT_SIZE)
        if token in _FRACTIONS:
            return self.check(_product(self.atom(), self.atom()), start)
        if token == "\\sqrt":
            index = self.atom() if self.peek() == "[" else None  # \sqrt[n]{x}: the index is bounded too
            radicand = self.atom()
            return _Bound(None, radicand.tower) if index is not None and index.digits is None else radicand
        if token in _BINOMIALS:
            return self.check(_binomial(self.atom(), self.atom()), start)
        if token == "\\exp":
            return self.power(_Bound(_CONSTANT_SIZE), self.atom(), start)
        if token in _FACTORIAL_FUNCTIONS:
            return self.check(_factorial(self.atom()), start)
        return _SYMBOL  # a letter, a function name, an unknown command


def _factorial(n: _Bound) -> _Bound:
    """n! < n^n: log10(n!) ≤ n · log10(n)."""
    if n.digits is None:
        return _Bound(None, n.tower)
    return _Bound(_value(n.digits) * n.digits, n.tower)


def _binomial(n: _Bound, k: _Bound) -> _Bound:
    """C(n, k) ≤ min(n^k, 2^n)."""
    if n.digits is None or k.digits is None:
        return _Bound(None, max(n.tower, k.tower))
    return _Bound(min(_value(k.digits) * n.digits, _value(n.digits) * _LOG10_2), max(n.tower, k.tower))


def _expanded_terms(summands: int, exponent: float) -> float:
    """Monomials of (a_1 + … + a_s)^n: C(n + s - 1, s - 1), at most (assuming distinct symbols)."""
    if exponent > MAX_EXPANDED_TERMS:
        return exponent  # already over the limit: (a + b)^n alone has n + 1 terms
    return math.comb(math.floor(exponent * _SLACK) + summands - 1, summands - 1)


def _describe(digits: float) -> str:
    return f"{digits:,.0f}" if digits < 1e9 else f"{digits:.1e}"


@lru_cache(maxsize=4096)
def refusal(expr: str) -> str | None:
    """Why ``expr`` is too absurd to hand to the symbolic engine, or None when it may be checked."""
    if len(expr) > MAX_EXPRESSION_CHARS:
        return f"expression has {len(expr):,} characters (at most {MAX_EXPRESSION_CHARS:,})"
    if long := _LONG_LITERAL.search(expr):
        return f"a number literal has {len(long.group()):,} digits (at most {MAX_LITERAL_DIGITS})"
    reader = _Reader(expr)
    try:
        while reader.peek() is not None:
            reader.expression()
            if reader.peek() is not None:
                reader.take()  # an unbalanced closing bracket: read on
    except _Refused as exc:
        return str(exc)
    return None

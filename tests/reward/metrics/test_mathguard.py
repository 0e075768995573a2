"""The cheap pre-check: absurd expressions are refused by structure, ordinary answers pass untouched."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reward.metrics.mathguard import refusal


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        # 9^9 = 387,420,489; 9^{9^9} has 387,420,489 · log10(9) = 369,693,099.6 digits
        (r"9^{9^{9}}", "9^{9^{9}} needs about 369,693,100 digits (at most 100,000)"),
        (
            r"\boxed{9^{9^{9^{9}}}}",
            "9^{9^{9}} needs about 369,693,100 digits",
        ),  # refused at its first absurd part
        (r"9^(9^(9^9))", "9^(9^9) needs about 369,693,100 digits"),  # parentheses are read as groups too
        (r"\left(9\right)^{9^{9}}", "needs about 369,693,100 digits"),
        # 10^{2·10^5} has 200,000 digits
        (r"10^{2 \cdot 10^{5}}", "needs about 200,000 digits"),
        # 2^{10^7}: 10^7 · log10(2) = 3,010,299.96 digits
        (r"2^{10^{7}}", "needs about 3,010,300 digits"),
        # tiny is as costly as huge: 10^{-10^9} needs 10^9 digits
        (r"10^{-10^{9}}", "needs about 1.0e+09 digits"),
        # n! ≤ n^n: (10^6)! is bounded by 10^6 · 6 = 6,000,000 digits; 100000! by 500,000
        (r"(10^{6})!", "(10^{6})! needs about 6,000,000 digits"),
        ("100000!", "needs about 500,000 digits"),
        (r"\Gamma(10^{8})", "needs about 800,000,000 digits"),
        # C(n, k) ≤ min(n^k, 2^n): C(10^6, 10^5) ≤ 2^(10^6), 301,030 digits
        (r"\binom{10^{6}}{10^{5}}", "needs about 301,030 digits"),
        # e^(10^9): 10^9 · log10(π) (e is sized as π, an upper bound) = 497,149,872.7
        (r"\exp(10^{9})", "needs about 497,149,873 digits"),
        # a root's index is a number like any other
        (r"\sqrt[9^{9^{9}}]{2}", "9^{9^{9}} needs about 369,693,100 digits"),
        (r"2^{2^{2^{2}}}", "2^{2^{2^{2}}} is a power tower 4 levels high (at most 3)"),
        (r"x^{y^{z^{w}}}", "is a power tower 4 levels high"),
        # (a_1 + … + a_s)^n has C(n + s - 1, s - 1) terms: C(1000, 1) = 1000 + 1; C(23, 3) = 1,771
        ("(x+1)^{1000}", "(x+1)^{1000} expands into more than 500 terms"),
        ("(x+y+z+1)^{20}", "expands into more than 500 terms"),
        ("1" * 301, "a number literal has 301 digits (at most 300)"),
        ("x+" * 500 + "x", "expression has 1,001 characters (at most 1,000)"),
        ("{" * 101 + "x" + "}" * 101, "nested more than 100 levels deep"),
    ],
)
def test_absurd_expressions_are_refused_with_the_reason(expr, reason):
    assert reason in refusal(expr)


@pytest.mark.parametrize(
    "expr",
    [
        r"\frac{1}{2}", r"x^2+2x+1", r"(x+1)^2", r"\sqrt{2}", r"2\pi", r"\{1,2\}", "0.142857", "3.0",
        r"e^{-x^2}", r"e^{1000}", r"2^{2^{5}}", r"9^9^9",
        r"10^{10^{5}}",  # exactly 100,001 digits: at the limit, allowed (~0.03 s measured)
        r"\binom{10^{9}}{2}",  # C(n, 2) ≤ n^2: 18 digits
        "1000!", "(x+1)^{100}", "(x+y+1)^{20}",  # 101 and C(22, 2) = 231 terms
        r"x^{1000}", r"\left(\frac{a}{b}\right)^{n}", r"\int_0^1 x^2 \, dx", r"\lim_{n\to\infty} (1+1/n)^n",
        "1" * 300, "x+" * 499 + "xx",
        "", "}}}{{{", "^^^", r"\frac", "²³", "٣^{٣^{٣}}", r"\sqrt[", "((", "!!!",
    ],
)  # fmt: skip
def test_ordinary_and_odd_expressions_pass(expr):
    assert refusal(expr) is None


TOKENS = [*"0123456789+-*/^_!'(){}[].,=x e", r"\frac", r"\sqrt", r"\binom", r"\left(", r"\right)", r"\cdot",
          r"\exp", r"\Gamma", r"\pi", "10^{", "9^{9^{"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(TOKENS), max_size=120).map("".join), st.text(max_size=300)))
def test_never_raises_on_arbitrary_token_soup(expr):
    reason = refusal(expr)
    assert reason is None or isinstance(reason, str)

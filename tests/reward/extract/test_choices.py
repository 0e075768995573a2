"""Option letters and option texts; hedges read as no answer."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reward.extract import choices
from services.reward.extract.choices import extract_choice
from services.reward.sample import parse_options
from services.reward.timelimit import time_limit

OPTIONS = parse_options(["A. red", "B. dark red", "C. blue", "D. a man walking"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B", "B"),
        ("b", "B"),  # a lone lowercase letter is still the letter
        ("(B)", "B"),
        ("B.", "B"),
        ("B)", "B"),
        ("**B**", "B"),
        ("[B]", "B"),
        ("B: dark red", "B"),
        ("B. dark red", "B"),
        ("I think it is C", "C"),  # "I" followed by a lowercase word is the pronoun
        ("A man walking", "D"),  # "A" followed by a lowercase word is the article; the text matches D
        ("dark red", "B"),  # option text; "red" inside "dark red" does not also count
        ("red", "A"),
        ("it is blue", "C"),
        ("E", None),  # not an option
        ("A, B", None),  # hedges
        ("A or C", None),
        ("A and B", None),
        ("A B C D", None),
        ("red, dark red, blue and a man walking", None),  # every option's text
        ("none of these", None),
        ("\uff22", "B"),  # full-width Ｂ (NFKC)
        ("\uff42", "B"),  # full-width ｂ, alone
        ("\uff08\uff22\uff09", "B"),  # （Ｂ）
        ("\uff22\uff0e", "B"),  # Ｂ．
        ("\uff44\uff41\uff52\uff4b \uff52\uff45\uff44", "B"),  # ｄａｒｋ ｒｅｄ: option text
        ("\uff21 or \uff23", None),  # Ａ or Ｃ
        ("\uff21, B", None),
    ],
)
def test_extract_choice(text, expected):
    assert extract_choice(text, OPTIONS, "ABCD") == expected


def test_without_options_letters_come_from_the_caller():
    assert extract_choice("(F)", (), "ABCDEF") == "F"
    assert extract_choice("(F)", (), "ABCD") is None


# The letter pattern before its opening marks were bounded (a run of them was re-read from each position).
_UNBOUNDED_LETTER = re.compile(
    r"(?<![A-Za-z0-9'’])(?P<open>[(\[*]*)(?P<letter>[A-Z])(?P<close>[)\]*.:：]*)(?![A-Za-z0-9'’])"
)


def _reading(pattern, text):
    return [
        (m.group("letter"), bool(m.group("open") or m.group("close")), m.end())
        for m in pattern.finditer(text)
    ]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="(([[**)].: ABa1'x\n", max_size=60))
def test_bounded_opening_marks_read_what_the_unbounded_pattern_read(text):
    # what letter_candidates uses of a match: the letter, whether it is decorated, where it ends
    assert _reading(choices._LETTER, text) == _reading(_UNBOUNDED_LETTER, text)


def test_a_long_run_of_opening_marks_is_read_in_linear_time():
    with time_limit(20):  # a bound, not a benchmark: 60,000 "(" took 29 s in one regex call
        assert extract_choice("(" * 100_000, OPTIONS, "ABCD") is None
        assert extract_choice("x" + "(" * 100_000 + "B)", OPTIONS, "ABCD") == "B"

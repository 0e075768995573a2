"""Option letters and option texts; hedges read as no answer."""

import pytest

from services.reward.extract.choices import extract_choice
from services.reward.sample import parse_options

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

"""Records read from data files: nesting is limited before the parser runs, and what cannot be read is
a RecordError naming why (never a RecursionError from deep inside the parser)."""

import pytest

from services.common.json_lines import MAX_DEPTH, RecordError, json_depth, loads_record


def test_depth_counts_brackets_outside_strings() -> None:
    assert json_depth('{"a": [1, {"b": "[["}]}') == 3
    assert json_depth('"[[[["') == 0
    assert json_depth('{"q": "say \\"[\\" please", "x": [[]]}') == 3  # escaped quotes stay in the string
    assert json_depth("7") == 0


def test_a_record_too_deep_is_refused_before_parsing() -> None:
    assert loads_record("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(RecordError, match=f"nested 5000 levels deep \\(at most {MAX_DEPTH}\\)"):
        loads_record("[" * 5000)  # unbalanced too: the depth speaks first
    with pytest.raises(RecordError, match="invalid JSON"):
        loads_record('{"a": ')
    with pytest.raises(RecordError, match="unreadable JSON"):
        loads_record('{"n": 1' + "0" * 5000 + "}")


def test_a_lone_surrogate_is_this_records_error_and_pairs_are_text():
    """Valid JSON, no text: it failed far away, when the run wrote its output (UnicodeEncodeError)."""
    for text in ('{"problem": "\\ud800"}', '{"\\udc80": 1}', '["a", {"b": ["\\uDBFF x"]}]'):
        with pytest.raises(RecordError, match=r"lone surrogate \(U\+D[89A-F][0-9A-F]{2}\): not text"):
            loads_record(text)
    assert loads_record('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}  # a pair is one character
    assert loads_record('{"a": "\\\\ud800"}') == {"a": "\\ud800"}  # an escaped backslash: plain text

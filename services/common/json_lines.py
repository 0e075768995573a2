"""One JSON record read from a data file, with limits checked before the parser runs: a row nested
thousands of levels deep (``[[[[…``) made Python's parser raise RecursionError, which aborted whole
commands with a traceback instead of failing that row. Every reader of JSONL datasets, samples and
predictions goes through :func:`loads_record`."""

from __future__ import annotations

import json
import re
from typing import Any

#: deepest nesting a record may have: real samples nest 3-5 levels (boxes per frame per object)
MAX_DEPTH = 64
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_BRACKET = re.compile(r"[\[\]{}]")


class RecordError(ValueError):
    """A record that cannot be read: the message says why (for the caller to prefix with file:line)."""


def json_depth(text: str) -> int:
    """Deepest bracket nesting of JSON ``text``, brackets inside strings not counted.
    Example: ``{"a": [1, {"b": "[["}]}`` → 3."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads_record(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``; :class:`RecordError` when it is no JSON, nests deeper than ``max_depth``
    (checked before parsing) or holds a number Python refuses to read (an integer of 4,300+ digits)."""
    depth = json_depth(text)
    if depth > max_depth:
        raise RecordError(f"nested {depth} levels deep (at most {max_depth})")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"invalid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise RecordError(f"unreadable JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if _LONE_SURROGATE.search(text):
        check_text(record)
    return record


# a \uD800-\uDFFF escape in the raw line: only then can a decoded string hold a lone surrogate
_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def check_text(record: Any) -> None:
    """A string of the record (key or value) holding a lone surrogate (``"\\ud800"``, valid JSON but
    no text) would fail when written or tokenised, far from here: refused as this record's error."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RecordError(
            f"a string holds a lone surrogate (U+{ord(exc.object[exc.start]):04X}): not text"
        ) from None

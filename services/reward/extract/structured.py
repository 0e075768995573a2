"""JSON answers (bare or in ``` fences), time intervals and boxes.

Validation is part of reading: a NaN/inf coordinate, an empty or inverted interval (end before start), a
negative start or a box with x2 ≤ x1 is not an answer at all. Answers and ground truths are read by one
rule: an interval written end first is invalid (not the reversed valid one), and several different
intervals, in one form or across forms, are a hedge that reads as nothing. (The benchmarks' own
temporal-grounding readers, which swap and take the first, live in ``services.reward.official``.) Inside
JSON the same holds: an object's time keys and box keys all count, a key given twice with two values
reads as nothing, and a frame given two different boxes is missing.

A fence is no boundary: JSON is read wherever it is, in fenced blocks and beside them, and the text around
it is read too (for intervals, and for boxes written in prose), so text beside a JSON answer offering
another value makes it a hedge. The same value again, in any form, is one answer.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

# A fenced block (the code type's answer; JSON is read alike in a fence or not): group 1 the language
# ("json", "svg", may be empty), group 2 the content. The rest of the info line ("```python title=x") is
# skipped only when a newline ends it, so "```{"a": 1}```" keeps its body.
# The blanks and the language are matched possessively (``*+``): backtracking into them could only move the
# search for the closing fence back over characters that hold no backtick, so it finds nothing new, yet it
# made an unclosed "```" before n word characters cost O(n²) inside one regex call (60 s for 80,000).
FENCE = re.compile(r"```[ \t]*+([\w+-]*+)(?:[^\n`]*\n)?(.*?)```", re.S)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object in which a key given two different values holds None: json keeps the last one, so
    '{"time": [30, 40], "time": [10, 20]}' answered twice and the order chose. None is no interval, box
    or number to every reader, so the key reads as nothing; the same value twice stays one answer."""
    obj = dict(pairs)
    if len(obj) == len(pairs):  # no key twice: the common case, at the speed of a plain decode
        return obj
    obj = {}
    for key, value in pairs:
        obj[key] = None if key in obj and obj[key] != value else value
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_object)
_JSON_START = re.compile(r"[{\[]")
_MAX_JSON_STARTS = 32
_NUM = r"[-+]?\d+(?:\.\d+)?"
_CLOCK = r"\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?"
_TIME = rf"(?:{_CLOCK}|{_NUM})"
_UNIT = r"\s*(?:s|sec|secs|second|seconds)?\b"
# A start or end keyword, then up to 40 characters without a digit before its time: "starts at",
# "Start time:", "Starting time:", "The start time for this event is", "start:".
_GAP = r"[^\d\n]{0,40}?"
# "starts at 3.2 s and ends at 5", "Start time: 4.2 seconds\nEnd time: 9.8 seconds", "start: 3.0s, end: 7.5s",
# "from 12.5 to 20 seconds", "between 3 and 7 s", "12.5 - 20.0 seconds", "00:12 to 00:20", "[3.0, 7.5]",
# "(3.0, 7.5)", "[3.0s, 7.5s]"
_INTERVAL_PATTERNS = (
    re.compile(
        rf"\bstart(?:s|ing)?(?:\s+time)?\b{_GAP}(?P<s>{_TIME}){_UNIT}.{{0,60}}?"
        rf"\bend(?:s|ing)?(?:\s+time)?\b{_GAP}(?P<e>{_TIME}){_UNIT}",
        re.I | re.S,
    ),
    re.compile(
        rf"(?:from|between)\s+(?P<s>{_TIME}){_UNIT}\s*(?:to|and|-|–|until)\s*(?P<e>{_TIME}){_UNIT}", re.I
    ),
    re.compile(rf"(?<![\w.:])(?P<s>{_TIME}){_UNIT}\s*(?:-|–|~|to|until)\s*(?P<e>{_TIME}){_UNIT}", re.I),
    re.compile(rf"[\[(]\s*(?P<s>{_NUM}){_UNIT}\s*,\s*(?P<e>{_NUM}){_UNIT}\s*[\])]", re.I),
    # a second interval after "or" in a shortened form no pattern above reads ("between 10 and 20
    # seconds, or 30 and 40 seconds"): read, so that a different one makes the answer a hedge
    re.compile(
        rf"\bor\b[^\d\n]{{0,20}}?(?<![\w.:])(?P<s>{_TIME}){_UNIT}\s*(?:and|to|-|–|~|until)\s*(?P<e>{_TIME}){_UNIT}",
        re.I,
    ),
)
# A time offered two ways ("from 10 to 20 or 30 seconds", "10 or 12 - 20 s", "00:20/00:30"): a hedge.
_ALTERNATIVE_TIMES = re.compile(rf"(?<![\w.:]){_TIME}{_UNIT}\s*(?:\bor\b|/)\s*{_TIME}", re.I)
# A box written in prose, "(10, 20, 110, 220)" (or bracketed where it is no JSON, "[010, 20, 110, 220]"):
# no answer on its own, but beside a JSON answer a box it does not hold is a second answer.
_PROSE_BOX = re.compile(rf"[\[(]\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*[\])]")

_Span = tuple[Any, int, int]


def sole(values: Sequence[Any]) -> Any | None:
    """The value every item of ``values`` equals, or None when there is none or two differ (a hedge)."""
    if not values or any(value != values[0] for value in values[1:]):
        return None
    return values[0]


def every_key(value: dict[str, Any], keys: Sequence[str]) -> list[Any]:
    """What ``value`` gives under each of ``keys`` (the spellings of one field), in ``keys``' order. Every
    spelling counts: reading the first alone let '{"bbox_2d": A, "bbox": B}' answer twice."""
    return [value[key] for key in keys if key in value]


def _json_in(text: str) -> list[_Span] | None:
    """``(value, start, end)`` of each top-level JSON value in ``text``, in ``` fences or not, or None when
    more than ``_MAX_JSON_STARTS`` places could start one: the reading stops there to stay linear, and a
    value past them could be a second answer, so such a text is unreadable rather than read in part."""
    found: list[_Span] = []
    attempts, at = 0, 0
    while (start := _JSON_START.search(text, at)) is not None:
        if attempts == _MAX_JSON_STARTS:
            return None
        attempts += 1
        try:
            value, end = _DECODER.raw_decode(text, start.start())
        except (ValueError, RecursionError):  # not JSON (or nested beyond reason) from here on
            at = start.start() + 1
            continue
        found.append((value, start.start(), end))
        at = end
    return found


def _json_and_prose(text: str) -> tuple[list[_Span], str] | None:
    """The JSON values in ``text`` and the text around them, each value blanked (JSON is read as JSON,
    never again as prose); None when ``text`` is unreadable (see ``_json_in``)."""
    spans = _json_in(text)
    if spans is None:
        return None
    prose = list(text)
    for _, start, end in spans:
        prose[start:end] = " " * (end - start)
    return spans, "".join(prose)


def _four_number_lists(value: Any) -> set[tuple[float, ...]]:
    """Every list of four finite numbers anywhere in a JSON value: the boxes it could be giving."""
    if isinstance(value, dict):
        return {box for item in value.values() for box in _four_number_lists(item)}
    if not isinstance(value, list):
        return set()
    found = {box for item in value for box in _four_number_lists(item)}
    if len(value) == 4 and None not in (numbers := tuple(finite_number(v) for v in value)):
        found.add(numbers)  # type: ignore[arg-type]
    return found


def find_json(text: str) -> Any | None:
    """The JSON object or array ``text`` answers with, or None: none, several different ones (a fenced
    '[3.2, 5.0]' beside a bare '[10, 12]' hedges just like two intervals in prose), or one beside a box
    in prose, "(x1, y1, x2, y2)", that it does not hold. The same value twice is one answer."""
    read = _json_and_prose(text)
    if read is None:
        return None
    spans, prose = read
    value = sole([value for value, _, _ in spans])
    if value is None:
        return None
    offered = {tuple(float(n) for n in m.groups()) for m in _PROSE_BOX.finditer(prose)}
    return value if offered <= _four_number_lists(value) else None


def as_json(value: Any) -> Any:
    """A ground truth as JSON data: strings are searched for JSON, anything else is taken as is."""
    return find_json(value) if isinstance(value, str) else value


def finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


_INTERVAL_KEYS = ("time", "timestamps", "timestamp", "interval", "segment")
_START_END_KEYS = (("start", "end"), ("start_time", "end_time"), ("begin", "end"))


def _seconds(token: str) -> float:
    if ":" in token:
        parts = [float(p) for p in token.split(":")]
        return sum(p * 60.0**i for i, p in enumerate(reversed(parts)))
    return float(token)


def as_interval(value: Any, *, swap: bool = False) -> tuple[float, float] | None:
    """``[s, e]`` with finite 0 ≤ s < e, else None. ``swap`` reads ``[e, s]`` as ``[s, e]``; the robust
    reader never asks for it (an interval written end first is invalid), it is kept for callers."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    start, end = finite_number(value[0]), finite_number(value[1])
    if start is None or end is None:
        return None
    if swap and end < start:
        start, end = end, start
    if start < 0 or end <= start:
        return None
    return (start, end)


def _as_pair(raw: Any) -> tuple[float | None, float | None]:
    """A candidate interval as a comparable pair, before validation (what is no finite number: None)."""
    if isinstance(raw, list | tuple) and len(raw) == 2:
        return (finite_number(raw[0]), finite_number(raw[1]))
    return (None, None)


def _object_fields(value: dict[str, Any]) -> list[Any]:
    """Every interval an object names, unvalidated: each ``time``-like key and each start/end pair."""
    return every_key(value, _INTERVAL_KEYS) + [
        [value[start], value[end]] for start, end in _START_END_KEYS if start in value and end in value
    ]


def _names_interval(item: Any) -> bool:
    """An item of a JSON list that offers an interval: a 2-list or an object with a time field."""
    return (isinstance(item, list) and len(item) == 2) or (
        isinstance(item, dict) and bool(_object_fields(item))
    )


def _time_fields(value: Any) -> list[Any]:
    """The intervals a JSON value offers, unvalidated; empty when it has no time field at all.

    An object offers every time field it has: two that differ are a hedge, as two in prose are (reading
    the first key alone let '{"time": [10, 20], "timestamps": [30, 40]}' answer twice). A bare 2-list is
    one interval. A longer list holding intervals is offered whole, as no one interval: several intervals
    at once are a hedge, and must not leave a prose interval beside them to be read alone."""
    if isinstance(value, dict):
        return _object_fields(value)
    if isinstance(value, list) and (len(value) == 2 or any(_names_interval(item) for item in value)):
        return [value]
    return []


def interval_from_json(value: Any, *, swap: bool = False) -> tuple[float, float] | bool | None:
    """``{"time": [s, e]}``, ``{"start": s, "end": e}`` or ``[s, e]``; None when it is invalid or its time
    fields differ (a hedge); False when ``value`` has no time field at all."""
    fields = _time_fields(value)
    if not fields:
        return False
    pair = sole([_as_pair(raw) for raw in fields])
    return None if pair is None else as_interval(pair, swap=swap)


def _interval_candidates(text: str) -> set[tuple[float | None, float | None]] | None:
    """Every different ``(start, end)`` ``text`` offers, valid or not: the time fields of each JSON value,
    fenced or not, and each interval in the prose around them (a fenced answer with "or maybe from 30 to
    40 s" beside it offers two). None when a time is offered two ways, or ``text`` is unreadable."""
    read = _json_and_prose(text)
    if read is None:
        return None
    spans, prose = read
    if _ALTERNATIVE_TIMES.search(prose):
        return None
    found = {_as_pair(raw) for value, _, _ in spans for raw in _time_fields(value)}
    for pattern in _INTERVAL_PATTERNS:
        found.update((_seconds(m.group("s")), _seconds(m.group("e"))) for m in pattern.finditer(prose))
    return found


def find_interval(text: str, *, answer: bool = False) -> tuple[float, float] | None:
    """The one time interval ``text`` gives, from JSON or prose, or None.

    Answers and ground truths are read alike (``answer`` is kept for callers and changes nothing): an
    interval written end first is invalid, not swapped; several different intervals, in one form or
    across forms ("[10, 20] or [30, 40]", '{"time": [10, 20]} or from 30 to 40 s', a fenced JSON interval
    with another one beside the fence), and a time offered two ways ("from 10 to 20 or 30 seconds") are a
    hedge → None. The same interval written twice, even in two forms, is one answer."""
    del answer
    found = _interval_candidates(text)
    return as_interval(found.pop()) if found is not None and len(found) == 1 else None


def as_box(value: Any) -> tuple[float, float, float, float] | None:
    """``[x1, y1, x2, y2]`` with finite coordinates, x2 > x1 and y2 > y1, else None."""
    if not isinstance(value, list | tuple) or len(value) != 4:
        return None
    coords = [finite_number(v) for v in value]
    if any(c is None for c in coords):
        return None
    x1, y1, x2, y2 = coords  # type: ignore[misc]
    if x2 <= x1 or y2 <= y1:
        return None
    return (x1, y1, x2, y2)


# Keys under which answers put a box, and under which per-frame records name their frame.
BOX_KEYS = ("bbox_2d", "bbox", "box", "boxes", "box_2d")
FRAME_KEYS = ("frame", "frame_id", "frame_index", "frame_idx", "time", "timestamp", "second")


def boxes_in(value: Any) -> list[Any]:
    """Raw box candidates in a JSON answer: a 4-list, a list of them, or dicts keyed bbox_2d/bbox/box(es)."""
    if isinstance(value, dict):
        return [box for raw in every_key(value, BOX_KEYS) for box in _boxes_under(raw)]
    if isinstance(value, list):
        if len(value) == 4 and all(not isinstance(v, list | dict) for v in value):
            return [value]
        return [box for item in value for box in boxes_in(item)]
    return []


def _boxes_under(raw: Any) -> list[Any]:
    """The boxes under one box key; a key given two different values (None, see ``_object``) offers an
    invalid one, so it still counts as an answer beside the others."""
    return [None] if raw is None else boxes_in(raw)


def single_box(value: Any) -> tuple[float, float, float, float] | None:
    """The one box a JSON answer gives, under every box key; several different boxes (an invalid one
    among them) are a hedge → None."""
    return sole([as_box(raw) for raw in boxes_in(value)])


def frame_key(key: Any) -> float | None:
    """Frame keys ("3", "3.0", 3) as one float so "3" and "3.0" name the same frame."""
    number = finite_number(key)
    return None if number is None or number < 0 else round(number, 3)


def _frame_records(records: list[Any]) -> list[tuple[Any, Any]]:
    """``[{"frame": 0, "bbox_2d": box}, …]`` → ``[(0, box), …]``, each box key of a record giving its frame
    a box (a record naming two boxes offers two); records without a box offer nothing."""
    pairs = []
    for record in records:
        frame = next((record[k] for k in FRAME_KEYS if k in record), None)
        pairs += [(frame, raw) for raw in every_key(record, BOX_KEYS)]
    return pairs


def _one_box_each(pairs: list[tuple[Any, Any]]) -> dict[float, tuple[float, float, float, float]]:
    """Valid boxes by frame from ``(frame key, raw box)`` pairs. A frame given two different boxes ("0" and
    "0.0", two records for frame 0) is a hedge and is dropped like an invalid box, i.e. scored as missing:
    keeping the last one let an answer try a second box for any frame."""
    given: dict[float, set[tuple[float, float, float, float] | None]] = {}
    for key, raw in pairs:
        frame = frame_key(key)
        if frame is not None:
            given.setdefault(frame, set()).add(as_box(raw))
    return {frame: boxes.pop() for frame, boxes in given.items() if len(boxes) == 1 and None not in boxes}


def boxes_by_frame(
    value: Any, frame_keys: Sequence[float] | None = None
) -> dict[float, tuple[float, float, float, float]] | None:
    """Valid boxes by frame from ``{"<sec>": box}``, ``[{"frame": f, "bbox_2d": box}, …]`` or a bare list of
    boxes, each also under ``"boxes"`` or another box key; invalid entries, and frames given two different
    boxes, are dropped.

    A bare list says nothing about which frames its boxes belong to. With ``frame_keys`` (the truth's
    frames, sorted) it is mapped onto them only when the lengths are equal, and is otherwise unreadable
    (None); without them (reading a truth) index = frame. None also when ``value`` is no per-frame form.
    """
    pairs = _frame_pairs(value, frame_keys)
    return None if pairs is None else _one_box_each(pairs)


def _frame_pairs(value: Any, frame_keys: Sequence[float] | None) -> list[tuple[Any, Any]] | None:
    """``(frame key, raw box)`` pairs of a per-frame answer (see ``boxes_by_frame``), or None.

    An object's frames are read wherever it gives them: under each box key and at its top level, so
    '{"boxes": {"0": A}, "0": B}' and '{"boxes": {"0": A}, "bbox": {"0": B}}' give frame 0 two boxes
    (reading "boxes" alone let the rest answer again). Keys that name no frame ("time", "label") are
    skipped by ``_one_box_each``."""
    if isinstance(value, dict):
        pairs = [(key, raw) for key, raw in value.items() if key not in BOX_KEYS]
        for raw in every_key(value, BOX_KEYS):
            inner = _frame_pairs(raw, frame_keys)
            if inner is None:
                return None
            pairs += inner
        return pairs
    if not isinstance(value, list):
        return None
    if value and all(isinstance(item, dict) for item in value):
        return _frame_records(value)
    if frame_keys is None:
        return list(enumerate(value))
    if len(value) == len(frame_keys):
        return list(zip(frame_keys, value, strict=True))
    return None

"""JSON answers (bare or in ``` fences), time intervals and boxes.

Validation is part of reading: a NaN/inf coordinate, an empty or inverted interval (end before start), a
negative start or a box with x2 ≤ x1 is not an answer at all. Answers and ground truths are read by one
rule: an interval written end first is invalid (not the reversed valid one), and several different
intervals, in one form or across forms, are a hedge that reads as nothing. (The benchmarks' own
temporal-grounding readers, which swap and take the first, live in ``services.reward.official``.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

# A fenced block: group 1 the language ("json", "svg", may be empty), group 2 the content. The rest of the
# info line ("```python title=x") is skipped only when a newline ends it, so "```{"a": 1}```" keeps its body.
# The blanks and the language are matched possessively (``*+``): backtracking into them could only move the
# search for the closing fence back over characters that hold no backtick, so it finds nothing new, yet it
# made an unclosed "```" before n word characters cost O(n²) inside one regex call (60 s for 80,000).
FENCE = re.compile(r"```[ \t]*+([\w+-]*+)(?:[^\n`]*\n)?(.*?)```", re.S)
_DECODER = json.JSONDecoder()
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
)
# A time offered two ways ("from 10 to 20 or 30 seconds", "10 or 12 - 20 s", "00:20/00:30"): a hedge.
_ALTERNATIVE_TIMES = re.compile(rf"(?<![\w.:]){_TIME}{_UNIT}\s*(?:\bor\b|/)\s*{_TIME}", re.I)


def _json_in(source: str, offset: int = 0) -> list[tuple[Any, int, int]]:
    """``(value, start, end)`` of each top-level JSON value in ``source``, positions shifted by ``offset``."""
    found: list[tuple[Any, int, int]] = []
    attempts, at = 0, 0
    while attempts < _MAX_JSON_STARTS and (start := _JSON_START.search(source, at)) is not None:
        attempts += 1
        try:
            value, end = _DECODER.raw_decode(source, start.start())
        except (ValueError, RecursionError):  # not JSON (or nested beyond reason) from here on
            at = start.start() + 1
            continue
        found.append((value, offset + start.start(), offset + end))
        at = end
    return found


def _fenced_json(text: str) -> list[tuple[Any, int, int]]:
    return [found for m in FENCE.finditer(text) for found in _json_in(m.group(2), m.start(2))]


def json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array in ``text``, in order: those in fenced blocks when they hold
    any, else those in the whole text. At most ``_MAX_JSON_STARTS`` decoding attempts per source."""
    return [value for value, _, _ in _fenced_json(text) or _json_in(text)]


_INTERVAL_KEYS = ("time", "timestamps", "timestamp", "interval", "segment")
_START_END_KEYS = (("start", "end"), ("start_time", "end_time"), ("begin", "end"))


def find_json(text: str) -> Any | None:
    """The JSON object or array ``text`` answers with (fenced blocks first), or None: none, or several
    different ones ("[3.2, 5.0] or [10, 12]" hedges just like two intervals in prose)."""
    values = json_values(text)
    if not values or any(v != values[0] for v in values[1:]):
        return None
    return values[0]


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


def _time_field(value: Any) -> Any:
    """What a JSON value gives as its interval, unvalidated: the ``time``-like field, ``[start, end]``
    from start/end keys, or a bare 2-list; False when it has no time field at all."""
    if isinstance(value, dict):
        for key in _INTERVAL_KEYS:
            if key in value:
                return value[key]
        for start, end in _START_END_KEYS:
            if start in value and end in value:
                return [value[start], value[end]]
        return False
    if isinstance(value, list) and len(value) == 2:
        return value
    return False


def interval_from_json(value: Any, *, swap: bool = False) -> tuple[float, float] | bool | None:
    """``{"time": [s, e]}``, ``{"start": s, "end": e}`` or ``[s, e]``; False when ``value`` has no time
    field at all."""
    raw = _time_field(value)
    return False if raw is False else as_interval(raw, swap=swap)


def _as_pair(raw: Any) -> tuple[float | None, float | None]:
    """A candidate interval as a comparable pair, before validation (what is no finite number: None)."""
    if isinstance(raw, list | tuple) and len(raw) == 2:
        return (finite_number(raw[0]), finite_number(raw[1]))
    return (None, None)


def _interval_candidates(text: str) -> set[tuple[float | None, float | None]] | None:
    """Every different ``(start, end)`` ``text`` offers, valid or not, or None when a time is offered two
    ways. With intervals in fenced JSON blocks, those alone (the answer is fenced; the text around it is
    commentary); otherwise the time field of each JSON value and each prose interval in the rest."""
    fenced = _fenced_json(text)
    spans = fenced or _json_in(text)
    found = {_as_pair(raw) for value, _, _ in spans if (raw := _time_field(value)) is not False}
    if fenced and found:
        return found
    prose = list(text)
    for _, start, end in spans:  # JSON is read as JSON, never again as prose
        prose[start:end] = " " * (end - start)
    rest = "".join(prose)
    if _ALTERNATIVE_TIMES.search(rest):
        return None
    for pattern in _INTERVAL_PATTERNS:
        found.update((_seconds(m.group("s")), _seconds(m.group("e"))) for m in pattern.finditer(rest))
    return found


def find_interval(text: str, *, answer: bool = False) -> tuple[float, float] | None:
    """The one time interval ``text`` gives, from JSON or prose, or None.

    Answers and ground truths are read alike (``answer`` is kept for callers and changes nothing): an
    interval written end first is invalid, not swapped; several different intervals, in one form or
    across forms ("[10, 20] or [30, 40]", '{"time": [10, 20]} or from 30 to 40 s'), and a time offered
    two ways ("from 10 to 20 or 30 seconds") are a hedge → None. The same interval written twice, even
    in two forms, is one answer."""
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
        for key in BOX_KEYS:
            if key in value:
                return boxes_in(value[key])
        return []
    if isinstance(value, list):
        if len(value) == 4 and all(not isinstance(v, list | dict) for v in value):
            return [value]
        return [box for item in value for box in boxes_in(item)]
    return []


def single_box(value: Any) -> tuple[float, float, float, float] | None:
    """The one box a JSON answer gives; several different boxes are a hedge → None."""
    raw = boxes_in(value)
    distinct = {tuple(b) if isinstance(b, list) else b for b in raw}
    if len(distinct) != 1:
        return None
    return as_box(raw[0])


def frame_key(key: Any) -> float | None:
    """Frame keys ("3", "3.0", 3) as one float so "3" and "3.0" name the same frame."""
    number = finite_number(key)
    return None if number is None or number < 0 else round(number, 3)


def _frame_records(records: list[Any]) -> dict[float, Any]:
    """``[{"frame": 0, "bbox_2d": box}, …]`` → ``{0.0: box, …}``; records without a usable frame or a box
    are dropped."""
    pairs = {}
    for record in records:
        frame = frame_key(next((record[k] for k in FRAME_KEYS if k in record), None))
        box = next((record[k] for k in BOX_KEYS if k in record), None)
        if frame is not None and box is not None:
            pairs[frame] = box
    return pairs


def boxes_by_frame(
    value: Any, frame_keys: Sequence[float] | None = None
) -> dict[float, tuple[float, float, float, float]] | None:
    """Valid boxes by frame from ``{"<sec>": box}``, ``[{"frame": f, "bbox_2d": box}, …]`` or a bare list of
    boxes (optionally under ``"boxes"``); invalid entries are dropped.

    A bare list says nothing about which frames its boxes belong to. With ``frame_keys`` (the truth's
    frames, sorted) it is mapped onto them only when the lengths are equal, and is otherwise unreadable
    (None); without them (reading a truth) index = frame. None also when ``value`` is no per-frame form.
    """
    if isinstance(value, dict) and "boxes" in value:
        value = value["boxes"]
    if isinstance(value, list):
        if value and all(isinstance(item, dict) for item in value):
            value = _frame_records(value)
        elif frame_keys is None:
            value = dict(enumerate(value))
        elif len(value) == len(frame_keys):
            value = dict(zip(frame_keys, value, strict=True))
        else:
            return None
    if not isinstance(value, dict):
        return None
    frames: dict[float, tuple[float, float, float, float]] = {}
    for key, raw in value.items():
        frame, box = frame_key(key), as_box(raw)
        if frame is not None and box is not None:
            frames[frame] = box
    return frames

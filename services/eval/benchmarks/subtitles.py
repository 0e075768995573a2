"""Subtitles as the benchmarks release them, and each protocol's rule for which lines the model reads.

Video-MME: SRT cues on screen at a sampled frame. LongVideoBench: its JSON cues, kept when a sampled
frame falls inside one (cues under a second widened to one second around their midpoint), in time
order. Video-MME-v2: word-level JSONL, every word in order ("concatenated" mode of the official
script). Frame times come from the clip's frame-store metadata, so the rule sees the frames the model
sees.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from services.eval.benchmarks.errors import BenchmarkError

Cue = tuple[float, float, str]  # start s, end s, text

_SRT_TIME = re.compile(r"(\d+):(\d+):(\d+)[,.](\d+)\s*-->\s*(\d+):(\d+):(\d+)[,.](\d+)")
_TAG = re.compile(r"<[^>]+>")


def parse_srt(text: str) -> list[Cue]:
    """(start s, end s, text) of every SRT cue, markup such as ``<font …>`` removed."""
    cues = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n").strip()):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            match = _SRT_TIME.search(line)
            if match:
                h1, m1, s1, f1, h2, m2, s2, f2 = (int(g) for g in match.groups())
                start = h1 * 3600 + m1 * 60 + s1 + f1 / 10 ** len(match.group(4))
                end = h2 * 3600 + m2 * 60 + s2 + f2 / 10 ** len(match.group(8))
                words = _TAG.sub("", " ".join(lines[i + 1 :])).strip()
                if words:
                    cues.append((start, end, words))
                break
    return cues


def frame_times(clip_meta: list[dict[str, Any]] | None) -> list[float] | None:
    """Timestamps (s) of a clip's sampled frames, from its frame-store metadata."""
    if not clip_meta:
        return None
    meta = clip_meta[0]
    if meta.get("timestamps") is not None:
        return [float(t) for t in meta["timestamps"]]
    fps = float(meta["fps"])
    return [int(i) / fps for i in meta["frames_indices"]]


def subtitles_at(cues: list[Cue], times: list[float] | None) -> list[str]:
    """Video-MME's rule: the cues on screen at a sampled frame (every cue when frames are unknown)."""
    if times is None:
        return [text for _, _, text in cues]
    return [text for start, end, text in cues if any(start <= t <= end for t in times)]


def _clock(value: str, where: str) -> float:
    """ "HH:MM:SS.mmm" → seconds."""
    try:
        hours, minutes, seconds = str(value).split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        raise BenchmarkError(f"{where}: subtitle time {value!r} is not HH:MM:SS.mmm") from None


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BenchmarkError(f"{where}: subtitle time {value!r} is not a number of seconds")
    try:
        return float(value)
    except ValueError:
        raise BenchmarkError(f"{where}: subtitle time {value!r} is not a number of seconds") from None


def read_lvb_subtitles(path: Path, offset: float, duration: float | None) -> list[Cue]:
    """LongVideoBench's subtitle JSON: a list of ``{"start": "HH:MM:SS.mmm", "end": …, "line": …}`` or
    ``{"timestamp": [s, e], "text": …}`` (``e`` null: until the end of the video). Times are shifted by
    the item's ``starting_timestamp_for_subtitles`` (``offset``) onto the video's own clock."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"{path}: invalid JSON ({exc.msg})") from None
    if not isinstance(records, list):
        raise BenchmarkError(f"{path}: LongVideoBench subtitles are a JSON list of cues")
    cues = []
    for i, record in enumerate(records):
        where = f"{path}#{i}"
        if not isinstance(record, dict):
            raise BenchmarkError(f"{where}: a subtitle cue must be an object")
        if "timestamp" in record:
            stamp = record["timestamp"]
            if not isinstance(stamp, list | tuple) or len(stamp) != 2:
                raise BenchmarkError(f"{where}: timestamp {stamp!r} is not [start, end]")
            start, end = _seconds(stamp[0], where), stamp[1]
            if end is None:
                if duration is None:
                    raise BenchmarkError(f"{where}: an open-ended cue needs the item's duration")
                end = duration
            end = _seconds(end, where)
            text = record.get("text", "")
        elif "start" in record and "end" in record:
            start, end = _clock(record["start"], where), _clock(record["end"], where)
            text = record.get("line", "")
        else:
            raise BenchmarkError(f"{where}: a subtitle cue needs 'timestamp' or 'start' and 'end'")
        cues.append((start - offset, end - offset, str(text).strip()))
    return cues


def lvb_subtitles_at(cues: list[Cue], times: list[float] | None) -> list[str]:
    """LongVideoBench's rule: a cue is kept when a sampled frame lies strictly inside it; a cue shorter
    than a second counts as the second around its midpoint (so brief lines near a frame survive).
    Every cue when frames are unknown."""
    kept = []
    for start, end, text in cues:
        if not text:
            continue
        if times is not None:
            if end - start < 1:
                middle = (start + end) / 2
                start, end = middle - 0.5, middle + 0.5
            if not any(start < t < end for t in times):
                continue
        kept.append(text)
    return kept


def read_word_transcript(path: Path) -> str:
    """Video-MME-v2's word-level JSONL (``{"text", "start_time", "end_time"}`` per line) as one text:
    the words in file order joined by spaces; an absent file is an empty transcript (as officially)."""
    if not path.is_file():
        return ""
    words = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            words.append(str(json.loads(line)["text"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise BenchmarkError(f"{path}:{n}: a subtitle line is a JSON object with a 'text'") from None
    return " ".join(words)

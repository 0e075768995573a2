"""Named official answer readers: each benchmark's released scoring rule, re-implemented.

The robust reader (``services.reward.types``) is what training rewards use: it reads "The answer is
B", "**B**", option text and units, and refuses hedges. An official reader reads a response the way the
benchmark's own scoring code does, so a headline figure is comparable with published numbers. A reader
is a pure function ``(response, prefix, sample) -> Read``: ``response`` is what the model generated and
``prefix`` the assistant-turn text it continued (MVBench's "Best option:("), because several official
rules treat the two differently.

A reader returns what the official code compares with the truth (a letter as the code would compare it,
case included; a number; an interval) and how to compare it (``compare``). Where the official code
draws a random option for an answer it cannot read, the reader says so (``random``): the item is then
scored wrong, deterministically, and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from services.reward.sample import RewardSample

Compare = Literal["exact", "mra", "iou", "given"]


class Read(NamedTuple):
    """What an official reader got from a response: ``value`` (None: unreadable), and whether the
    official code would have guessed at random here (scored wrong, counted apart)."""

    value: Any
    random: bool = False


ReaderFn = Callable[[str, str, RewardSample], Read]


@dataclass(frozen=True)
class OfficialReader:
    """``name``: registry key; ``rule``: the rule in a sentence; ``source``: repo · path · function of the
    official code it follows; ``compare``: how the read value is scored against the truth ("exact":
    equal to the truth's letter or text; "mra": VSI-Bench's mean relative accuracy; "iou": 1-D IoU;
    "given": the reader returns the accuracy itself, for rules that look at the truth)."""

    name: str
    rule: str
    source: str
    compare: Compare
    read: ReaderFn


_READERS: dict[str, OfficialReader] = {}


def official_reader(name: str, *, rule: str, source: str, compare: Compare = "exact"):
    """Register the decorated function as the official reader ``name``."""

    def wrap(fn: ReaderFn) -> ReaderFn:
        if name in _READERS:
            raise ValueError(f"official reader {name!r} is already registered")
        _READERS[name] = OfficialReader(name=name, rule=rule, source=source, compare=compare, read=fn)
        return fn

    return wrap


def get_official_reader(name: str) -> OfficialReader:
    try:
        return _READERS[name]
    except KeyError:
        raise KeyError(f"unknown official reader {name!r}; known: {', '.join(sorted(_READERS))}") from None


def official_reader_names() -> list[str]:
    return sorted(_READERS)

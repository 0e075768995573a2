"""Problem types: one registered unit per canonical type, looked up by canonical name or alias.

A unit reads the ground truth (``parse_truth``), reads an answer from the response's answer text
(``extract``) and scores it (``accuracy``). Format scoring and weighting are shared (services.reward.scoring).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from services.reward.errors import UnknownProblemType
from services.reward.sample import RewardSample

_SEPARATORS = re.compile(r"[\s_\-]+")


def normalise_name(name: str) -> str:
    """ "Multiple_Choice", "multiple-choice" and "multiple choice" are one name."""
    return _SEPARATORS.sub(" ", name.strip().casefold())


@dataclass(frozen=True)
class ScoreContext:
    """Per-call settings a unit may need: the limit of one math check, and the batch's deadline
    (a ``time.monotonic()`` value; None for no deadline)."""

    math_timeout_s: float
    deadline: float | None = None


class ProblemType(ABC):
    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str]
    # Narrow the answer text to the clause after "the answer is …" (off for free text and JSON answers).
    narrow_phrases: ClassVar[bool] = True

    @abstractmethod
    def parse_truth(self, sample: RewardSample) -> Any:
        """The ground truth in the unit's own form; raises InvalidSample naming the sample."""

    @abstractmethod
    def extract(self, text: str, sample: RewardSample) -> Any | None:
        """The answer ``text`` gives, or None when it gives none (or hedges)."""

    @abstractmethod
    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        """Accuracy in [0, 1] of a parsed answer against the parsed truth."""

    def waits(self, parsed: Any, truth: Any) -> bool:
        """True when ``accuracy`` would wait on a helper process for this pair (math): the batch scorers
        then run it on a pool thread, so a slow check does not hold up the items after it."""
        return False

    def jsonable(self, parsed: Any) -> Any:
        """``parsed`` as JSON-ready data for ``RewardResult.extracted``."""
        return parsed


_TYPES: dict[str, ProblemType] = {}
_LOOKUP: dict[str, str] = {}


def register(cls: type[ProblemType]) -> type[ProblemType]:
    unit = cls()
    for spelling in (cls.name, *cls.aliases):
        key = normalise_name(spelling)
        if key in _LOOKUP and _LOOKUP[key] != cls.name:
            raise ValueError(f"problem type name {spelling!r} already belongs to {_LOOKUP[key]!r}")
        _LOOKUP[key] = cls.name
    _TYPES[cls.name] = unit
    return cls


def canonical_name(name: str) -> str:
    """The canonical name for ``name`` (canonical or alias); UnknownProblemType lists the known ones."""
    try:
        return _LOOKUP[normalise_name(name)]
    except KeyError:
        raise UnknownProblemType(name, known_names()) from None


def get_type(name: str) -> ProblemType:
    return _TYPES[canonical_name(name)]


def known_names() -> list[str]:
    return sorted(_TYPES)


def all_types() -> list[ProblemType]:
    return [_TYPES[name] for name in known_names()]


def describe_types() -> list[dict[str, Any]]:
    """Name, aliases and description of every type (what ``GET /v1/problem-types`` returns)."""
    return [{"name": t.name, "aliases": list(t.aliases), "description": t.description} for t in all_types()]

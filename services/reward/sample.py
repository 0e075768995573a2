"""The reward-side view of a sample (SPEC §2): what scoring needs, everything else kept as extra.

A shared ``Sample`` model will live in services/common; this one stays the validating edge of the reward
library and accepts its dicts unchanged.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from services.reward.errors import InvalidSample

# "A. red", "A: red", "A) red", "(A) red", "A．red" — the ways option lists spell their letters.
_LETTERED = re.compile(r"^\s*\(?([A-Z])\s*[.):：．]\s*(.*)$", re.S)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
MAX_OPTIONS = 26

# Bounds on the sample texts scoring reads (docs/rewards.md, "Bounds"): with them, and the response limit,
# every scorer's work is bounded. Far above real data: the longest references are code and descriptions.
MAX_ANSWER_CHARS = 100_000  # the ground truth (answer or solution): its text, or JSON data as compact JSON
MAX_OPTION_CHARS = 4_000  # each option's text
MAX_NAME_CHARS = 1_000  # problem_type and id (error messages quote them)


def answer_chars(value: Any) -> int:
    """The size of a ground truth as scoring reads it: a string's length, other data's as compact JSON."""
    if isinstance(value, str):
        return len(value)
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))
    except (ValueError, RecursionError) as exc:  # circular, or nested beyond reason
        raise ValueError(f"the ground truth cannot be read as JSON data ({exc})") from None


def check_answer_size(value: Any) -> Any:
    size = answer_chars(value)
    if size > MAX_ANSWER_CHARS:
        raise ValueError(
            f"the ground truth has {size:,} characters; at most {MAX_ANSWER_CHARS:,} are scored (MAX_ANSWER_CHARS)"
        )
    return value


def check_options_size(value: Any) -> Any:
    if isinstance(value, str):
        texts: Any = value.splitlines()
    elif isinstance(value, Mapping):
        texts = value.values()
    else:
        texts = value if isinstance(value, list | tuple) else ()
    for index, item in enumerate(texts):
        text = item.text if isinstance(item, Option) else item
        if isinstance(text, str) and len(text) > MAX_OPTION_CHARS:
            raise ValueError(
                f"option {index} has {len(text):,} characters; at most {MAX_OPTION_CHARS:,} (MAX_OPTION_CHARS)"
            )
    return value


def check_name_size(value: Any) -> Any:
    if isinstance(value, str | int) and len(text := str(value)) > MAX_NAME_CHARS:
        raise ValueError(f"{len(text):,} characters; at most {MAX_NAME_CHARS:,} (MAX_NAME_CHARS)")
    return value


# The bounds as pydantic types, for request models that otherwise take a sample as it comes.
BoundedAnswer = Annotated[Any, AfterValidator(check_answer_size)]
BoundedOptions = Annotated[Any, AfterValidator(check_options_size)]
BoundedName = Annotated[Any, AfterValidator(check_name_size)]


class Option(BaseModel):
    model_config = ConfigDict(frozen=True)

    letter: str
    text: str


def parse_options(raw: Any) -> tuple[Option, ...]:
    """Options as a list ("A. red" or plain texts), a {"A": "red"} dict, or one newline-joined string.

    Letters written in the options are kept when every option has one and they are distinct; otherwise
    letters A, B, C… are assigned in order.
    """
    if raw is None:
        return ()
    if isinstance(raw, dict):
        items = [(str(k).strip().upper(), str(v).strip()) for k, v in raw.items()]
        if not all(len(k) == 1 and k in string.ascii_uppercase for k, _ in items):
            raise InvalidSample(f"options dict keys must be single letters, got {list(raw)[:5]}")
        return tuple(Option(letter=k, text=v) for k, v in items)
    if isinstance(raw, str):
        raw = [line for line in raw.splitlines() if line.strip()]
    if not isinstance(raw, list | tuple) or not all(isinstance(o, str | int | float) for o in raw):
        raise InvalidSample(
            "options must be a list of strings, a letter→text dict or a newline-joined string"
        )
    texts = [str(o).strip() for o in raw]
    if len(texts) > MAX_OPTIONS:
        raise InvalidSample(f"{len(texts)} options; at most {MAX_OPTIONS} (A–Z) are supported")
    matches = [_LETTERED.match(t) for t in texts]
    letters = [m.group(1) for m in matches if m]
    if len(letters) == len(texts) and len(set(letters)) == len(letters):
        return tuple(Option(letter=m.group(1), text=m.group(2).strip()) for m in matches if m)
    return tuple(Option(letter=string.ascii_uppercase[i], text=t) for i, t in enumerate(texts))


def unwrap_answer_tag(value: Any) -> Any:
    """Ground truths are often stored as ``<answer>B</answer>``; scoring wants the inside."""
    if isinstance(value, str):
        match = _ANSWER_TAG.search(value)
        return (match.group(1) if match else value).strip()
    return value


class RewardSample(BaseModel):
    """``problem_type`` and ``answer`` are required; ``solution`` (Video-R1 schema) stands in for answer."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    problem_type: str = Field(max_length=MAX_NAME_CHARS)
    answer: Any
    options: tuple[Option, ...] = ()
    id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    problem: str | None = None
    data_type: str | None = None
    # Where present (grounding), the frame/video extent lets hedging defences tell "everything" apart.
    width: float | None = Field(None, gt=0)
    height: float | None = Field(None, gt=0)
    duration: float | None = Field(None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _solution_as_answer(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("answer") is None and data.get("solution") is not None:
            data = {**data, "answer": data["solution"]}
        return data

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        return None if value is None else str(value)

    @field_validator("answer", mode="before")
    @classmethod
    def _unwrap(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError("the sample has no answer (ground truth); 'answer' (or 'solution') is required")
        return unwrap_answer_tag(check_answer_size(value))

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, value: Any) -> tuple[Option, ...]:
        check_options_size(value)
        if value and isinstance(value, list | tuple) and all(isinstance(o, Option) for o in value):
            return tuple(value)
        try:
            return parse_options(value)
        except InvalidSample as exc:
            raise ValueError(str(exc)) from None

    @property
    def label(self) -> str:
        """How errors name this sample."""
        return f"sample {self.id!r}" if self.id else "sample (no id)"

    def extra_field(self, name: str, default: Any = None) -> Any:
        return (self.model_extra or {}).get(name, default)

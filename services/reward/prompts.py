"""Prompts from the Jinja2 templates beside the types: ``templates/<type>.jinja`` fills the answer-format
block of ``_instruct.jinja`` or ``_thinking.jinja``. Trainer and evaluator both render through here, and
``template_version`` goes into every result manifest."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Literal

import jinja2

from services.reward.errors import InvalidSample
from services.reward.registry import canonical_name
from services.reward.sample import RewardSample
from services.reward.scoring import SampleLike, as_sample

Variant = Literal["instruct", "thinking"]
VARIANTS: tuple[Variant, ...] = ("instruct", "thinking")
TEMPLATE_DIR = Path(__file__).with_name("templates")


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,  # plain-text prompts, never HTML
    )


def template_file(problem_type: str) -> str:
    return canonical_name(problem_type).replace(" ", "_").replace("-", "_") + ".jinja"


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown prompt variant {variant!r}; choose one of {', '.join(VARIANTS)}")


def render_prompt(sample: SampleLike | RewardSample, variant: Variant = "instruct") -> str:
    """The user prompt for ``sample`` (its ``problem`` and lettered ``options``)."""
    _check_variant(variant)
    parsed = as_sample(sample)
    if not parsed.problem:
        raise InvalidSample(f"{parsed.label}: cannot render a prompt without 'problem'")
    template = _environment().get_template(template_file(parsed.problem_type))
    return template.render(base=f"_{variant}.jinja", problem=parsed.problem.strip(), options=parsed.options)


def template_version(problem_type: str, variant: Variant = "instruct") -> str:
    """First 12 hex digits of sha256 over the variant's base and the type's template sources."""
    _check_variant(variant)
    digest = hashlib.sha256()
    for name in (f"_{variant}.jinja", template_file(problem_type)):
        digest.update((TEMPLATE_DIR / name).read_bytes())
    return digest.hexdigest()[:12]

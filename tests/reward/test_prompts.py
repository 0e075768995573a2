"""Prompt templates: every type renders in both variants; versions change with the templates."""

import pytest

from services.reward import InvalidSample, all_types, render_prompt, template_version


def test_multiple_choice_instruct_prompt():
    sample = {
        "problem_type": "mcq",
        "answer": "B",
        "problem": "What colour is the car?",
        "options": ["red", "blue"],
    }
    assert render_prompt(sample) == (
        "What colour is the car?\n"
        "Options:\n"
        "A. red\n"
        "B. blue\n"
        "Answer with the letter of the single best option (for example: B). "
        "Put only the final answer between <answer> and </answer> tags."
    )


def test_thinking_variant_asks_for_think_then_answer():
    prompt = render_prompt({"problem_type": "counting", "answer": 3, "problem": "How many cups?"}, "thinking")
    assert prompt.startswith("How many cups?\nThink the question through")
    assert "<think> and </think>" in prompt and "<answer> and </answer>" in prompt
    assert prompt.endswith("Answer with a single whole number (for example: 4).")


@pytest.mark.parametrize("variant", ["instruct", "thinking"])
@pytest.mark.parametrize("unit", all_types(), ids=lambda u: u.name)
def test_every_type_renders(unit, variant):
    prompt = render_prompt({"problem_type": unit.name, "answer": "x", "problem": "Q?"}, variant)
    assert prompt.startswith("Q?\n")
    assert "<answer>" in prompt
    assert len(template_version(unit.name, variant)) == 12


def test_versions_differ_by_type_and_variant():
    versions = {template_version(u.name, v) for u in all_types() for v in ("instruct", "thinking")}
    assert len(versions) == 2 * len(all_types())


def test_errors():
    with pytest.raises(InvalidSample, match="without 'problem'"):
        render_prompt({"problem_type": "mcq", "answer": "A"})
    with pytest.raises(ValueError, match="unknown prompt variant 'chatty'"):
        render_prompt({"problem_type": "mcq", "answer": "A", "problem": "Q"}, "chatty")

"""The problem-type registry: canonical names, aliases, one unit each."""

import pytest

from services.reward import UnknownProblemType, all_types, canonical_name, known_names

SPEC_TYPES = {
    "multiple choice": ["multiple_choice", "mcq"],
    "numerical": ["number"],
    "regression": [],
    "boolean": ["binary classification", "yes/no"],
    "counting": [],
    "ocr": [],
    "open-ended": ["free-form", "video qa", "video description"],
    "math": [],
    "temporal grounding": [],
    "spatial grounding": [],
    "spatial-temporal grounding": [],
    "tracking": [],
    "segmentation": [],
    "code": ["svg-code", "html-code"],
    "preference": ["llava", "critic"],
}


def test_every_spec_type_is_registered_once():
    assert set(known_names()) == set(SPEC_TYPES)
    assert len(all_types()) == len(SPEC_TYPES)


@pytest.mark.parametrize(
    ("canonical", "alias"), [(c, a) for c, aliases in SPEC_TYPES.items() for a in [c, *aliases]]
)
def test_spec_aliases_resolve(canonical, alias):
    assert canonical_name(alias) == canonical
    assert canonical_name(alias.upper().replace(" ", "_")) == canonical  # case and separators are free


def test_unknown_name_is_an_error_not_a_fallback():
    with pytest.raises(UnknownProblemType, match="unknown problem_type 'rouge'"):
        canonical_name("rouge")


def test_every_type_has_a_template_and_description():
    from services.reward.prompts import TEMPLATE_DIR, template_file

    for unit in all_types():
        assert unit.description
        assert (TEMPLATE_DIR / template_file(unit.name)).is_file()

"""Translation of vLLM's weight-version labels into the engine's version numbers."""

from __future__ import annotations

import pytest
from vllm.outputs import WeightVersionSpan

from services.rollout.vllm_bridge import version_number, version_spans


def test_version_labels_are_the_engines_counter():
    assert version_number("default") == 0  # vLLM's label before the first push
    assert version_number("12") == 12
    with pytest.raises(ValueError, match="weight version 'step-3', which no ReelRL engine set"):
        version_number("step-3")


def test_spans_become_first_token_and_version_pairs():
    spans = [WeightVersionSpan("default", 0, 7), WeightVersionSpan("1", 7, 20)]
    assert version_spans(spans, current=1) == ((0, 0), (7, 1))
    # vLLM reports [] for a response without tokens: it gets the engine's current version
    assert version_spans([], current=4) == ((0, 4),)
    with pytest.raises(RuntimeError, match="no weight versions"):
        version_spans(None, current=0)

"""The realtime source decodes with the store's own pipeline: frames bit-identical to the cached ones."""

from __future__ import annotations

import pytest
import torch

from services.common.frames import ParamsMismatch
from services.rollout.sources import RealtimeSource


@pytest.fixture(scope="module")
def realtime(clips) -> tuple[RealtimeSource, str]:
    key = clips.keys["qwen2_5_vl"]["wide"]
    return RealtimeSource({key: (clips.videos["wide"], clips.params["qwen2_5_vl"]["wide"])}), key


def test_decoded_frames_equal_the_cached_ones(clips, realtime):
    source, key = realtime
    frames, meta = source.load(key, expect=clips.params["qwen2_5_vl"]["wide"])
    cached, cached_meta = clips.store.load(key)
    assert torch.equal(frames, cached)
    assert meta["frames_indices"] == cached_meta["frames_indices"]
    assert meta["fps"] == cached_meta["fps"]


def test_other_expected_params_and_unknown_keys_are_errors(clips, realtime):
    source, key = realtime
    other = clips.params["qwen2_5_vl"]["wide"].model_copy(update={"max_frames": 16})
    with pytest.raises(
        ParamsMismatch,
        match=rf"clip {key} was decoded with other parameters \(max_frames: stored 768 != requested 16\)",
    ):
        source.load(key, expect=other)
    with pytest.raises(KeyError, match="clip nope is not known"):
        source.load("nope", expect=None)

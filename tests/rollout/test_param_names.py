"""Weight pushes are checked by tensor name before anything is sent: vLLM would keep the old value of
every tensor it was not given, without an error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from services.rollout.checkpoint import Checkpoint
from services.rollout.param_names import ParameterNames, folder_names, safetensors_header_names
from services.rollout.weight_sync import reload_call, safetensors_bytes

NAMES = ParameterNames(
    layouts=(frozenset({"a.w", "b.w", "lm_head.weight"}), frozenset({"a.stored", "b.w", "lm_head.weight"})),
    optional=frozenset({"lm_head.weight"}),
)


@pytest.mark.parametrize(
    "names",
    [
        {"a.w", "b.w", "lm_head.weight"},  # the first layout exactly
        {"a.stored", "b.w", "lm_head.weight"},  # the second layout exactly
        {"a.w", "b.w"},  # a tied lm_head may be left out
    ],
)
def test_complete_layouts_are_accepted(names):
    NAMES.check(names, "state dict")


@pytest.mark.parametrize(
    ("names", "message"),
    [
        # closest layout is the first: 1 missing (b.w), nothing unexpected
        (
            {"a.w", "lm_head.weight"},
            r"state dict does not match the checkpoint's 3 parameters: 1 missing \(e\.g\. \['b\.w'\]\)",
        ),
        # 0 missing, 1 unexpected against the first layout
        ({"a.w", "b.w", "c.w"}, r"3 parameters: 1 unexpected \(e\.g\. \['c\.w'\]\)"),
        # a mix of layouts: 1 missing and 1 unexpected against either
        ({"a.w", "a.stored", "lm_head.weight"}, r"1 missing \(e\.g\. \['b\.w'\]\) and 1 unexpected"),
    ],
)
def test_incomplete_or_foreign_names_are_refused_with_counts_and_examples(names, message):
    with pytest.raises(ValueError, match=message):
        NAMES.check(names, "state dict")


def test_header_names_are_read_without_the_tensors(tmp_path):
    state = {"x.weight": torch.zeros(2, 3), "y.bias": torch.ones(4)}
    assert sorted(safetensors_header_names(safetensors_bytes(state))) == ["x.weight", "y.bias"]
    save_file({"z": torch.zeros(1)}, tmp_path / "b.safetensors")
    save_file({"x.weight": torch.zeros(1)}, tmp_path / "a.safetensors")
    assert folder_names(tmp_path) == ["x.weight", "z"]  # files in name order


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x00", "too short"),
        ((100).to_bytes(8, "little") + b"{}", "claims 100 bytes but the data holds 2"),
    ],
)
def test_broken_headers_are_errors(data, message):
    with pytest.raises(ValueError, match=message):
        safetensors_header_names(data)


def test_a_folder_without_safetensors_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"holds no \*\.safetensors file"):
        folder_names(tmp_path)


@pytest.fixture(scope="module")
def checkpoint(tiny_models) -> Checkpoint:
    return Checkpoint.load(tiny_models["qwen2_5_vl"])


def test_a_checkpoint_accepts_its_state_dict_names_and_its_files_names(checkpoint, hf_model, tiny_models):
    state_dict = hf_model(tiny_models["qwen2_5_vl"]).state_dict()
    expected = checkpoint.parameter_names
    expected.check(state_dict, "state dict")
    expected.check(folder_names(tiny_models["qwen2_5_vl"]), "folder")
    # transformers stores Qwen2.5-VL's language model as model.* and loads it as model.language_model.*
    assert "model.language_model.embed_tokens.weight" in state_dict
    assert "model.embed_tokens.weight" in set(folder_names(tiny_models["qwen2_5_vl"]))


@pytest.mark.parametrize("form", ["state dict", "bytes", "folder"])
def test_reload_call_refuses_a_push_without_the_vision_tower_before_sending(
    checkpoint, hf_model, tiny_models, tmp_path, form
):
    state_dict = hf_model(tiny_models["qwen2_5_vl"]).state_dict()
    language = {k: v for k, v in state_dict.items() if not k.startswith("model.visual.")}
    dropped = len(state_dict) - len(language)
    weights: object = language
    if form == "bytes":
        weights = safetensors_bytes(language)
    elif form == "folder":
        save_file({k: v.contiguous() for k, v in language.items()}, tmp_path / "model.safetensors")
        weights = Path(tmp_path)
    with (
        pytest.raises(ValueError, match=rf"{dropped} missing \(e\.g\. \['model\.visual\."),
        reload_call(weights, "file", checkpoint.parameter_names),
    ):
        pytest.fail("the push was not refused")

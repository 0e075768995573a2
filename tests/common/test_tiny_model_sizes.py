"""Random-weight checkpoints at real sizes (`make-tiny-model --size real`): the configs reproduce the
public checkpoints' parameter counts, checked on the meta device (no weights are allocated here)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForImageTextToText
from typer.testing import CliRunner

from services.cli import app
from services.common.tiny_models.architectures import TokenIds, get_architecture
from services.common.tiny_models.tokenizer import real_qwen_tokenizer

# Parameter counts of the public checkpoints (their safetensors index / model card).
PUBLISHED = {"qwen2_vl": 8_291_375_616, "qwen2_5_vl": 8_292_166_656, "qwen3_vl": 8_767_123_696}


@pytest.fixture(scope="module")
def ids() -> TokenIds:
    return TokenIds.from_tokenizer(real_qwen_tokenizer())


def meta_model(family: str, ids: TokenIds, size: str):
    config = get_architecture(family).config(ids, size)
    with torch.device("meta"):
        return config, AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)


@pytest.mark.parametrize("family", sorted(PUBLISHED))
def test_real_sizes_match_the_published_checkpoints(ids, family):
    config, model = meta_model(family, ids, "real")
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[family]
    assert config.image_token_id == ids.image and config.video_token_id == ids.video
    assert config.tie_word_embeddings is False


def test_qwen2_vl_2b_matches_the_published_checkpoint_with_its_head_untied(ids):
    # the real-size weight-sync figure's checkpoint (bench/bench_weight_sync.py --family qwen2_vl --size 2b)
    config, model = meta_model("qwen2_vl", ids, "2b")
    head = model.lm_head.weight.numel()
    assert sum(p.numel() for p in model.parameters()) - head == 2_208_985_600  # Qwen2-VL-2B-Instruct, tied
    assert head == 151936 * 1536 and config.tie_word_embeddings is False


def test_qwen2_vl_1b_is_past_a_billion_parameters(ids):
    # the sharded-load memory test's checkpoint (tests/trainer/test_sharded_load.py): not a public size
    config, model = meta_model("qwen2_vl", ids, "1b")
    assert sum(p.numel() for p in model.parameters()) == 1_221_335_552
    assert (config.text_config.num_hidden_layers, config.vision_config.depth) == (12, 8)


def test_qwen2_5_vl_3b_matches_the_published_checkpoint_with_its_head_tied(ids):
    # the one-GPU script's checkpoint (bench/gpu/run.sh; its fp32 training state fits an H200) and the
    # real-size tied one (tests/trainer/test_weight_buckets.py): the head is the embeddings' parameter,
    # counted once, as in the published count
    config, model = meta_model("qwen2_5_vl", ids, "3b")
    assert config.tie_word_embeddings is True and config.text_config.tie_word_embeddings is True
    assert model.lm_head.weight is model.get_input_embeddings().weight
    assert sum(p.numel() for p in model.parameters()) == 3_754_622_976  # Qwen2.5-VL-3B-Instruct
    assert model.lm_head.weight.shape == (151936, 2048)
    assert config.vision_config.out_hidden_size == config.text_config.hidden_size
    assert get_architecture("qwen2_5_vl").config(ids, "real").text_config.hidden_size == 3584  # still 7B
    # --untied: the same dimensions with a head of its own (the build the recorded GPU figures measured)
    untied = get_architecture("qwen2_5_vl").config(ids, "3b", tied=False)
    assert untied.tie_word_embeddings is False and untied.text_config.hidden_size == 2048


def test_qwen3_5_9b_is_hybrid_at_full_size(ids):
    config, model = meta_model("qwen3_5", ids, "9b")
    text = config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.head_dim) == (4096, 32, 256)
    # three Gated DeltaNet layers to each full attention layer
    assert text.layer_types.count("full_attention") == 8 and text.layer_types[3] == "full_attention"
    assert model.lm_head.weight.shape == (248320, 4096)
    assert config.vision_config.out_hidden_size == text.hidden_size


def test_tiny_stays_tiny_and_unknown_sizes_are_refused(ids, tmp_path):
    config, _ = meta_model("qwen3_vl", ids, "tiny")
    assert config.text_config.hidden_size == 128
    with pytest.raises(ValueError, match="no size '70b' for family qwen3_vl; sizes: tiny, real, 8b"):
        get_architecture("qwen3_vl").config(ids, "70b")
    result = CliRunner().invoke(
        app, ["make-tiny-model", str(tmp_path / "m"), "--family", "qwen2_vl", "--size", "8b"]
    )
    assert (
        result.exit_code == 2
        and "no size '8b' for family qwen2_vl; sizes: tiny, real, 7b, 2b" in result.output
    )
    assert not (tmp_path / "m").exists()

"""The tiny checkpoint builder: tokenizer, configs, processors, determinism, offline loading."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from services.common.families import get_family
from services.common.tiny_models import build_tiny_model
from services.common.tiny_models.architectures import ARCHITECTURES
from services.common.tiny_models.cli import make_tiny_model
from services.common.tiny_models.tokenizer import (
    SPECIAL_TOKENS,
    THINK_TOKENS,
    real_qwen_tokenizer,
    train_bpe,
    trained_tokenizer,
)

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


@pytest.fixture(scope="module")
def tokenizer():
    return trained_tokenizer()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {family: build_tiny_model(family, root / family, seed=0) for family in FAMILIES}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_special_tokens_follow_the_bpe_vocabulary_in_qwen_order(tokenizer):
    vocab, _ = train_bpe()
    ids = tokenizer.convert_tokens_to_ids([*SPECIAL_TOKENS, *THINK_TOKENS])
    # Qwen appends <|endoftext|>, <|im_start|>, ... right after the BPE ranks, in this order.
    assert ids == list(range(len(vocab), len(vocab) + len(SPECIAL_TOKENS) + len(THINK_TOKENS)))
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"


def test_think_tokens_survive_skip_special_tokens_but_chat_tokens_do_not(tokenizer):
    text = "<|im_start|><think>x</think><answer>B</answer><|im_end|>"
    ids = tokenizer(text).input_ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>x</think><answer>B</answer>"


@pytest.mark.parametrize(
    "text",
    [
        "What is happening in the video?",
        "  leading spaces, tabs\tand\nnewlines\r\n",
        "数字 1234567 and émigré café",
        "emoji 🎬🎥 and symbols ∑∫√ <svg/>",
        "",
    ],
)
def test_byte_level_bpe_round_trips_any_text(tokenizer, text):
    assert tokenizer.decode(tokenizer(text).input_ids) == text


def test_common_words_are_single_tokens(tokenizer):
    # The corpus repeats these words, so BPE merges each (with its leading space) into one token.
    for word in [" video", " answer", " the", " people"]:
        assert len(tokenizer(word).input_ids) == 1, word


def test_bpe_training_is_deterministic_across_processes():
    code = (
        "import hashlib, json;"
        "from services.common.tiny_models.tokenizer import train_bpe;"
        "v, m = train_bpe();"
        "print(hashlib.sha256(json.dumps([sorted(v.items()), m]).encode()).hexdigest())"
    )
    here = train_bpe()
    expected = hashlib.sha256(json.dumps([sorted(here[0].items()), here[1]]).encode()).hexdigest()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


def test_chat_template_renders_qwen_vl_turns(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "<answer>A</answer>"},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "And here?"}]},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>What happens?<|im_end|>\n"
        "<|im_start|>assistant\n<answer>A</answer><|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>And here?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_folder_holds_every_file_loaders_read(models, family):
    names = {p.name for p in models[family].iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "processor_config.json",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
    } <= names


@pytest.mark.parametrize("family", FAMILIES)
def test_config_agrees_with_tokenizer_and_family(models, family, tokenizer):
    config = json.loads((models[family] / "config.json").read_text())
    fam = get_family(family)
    assert config["model_type"] == fam.model_type
    assert config["video_token_id"] == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config["image_token_id"] == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config["vision_start_token_id"] == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    text = config["text_config"]
    assert text["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    # Embedding rows: the tokenizer's length rounded up to a multiple of 64.
    assert text["vocab_size"] == -(-len(tokenizer) // 64) * 64
    assert text["vocab_size"] - 64 < len(tokenizer) <= text["vocab_size"]
    assert config["vision_config"]["patch_size"] == fam.patch_size
    assert config["vision_config"]["spatial_merge_size"] == fam.merge_size
    # mrope sections cover half the head: 8 + 12 + 12 = 32 = (128 / 2 heads) / 2
    assert sum(text["rope_parameters"]["mrope_section"]) == 128 // 2 // 2


@pytest.mark.parametrize("family", FAMILIES)
def test_image_and_video_processors_share_normalisation(models, family):
    image = json.loads((models[family] / "preprocessor_config.json").read_text())
    video = json.loads((models[family] / "video_preprocessor_config.json").read_text())
    assert image["image_mean"] == video["image_mean"] == list(ARCHITECTURES[get_family(family).name].mean)
    assert image["image_std"] == video["image_std"]
    assert image["patch_size"] == video["patch_size"] == get_family(family).patch_size


@pytest.mark.parametrize("family", FAMILIES)
def test_loaded_processors_normalise_images_and_videos_alike(models, family):
    # vLLM normalises video frames with the image processor's statistics: the loaded pair must agree
    processor = AutoProcessor.from_pretrained(models[family])
    image, video = processor.image_processor, processor.video_processor
    assert (
        list(image.image_mean) == list(video.image_mean) == list(ARCHITECTURES[get_family(family).name].mean)
    )
    assert list(image.image_std) == list(video.image_std) == list(ARCHITECTURES[get_family(family).name].std)


# (family, frame side) → video_grid_thw: 8 frames / temporal patch 2 = 4; 56 / patch 14 = 4; 64 / 16 = 4.
# Placeholders = 4·4·4 / merge² (4) = 16 tokens per clip.
@pytest.mark.parametrize(("family", "side"), [("qwen2_vl", 56), ("qwen2_5_vl", 56), ("qwen3_vl", 64)])
def test_transformers_loads_and_runs_the_checkpoint_on_a_video(models, family, side):
    processor = AutoProcessor.from_pretrained(models[family])
    model = AutoModelForImageTextToText.from_pretrained(models[family]).eval()
    assert sum(p.numel() for p in model.parameters()) < 1_500_000
    frames = torch.randint(
        0, 256, (8, side, side, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    metadata = {
        "fps": 30.0,
        "duration": 4.0,
        "total_num_frames": 120,
        "frames_indices": list(range(0, 120, 15)),
    }
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(
        text=[text],
        videos=[frames],
        video_metadata=[metadata],
        do_sample_frames=False,
        do_resize=False,
        return_tensors="pt",
    )
    assert inputs["video_grid_thw"].tolist() == [[4, 4, 4]]
    video_id = model.config.video_token_id
    assert int((inputs["input_ids"] == video_id).sum()) == 16
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (1, inputs["input_ids"].shape[1], model.config.text_config.vocab_size)
    assert torch.isfinite(logits).all()


def test_same_seed_gives_identical_weights_and_another_seed_does_not(tmp_path, models):
    again = build_tiny_model("qwen2_5_vl", tmp_path / "again", seed=0)
    other = build_tiny_model("qwen2_5_vl", tmp_path / "other", seed=1)
    reference = _sha256(models["qwen2_5_vl"] / "model.safetensors")
    assert _sha256(again / "model.safetensors") == reference
    assert _sha256(other / "model.safetensors") != reference
    assert (again / "tokenizer.json").read_bytes() == (models["qwen2_5_vl"] / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_a_tied_checkpoint_holds_no_head_of_its_own(tmp_path, family):
    """``tied=True`` (``make-tiny-model --tied``): the config ties the LM head at both levels (transformers
    reads the root, vLLM's language model the text config), the file holds no ``lm_head.weight``, and
    transformers loads a head that is the embeddings' parameter."""
    from safetensors import safe_open

    out = make_tiny_model(family, tmp_path / "tied", tied=True)
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["text_config"]["tie_word_embeddings"] is True
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        assert "lm_head.weight" not in handle.keys()  # noqa: SIM118 (a safetensors handle)
    model = AutoModelForImageTextToText.from_pretrained(out)
    assert model.lm_head.weight is model.get_input_embeddings().weight


def test_building_does_not_disturb_the_callers_random_state(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model("qwen2_vl", tmp_path / "m", seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_refuses_to_write_into_a_non_empty_folder(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="taken"):
        make_tiny_model("qwen2_vl", tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no staging folder left behind


def test_an_empty_folder_is_filled(tmp_path):
    (tmp_path / "empty").mkdir()
    out = make_tiny_model("qwen2_vl", tmp_path / "empty")
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("family", "message"),
    [("llama", "unknown model family 'llama'")],
)
def test_unknown_or_unsupported_families_are_named(tmp_path, family, message):
    with pytest.raises(ValueError, match=message):
        make_tiny_model(family, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_real_qwen_tokenizer_gives_real_qwen_ids():
    tok = real_qwen_tokenizer()
    # Qwen's published ids: <|endoftext|> 151643, <|im_start|> 151644, <|vision_start|> 151652,
    # <|video_pad|> 151656; "Hello" 9707, " world" 1879, "," 11.
    assert tok.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_start|>", "<|vision_start|>", "<|video_pad|>"]
    ) == [
        151643,
        151644,
        151652,
        151656,
    ]
    assert tok("Hello world,").input_ids == [9707, 1879, 11]


@pytest.mark.slow
def test_real_tokenizer_checkpoint_embeds_every_qwen_id(tmp_path):
    out = make_tiny_model("qwen2_5_vl", tmp_path / "real", real_tokenizer=True)
    config = json.loads((out / "config.json").read_text())
    # 151,643 ranks + 14 special + 2 think tokens = 151,659 → rounded up to a multiple of 64: 151,680
    assert config["text_config"]["vocab_size"] == 151_680
    assert config["video_token_id"] == 151_656
    processor = AutoProcessor.from_pretrained(out)
    assert processor.tokenizer("Hello world,").input_ids == [9707, 1879, 11]


@pytest.mark.parametrize(
    ("family", "out", "message"),
    [
        (
            "qwen2_vl",
            "taken",
            "error: {root}/taken exists and is not an empty folder; choose a new output path",
        ),
        ("llama", "m", "error: unknown model family 'llama'; known families: "),
        ("qwen2_vl", "file.txt/m", "error: {root}/file.txt/m: {root}/file.txt is a file, so it cannot hold"),
    ],
)
def test_cli_user_errors_are_one_line(tmp_path, family, out, message):
    from typer.testing import CliRunner

    from services.cli import app

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    (tmp_path / "file.txt").write_text("a file")
    result = CliRunner().invoke(app, ["make-tiny-model", str(tmp_path / out), "--family", family])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(message.format(root=tmp_path)) and result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "taken"]  # nothing written

"""Training data preparation against a real frame store and worker pool: clip keys, preprocessing of
missing clips, cached_only refusing to start, undecodable and overlong samples dropped and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from services.common.frames import FrameStore
from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models.tokenizer import trained_tokenizer
from services.trainer.config import DataConfig
from services.trainer.data import DataError, prepare_split, prepare_splits, video_tokens_from_meta

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def tokenizer():
    return trained_tokenizer()


@pytest.fixture
def dataset(tmp_path: Path) -> dict[str, Path]:
    return make_task_datasets(tmp_path / "data", train_videos=4, val_videos=2)


def _cfg(**kw) -> DataConfig:
    base = {"train_files": ["x"], "video_fps": None, "video_nframes": 4, "video_min_pixels": 3136,
            "video_max_pixels": 3136, "batch_size": 2}  # fmt: skip
    return DataConfig.model_validate({**base, **kw})


def test_cached_only_names_the_missing_samples(reelrl_home: Path, dataset, tokenizer, tmp_path: Path) -> None:
    store = FrameStore.from_settings()
    with pytest.raises(DataError, match=r"cached_only but 4 train sample\(s\).*'train-colour-train_0000'"):
        prepare_split(
            [str(dataset["colour_train"])], _cfg(source_mode="cached_only"), "qwen2_5_vl", tokenizer, store,
            tmp_path / "work", split="train",
        )  # fmt: skip


def test_missing_clips_are_preprocessed_and_bad_ones_dropped(
    reelrl_home: Path, dataset, tokenizer, tmp_path: Path
) -> None:
    store = FrameStore.from_settings()
    rows = [json.loads(line) for line in dataset["colour_mix"].read_text().splitlines()]
    broken = dataset["colour_mix"].parent / "videos" / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42 this is not a video")
    rows.append({**rows[0], "id": "broken-one", "videos": ["videos/broken.mp4"]})
    path = dataset["colour_mix"].with_name("with_broken.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    samples, report = prepare_split(
        [str(path)], _cfg(), "qwen2_5_vl", tokenizer, store, tmp_path / "work", split="train"
    )
    assert (report.loaded, report.kept, report.dropped_decode, report.preprocessed) == (5, 4, 1, 5)
    assert any("broken-one" in e for e in report.errors)
    first = samples[0]
    assert all(store.has(k) for s in samples for k in s.rollout.videos)
    # 4 frames of 56x56, patch 14, merge 2: (4/2) * 4 * 4 / 4 = 8 video tokens
    meta = json.loads((store.path_for(first.rollout.videos[0]) / "meta.json").read_text())
    assert (
        video_tokens_from_meta(
            meta, __import__("services.common.families", fromlist=["x"]).get_family("qwen2_5_vl")
        )
        == 8
    )
    assert first.rollout.offline_output == f"<answer>{first.sample.answer}</answer>"
    assert "Options:" in first.rollout.prompt and first.reward["answer"] == first.sample.answer
    assert first.problem_type == "multiple choice"

    # A second preparation finds every clip cached: nothing is decoded again.
    again, report2 = prepare_split(
        [str(dataset["colour_mix"])], _cfg(source_mode="cached_only"), "qwen2_5_vl", tokenizer, store,
        tmp_path / "work", split="train",
    )  # fmt: skip
    assert report2.preprocessed == 0 and [s.rollout.videos for s in again] == [
        s.rollout.videos for s in samples
    ]

    # Prompts longer than the budget are dropped and counted, not truncated.
    _, report3 = prepare_split(
        [str(dataset["colour_mix"])], _cfg(max_prompt_tokens=20), "qwen2_5_vl", tokenizer, store,
        tmp_path / "work", split="train",
    )  # fmt: skip
    assert (report3.kept, report3.dropped_overlong) == (0, 4)


def test_splits_share_one_pool_that_decodes_each_clip_once(
    reelrl_home: Path, dataset, tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import services.preprocess.dispatch as dispatch

    rows = [json.loads(line) for line in dataset["colour_mix"].read_text().splitlines()]
    (dataset["colour_mix"].parent / "videos" / "broken.mp4").write_bytes(
        b"\x00\x00\x00\x18ftypmp42 not a video"
    )
    rows.append({**rows[0], "id": "broken-one", "videos": ["videos/broken.mp4"]})
    mixed = dataset["colour_mix"].with_name("with_broken.jsonl")
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pools: list[Path] = []
    real = dispatch.run_preprocess

    def counted(pending: Path, *args, **kwargs):  # the real pool, counted
        pools.append(Path(pending))
        return real(pending, *args, **kwargs)

    monkeypatch.setattr(dispatch, "run_preprocess", counted)
    store = FrameStore.from_settings()
    # warm-up reads the training file again: its clips are the training split's, decoded once
    splits = {"train": [str(mixed)], "val": [str(dataset["colour_val"])], "warmup": [str(mixed)]}
    prepared = prepare_splits(splits, _cfg(), "qwen2_5_vl", tokenizer, store, tmp_path / "work")

    assert len(pools) == 1 and pools[0].name == "train+val+warmup.pending.jsonl"
    assert len(pools[0].read_text().splitlines()) == 4 + 1 + 2  # distinct clips: train, the broken one, val
    for split in ("train", "warmup"):  # the broken clip fails every sample that uses it, in each split
        samples, report = prepared[split]
        assert (report.loaded, report.kept, report.dropped_decode, report.preprocessed) == (5, 4, 1, 5), split
        assert any("broken-one" in e for e in report.errors)
        assert all(store.has(k) for s in samples for k in s.rollout.videos)
    _, val_report = prepared["val"]
    assert (val_report.kept, val_report.dropped_decode, val_report.preprocessed) == (2, 0, 2)
    assert [s.rollout.videos for s in prepared["train"][0]] == [
        s.rollout.videos for s in prepared["warmup"][0]
    ]

    # everything decodable is cached now: preparing again (prefer_cached) starts no pool
    cached = {"train": [str(dataset["colour_mix"])], "val": [str(dataset["colour_val"])]}
    again = prepare_splits(cached, _cfg(), "qwen2_5_vl", tokenizer, store, tmp_path / "w")
    assert len(pools) == 1 and {k: r.preprocessed for k, (_, r) in again.items()} == {"train": 0, "val": 0}


def test_unknown_problem_type_fails_at_start(reelrl_home: Path, dataset, tokenizer, tmp_path: Path) -> None:
    row = json.loads(dataset["colour_mix"].read_text().splitlines()[0])
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({**row, "videos": [str(dataset["colour_mix"].parent / row["videos"][0])],
                                "problem_type": "interpretive dance"}) + "\n")  # fmt: skip
    with pytest.raises(DataError, match="interpretive dance"):
        prepare_split(
            [str(path)], _cfg(), "qwen2_5_vl", tokenizer, FrameStore.from_settings(), tmp_path, split="train"
        )


def test_image_samples_are_read_from_their_files_within_the_image_budget(
    reelrl_home: Path, tokenizer, tmp_path: Path
) -> None:
    from services.common.families import get_family
    from services.common.synthetic_tasks import make_image_task
    from services.rollout.sources import ImageFiles, WithImages

    path = make_image_task(tmp_path / "data", 3, size=56)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    from PIL import Image

    folder = path.parent / "images"
    (folder / "broken.png").write_bytes(b"not a png")
    whole = (folder / rows[0]["images"][0].split("/")[-1]).read_bytes()
    (folder / "truncated.png").write_bytes(whole[: len(whole) // 2])  # a good header, half the pixels
    Image.new("RGB", (1000, 4)).save(folder / "sliver.png")  # no size in the budget keeps this shape
    rows += [
        {**rows[0], "id": "broken-image", "images": ["images/broken.png"]},
        {**rows[0], "id": "truncated-image", "images": ["images/truncated.png"]},
        {**rows[0], "id": "sliver-image", "images": ["images/sliver.png"]},
        {**rows[0], "id": "two-images", "images": rows[0]["images"] * 2},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = FrameStore.from_settings()
    # at most 2 merged patches' worth of pixels: the 56x56 image (4 tokens at full size) keeps its shape
    # and is read at 28x28
    images = ImageFiles({}, factor=28, min_pixels=784, max_pixels=2 * 784)
    samples, report = prepare_split(
        [str(path)], _cfg(source_mode="cached_only"), "qwen2_5_vl", tokenizer, store, tmp_path / "work",
        split="train", images=images, media_limits={"image": 1, "video": 1},
    )  # fmt: skip
    # images are never preprocessed (cached_only does not refuse them); unusable ones are dropped at
    # start, each with its reason, and so is a sample with more images than the engine takes
    assert (report.loaded, report.kept, report.preprocessed) == (7, 3, 0)
    assert (report.dropped_decode, report.dropped_media) == (3, 1)
    for name in ("broken-image", "truncated-image", "sliver-image", "two-images"):
        assert any(name in e for e in report.errors), name
    first = samples[0]
    assert first.rollout.videos == () and len(first.rollout.images) == 1
    key = first.rollout.images[0]
    assert images.images[key] == str(path.parent / "images" / rows[0]["images"][0].split("/")[-1])
    frames, meta = WithImages(store, images).load(key, None)
    assert tuple(frames.shape) == (1, 28, 28, 3) and frames.dtype == torch.uint8
    assert (meta["source_width"], meta["source_height"], meta["width"], meta["height"]) == (56, 56, 28, 28)
    # (28/14)·(28/14)/2² = 1 image token; the reward sees the frame size the model sees
    text = len(tokenizer(first.rollout.prompt, add_special_tokens=False).input_ids)
    assert first.prompt_tokens == text + 1 + 16
    assert (first.reward["width"], first.reward["height"]) == (28, 28)
    assert get_family("qwen2_5_vl").factor == 28
    # without an image source an image sample is refused at start, naming it
    with pytest.raises(DataError, match="image-colour-0000"):
        prepare_split([str(path)], _cfg(), "qwen2_5_vl", tokenizer, store, tmp_path / "w2", split="train")

"""realtime_only: a sample whose video no decoder reads is dropped and counted at setup, like in the
preprocessed modes, whatever the decoder raised; the run goes on with the others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.common.frames import FrameStore
from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models.tokenizer import trained_tokenizer
from services.rollout.sources import RealtimeSource
from services.trainer.config import DataConfig
from services.trainer.data import prepare_split

pytestmark = [pytest.mark.integration]


def test_an_undecodable_video_drops_its_sample_in_realtime_mode(reelrl_home: Path, tmp_path: Path) -> None:
    dataset = make_task_datasets(tmp_path / "data", train_videos=2, val_videos=1)
    rows = [json.loads(line) for line in dataset["colour_train"].read_text().splitlines()]
    broken = dataset["colour_train"].parent / "videos" / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42 this is not a video")
    rows.append({**rows[0], "id": "broken-one", "videos": ["videos/broken.mp4"]})
    path = dataset["colour_train"].with_name("with_broken.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DataConfig.model_validate(
        {"train_files": ["x"], "video_fps": None, "video_nframes": 4, "video_min_pixels": 3136,
         "video_max_pixels": 3136, "batch_size": 2, "source_mode": "realtime_only"}
    )  # fmt: skip
    store = FrameStore.from_settings()
    realtime = RealtimeSource({}, store.decoders, store.threads)
    samples, report = prepare_split(
        [str(path)], cfg, "qwen2_5_vl", trained_tokenizer(), store, tmp_path / "work", split="train",
        realtime=realtime,
    )  # fmt: skip
    assert (report.loaded, report.kept, report.dropped_decode) == (len(rows), len(rows) - 1, 1)
    (error,) = [e for e in report.errors if "broken-one" in e]
    assert f"cannot decode its video: {broken} · decord, pyav · no decoder could read it" in error, error
    assert "broken-one" not in {s.sample.id for s in samples}

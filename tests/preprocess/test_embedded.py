"""`reelrl preprocess` on embedded defaults: SQLite, filesystem broker, real celery worker processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames import FrameStore, VideoParams
from services.common.settings import reset_settings_cache
from services.preprocess.dataset import read_jsonl
from services.preprocess.dispatch import run_preprocess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_bad_inputs_fail_alone_and_the_batch_completes(
    reelrl_home, data_dir, tmp_path, monkeypatch, write_dataset
):
    outside = tmp_path / "outside.mp4"
    outside.write_bytes((data_dir / "videos" / "short.mp4").read_bytes())
    (data_dir / "videos" / "empty.mp4").write_bytes(b"")
    (data_dir / "videos" / "notes.mp4").write_text("not a video\n" * 40)
    good = (data_dir / "videos" / "wide.mp4").read_bytes()
    (data_dir / "videos" / "truncated.mp4").write_bytes(good[: len(good) // 3])
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(data_dir))
    reset_settings_cache()
    dataset = write_dataset(
        tmp_path / "in.jsonl",
        [
            {"id": "ok-1", "videos": ["videos/short.mp4"], "answer": "A"},
            {"id": "missing", "videos": ["videos/nope.mp4"]},
            {"id": "empty", "videos": ["videos/empty.mp4"]},
            {"id": "text", "videos": ["videos/notes.mp4"]},
            {"id": "truncated", "videos": ["videos/truncated.mp4"]},
            {"id": "outside", "videos": [str(outside)]},
            {"id": "escape", "videos": ["../outside.mp4"]},
            {"id": "absurd", "videos": ["videos/tall.mp4"], "video_params": {"max_frames": 0}},
            {"id": "tiny-pixels", "videos": ["videos/tall.mp4"], "video_params": {"max_pixels": 10}},
            "{not json",
            {"id": "ok-2", "videos": ["videos/tall.mp4", "videos/wide.mp4"]},
            {"id": "no-video", "problem": "text only"},
        ],
    )
    out = tmp_path / "out.jsonl"
    report = run_preprocess(dataset, out, VideoParams(max_frames=8), workers=1, timeout_s=240)

    ok = {r["id"]: r for r in read_jsonl(out)}
    assert set(ok) == {"ok-1", "ok-2", "no-video"}
    assert len(ok["ok-2"]["clips"]) == 2 and ok["no-video"]["clips"] == []
    assert ok["ok-1"]["answer"] == "A"  # input fields are kept
    failed = {r.get("id", "bad-json"): r["error"] for r in read_jsonl(out.with_name("out.failed.jsonl"))}
    expectations = {
        "missing": "videos/nope.mp4: file not found",
        "empty": "videos/empty.mp4: file is empty (0 bytes)",
        "text": "notes.mp4: no decoder could read it",
        "truncated": "truncated.mp4: no decoder could read it",
        "outside": "outside the data roots",
        "escape": "outside the data roots",
        "absurd": "invalid video_params: max_frames",
        "tiny-pixels": "invalid video_params: max_pixels=10 is below one 28x28 patch",
        "bad-json": "line 10: invalid JSON",
    }
    assert set(failed) == set(expectations)
    for sample, fragment in expectations.items():
        assert fragment in failed[sample], (sample, failed[sample])
    assert (report.samples, report.succeeded, report.failed, report.clip_failures) == (12, 3, 9, 2)

    store = FrameStore.from_settings()
    for key in ok["ok-1"]["clips"] + ok["ok-2"]["clips"]:
        frames, meta = store.load(key, expect=VideoParams(max_frames=8))
        assert frames.shape[0] == meta["num_frames"] <= 8
    with session_scope() as session:
        failed_clips = session.scalars(select(FrameClip).where(FrameClip.status == ClipStatus.failed)).all()
        assert len(failed_clips) == 2 and all(c.error for c in failed_clips)


def test_dedup_and_cache_hits(reelrl_home, data_dir, tmp_path, write_dataset):
    copy = data_dir / "videos" / "copy_of_short.mp4"
    copy.write_bytes((data_dir / "videos" / "short.mp4").read_bytes())
    dataset = write_dataset(
        tmp_path / "in.jsonl",
        [
            {"id": "a", "videos": [str(data_dir / "videos/short.mp4")]},
            {"id": "b", "videos": [str(data_dir / "videos/short.mp4")]},
            {"id": "c", "videos": [str(copy)]},  # same bytes, other path: the same clip
            {"id": "d", "videos": [str(data_dir / "videos/wide.mp4")], "video_params": {"fps": 1.0}},
        ],
    )
    out = tmp_path / "out.jsonl"
    first = run_preprocess(dataset, out, VideoParams(max_frames=8), workers=1, timeout_s=240)
    rows = read_jsonl(out)
    assert rows[0]["clips"] == rows[1]["clips"] == rows[2]["clips"]
    assert (first.clips, first.cached, first.decoded) == (2, 0, 2)
    again = run_preprocess(
        dataset, tmp_path / "again.jsonl", VideoParams(max_frames=8), workers=1, timeout_s=240
    )
    assert (again.clips, again.cached, again.decoded) == (2, 2, 0)
    assert read_jsonl(tmp_path / "again.jsonl") == rows
    with session_scope() as session:
        clips = session.scalars(select(FrameClip)).all()
        assert sorted(c.attempts for c in clips) == [1, 1]
        short = next(c for c in clips if c.key == rows[0]["clips"][0])
        assert sorted(short.asset.paths) == sorted([str(data_dir / "videos/short.mp4"), str(copy)])


@pytest.mark.e2e
def test_cli_end_to_end(reelrl_home, tmp_path):
    env = {**os.environ, "REELRL_HOME": str(reelrl_home)}
    reelrl = [sys.executable, "-m", "services.cli"]
    subprocess.run([*reelrl, "make-sample-data", str(tmp_path / "demo")], check=True, env=env)
    done = subprocess.run(
        [*reelrl, "preprocess", str(tmp_path / "demo/train.jsonl"), "--out", str(tmp_path / "out.jsonl"),
         "--max-frames", "8", "--workers", "2", "--timeout", "240"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "8 samples: 8 ok, 0 failed" in done.stderr and "4 decoded" in done.stderr
    rows = [json.loads(line) for line in Path(tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(len(r["clips"]) == 1 for r in rows)
    stats = subprocess.run([*reelrl, "cache", "stats"], env=env, capture_output=True, text=True, check=True)
    assert "clips ready" in stats.stdout and "│       4 │" in stats.stdout.replace(
        "│        4 │", "│       4 │"
    )
    bad = subprocess.run(
        [*reelrl, "preprocess", str(tmp_path / "demo/train.jsonl"), "--max-frames", "0"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "invalid max_frames" in bad.stderr

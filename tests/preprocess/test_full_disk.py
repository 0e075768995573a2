"""A full disk is the machine's failure, not the video's: the clip is recorded as retryable, and once
there is space again a plain rerun decodes it (it used to report "failed in an earlier run" forever).
The frame root is a tmpfs this test mounts (root, as CI is) too small for the clip, then grows."""

from __future__ import annotations

import subprocess

import pytest
from sqlalchemy import select

from services.common.db import FrameClip, session_scope
from services.common.frames import VideoParams
from services.common.settings import reset_settings_cache
from services.preprocess.dispatch import run_preprocess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def small_frame_root(tmp_path, monkeypatch):
    root = tmp_path / "frames"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "reelrl-test-full", str(root)], check=True)
    monkeypatch.setenv("REELRL_FRAME_ROOT", str(root))
    reset_settings_cache()
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_a_clip_that_met_a_full_disk_is_decoded_by_the_next_plain_run(
    reelrl_home, small_frame_root, video_dir, tmp_path, write_dataset
):
    dataset = write_dataset(tmp_path / "in.jsonl", [{"id": "a", "videos": [str(video_dir / "wide.mp4")]}])
    params = VideoParams(max_frames=8)  # ~8 x 240 x 420 x 3 bytes: far beyond 64 KiB
    first = run_preprocess(dataset, tmp_path / "out.jsonl", params, workers=1, timeout_s=240)
    assert first.failed == 1 and "No space left on device" in first.errors[0], first.errors
    assert "not the video: the next run decodes it again" in first.errors[0]
    with session_scope() as session:
        (clip,) = session.scalars(select(FrameClip)).all()
        assert clip.retryable is True
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_frame_root)], check=True)
    again = run_preprocess(dataset, tmp_path / "out.jsonl", params, workers=1, timeout_s=240)
    assert (again.succeeded, again.failed, again.known_failed, again.decoded) == (1, 0, 0, 1), again.errors
    with session_scope() as session:
        (clip,) = session.scalars(select(FrameClip)).all()
        assert clip.status == "ready"

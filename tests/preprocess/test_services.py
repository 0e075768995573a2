"""The worker pool on production wiring: real Postgres index, Redis broker, celery worker processes."""

import os
import signal
import threading
import time

import pytest
from sqlalchemy import select

from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames import FrameStore, VideoParams
from services.common.frames.synthetic import make_video
from services.common.settings import reset_settings_cache
from services.preprocess.dataset import read_jsonl
from services.preprocess.dispatch import run_preprocess
from services.preprocess.local_workers import LocalWorkers

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.twin
def test_redis_postgres_batch_and_duplicate_submission(services_env, data_dir, tmp_path, write_dataset):
    rows = [
        {"id": f"s{i}", "videos": [f"videos/{name}"]}
        for i, name in enumerate(["short.mp4", "wide.mp4", "tall.mp4"] * 2)
    ]
    dataset = write_dataset(data_dir / "in.jsonl", rows)
    params = VideoParams(max_frames=8)
    results = {}

    def submit(name: str) -> None:
        results[name] = run_preprocess(dataset, tmp_path / f"{name}.jsonl", params, workers=0, timeout_s=240)

    # Two submissions of the same dataset at once, served by one pool of two worker processes.
    with LocalWorkers(2):
        threads = [threading.Thread(target=submit, args=(n,)) for n in ("first", "second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert set(results) == {"first", "second"}
    assert read_jsonl(tmp_path / "first.jsonl") == read_jsonl(tmp_path / "second.jsonl")
    assert all(r.succeeded == 6 and r.failed == 0 and r.clips == 3 for r in results.values())
    # Each clip is counted as decoded by the one run that queued it; the other run waited for it (or,
    # if it asked after the decode finished, found it cached).
    assert results["first"].decoded + results["second"].decoded == 3
    assert all(r.decoded + r.waited + r.cached == 3 for r in results.values())
    with session_scope() as session:
        clips = session.scalars(select(FrameClip)).all()
    # Each clip was claimed and decoded exactly once, whoever asked for it.
    assert len(clips) == 3 and all(c.status == ClipStatus.ready and c.attempts == 1 for c in clips)
    assert sum(c.requests for c in clips) == 12
    store = FrameStore.from_settings()
    assert sorted(store.keys()) == sorted(c.key for c in clips)


@pytest.mark.parametrize("wiring", ["services_env", "reelrl_home"])
def test_worker_killed_mid_decode_is_redelivered(wiring, request, tmp_path, write_dataset, monkeypatch):
    """Redis redelivers the task itself; the embedded broker cannot, so the dispatcher re-queues."""
    request.getfixturevalue(wiring)
    # 6 s: a 2 s lease lapsed under the second worker's live decode beside another suite (3 attempts)
    monkeypatch.setenv("REELRL_CLIP_LEASE_S", "6")
    reset_settings_cache()
    # Long enough (several seconds of decode + resize on one thread) to be caught mid-decode.
    video = make_video(tmp_path / "data" / "long.mp4", seconds=30, fps=30, width=640, height=360, crf=35)
    dataset = write_dataset(tmp_path / "data" / "in.jsonl", [{"id": "long", "videos": [str(video)]}])
    params = VideoParams(fps=8.0, max_frames=240, max_pixels=640 * 360)
    outcome = {}

    def submit() -> None:
        outcome["report"] = run_preprocess(dataset, tmp_path / "out.jsonl", params, workers=0, timeout_s=300)

    store = FrameStore.from_settings()
    with LocalWorkers(1):
        thread = threading.Thread(target=submit)
        thread.start()
        victim, key = None, None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline:
            with session_scope() as session:
                clip = session.scalar(select(FrameClip))
                if clip is not None and clip.status == ClipStatus.running and clip.worker:
                    victim, key = int(clip.worker.split(":")[1]), clip.key
            time.sleep(0.02)
        assert victim is not None, "the clip never started decoding"
        os.kill(victim, signal.SIGKILL)
        with session_scope() as session:
            state = session.scalar(select(FrameClip.status).where(FrameClip.key == key))
        assert state == ClipStatus.running, "the clip finished before the worker could be killed"
        assert not store.has(key)  # nothing partial is visible
        thread.join(300)
    report = outcome["report"]
    assert report.succeeded == 1 and report.failed == 0
    with session_scope() as session:
        clip = session.scalar(select(FrameClip).where(FrameClip.key == key))
        assert clip.status == ClipStatus.ready and clip.attempts == 2
        assert int(clip.worker.split(":")[1]) != victim
    frames, meta = store.load(key, expect=params)
    assert frames.shape[0] == meta["num_frames"] == 240

"""One clip through the worker function: claims, leases, attempts, hung decoders (SQLite, in-process)."""

import time

from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames import FrameStore, VideoParams, clip_key
from services.common.frames.decoders import DECODERS, register_decoder
from services.common.frames.hashing import content_hash
from services.common.frames.index import Claim, claim_clip, register_asset, request_clip
from services.common.settings import reset_settings_cache
from services.preprocess.worker import process_clip


def _queue(path, params=VideoParams(max_frames=4)):
    chash = content_hash(path)
    key = clip_key(chash, params)
    with session_scope() as session:
        asset = register_asset(session, chash, path.stat().st_size, str(path))
        session.flush()
        request_clip(session, key, asset, params.canonical())
    return key


def _clip(key):
    with session_scope() as session:
        return session.query(FrameClip).filter_by(key=key).one()


def test_process_clip_is_idempotent(reelrl_home, video_dir):
    key = _queue(video_dir / "short.mp4")
    assert process_clip(key).outcome == "ready"
    assert process_clip(key).outcome == "ready"  # a duplicate message does nothing
    clip = _clip(key)
    assert clip.attempts == 1 and clip.num_frames == 4 and clip.timings["total_s"] > 0
    assert FrameStore.from_settings().has(key)


def test_claims_leases_and_attempts(reelrl_home, video_dir):
    key = _queue(video_dir / "wide.mp4")
    with session_scope() as session:
        assert claim_clip(session, key, "w1", 0.3, 3).outcome is Claim.claimed
        busy = claim_clip(session, key, "w2", 0.3, 3)
        assert busy.outcome is Claim.busy and busy.lease_until is not None
        time.sleep(0.4)  # w1 died: its lease lapses
        assert claim_clip(session, key, "w2", 0.3, 3).outcome is Claim.claimed
        time.sleep(0.4)
        assert claim_clip(session, key, "w3", 0.3, 3).outcome is Claim.claimed
        time.sleep(0.4)
        # A fourth take-over exceeds three attempts: the clip is failed, not retried forever.
        gave_up = claim_clip(session, key, "w4", 0.3, 3)
        assert gave_up.outcome is Claim.failed
    clip = _clip(key)
    assert clip.status == ClipStatus.failed and "gave up after 3 attempts" in clip.error
    # Asking again (a new run) re-queues a failed clip.
    with session_scope() as session:
        again = session.query(FrameClip).filter_by(key=key).one()
        request_clip(session, key, again.asset, again.params)
    assert process_clip(key).outcome == "ready"


def test_hung_decoder_is_failed_and_the_process_flagged_for_replacement(reelrl_home, video_dir, monkeypatch):
    class Hangs:
        def __init__(self, path, threads):
            time.sleep(20)

    register_decoder("test-hang")(Hangs)
    monkeypatch.setenv("REELRL_DECODERS", "test-hang,pyav")
    monkeypatch.setenv("REELRL_DECODE_TIMEOUT_S", "0.5")
    reset_settings_cache()
    try:
        key = _queue(video_dir / "tall.mp4")
        outcome = process_clip(key)
    finally:
        DECODERS.pop("test-hang")
    assert outcome.outcome == "failed" and outcome.recycle_process
    assert "did not finish within 0.5 s" in _clip(key).error
    assert not FrameStore.from_settings().has(key)


def test_changed_source_is_not_decoded_under_the_old_key(reelrl_home, video_dir, tmp_path):
    source = tmp_path / "v.mp4"
    source.write_bytes((video_dir / "short.mp4").read_bytes())
    key = _queue(source)
    source.write_bytes((video_dir / "wide.mp4").read_bytes())  # replaced after it was queued
    outcome = process_clip(key)
    assert outcome.outcome == "failed" and "content changed since it was queued" in outcome.error


def test_unknown_key_is_reported(reelrl_home):
    assert process_clip("0" * 64).outcome == "missing"

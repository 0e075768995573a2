"""One clip through the worker function: claims, leases, attempts, hung decoders (SQLite, in-process)."""

import json
import shutil
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames import FrameStore, VideoParams, clip_key
from services.common.frames.decoders import DECODERS, register_decoder
from services.common.frames.hashing import content_hash
from services.common.frames.index import Claim, Requested, claim_clip, register_asset, request_clip
from services.common.settings import get_settings, reset_settings_cache
from services.preprocess.tasks import CLIP_TASK, handle_clip
from services.preprocess.worker import process_clip


def _queue(path, params=VideoParams(max_frames=4)):
    chash = content_hash(path)
    key = clip_key(chash, params)
    with session_scope() as session:
        asset = register_asset(session, chash, path.stat().st_size, str(path))
        session.flush()
        request_clip(session, key, asset, params.canonical(), present=FrameStore.from_settings().has)
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
    # A new request leaves a known failure alone; asked to retry, it queues the clip again.
    with session_scope() as session:
        again = session.query(FrameClip).filter_by(key=key).one()
        has = FrameStore.from_settings().has
        skipped = request_clip(session, key, again.asset, again.params, present=has)
        assert skipped.outcome is Requested.known_failed and "gave up after 3 attempts" in skipped.error
        retried = request_clip(session, key, again.asset, again.params, present=has, retry_failed=True)
        assert retried.outcome is Requested.queued
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


def test_a_clip_held_by_another_worker_frees_the_slot_at_once(reelrl_home, video_dir, monkeypatch):
    # A short task time limit: a task that waited for the other worker would give up with TimeoutError.
    monkeypatch.setenv("REELRL_TASK_SOFT_TIME_LIMIT_S", "1")
    monkeypatch.setenv("REELRL_TASK_TIME_LIMIT_S", "2")
    reset_settings_cache()
    key = _queue(video_dir / "short.mp4")
    with session_scope() as session:
        held = claim_clip(session, key, "other", 60, 3)
    outcome = process_clip(key)
    assert outcome.outcome == "busy" and outcome.lease_until == held.lease_until
    clip = _clip(key)
    assert (clip.status, clip.worker, clip.attempts) == (ClipStatus.running, "other", 1)


def test_a_busy_clip_message_is_put_back_for_when_the_lease_lapses(reelrl_home, video_dir):
    key = _queue(video_dir / "short.mp4")
    with session_scope() as session:
        held = claim_clip(session, key, "other", 10, 3)  # a lease shorter than REELRL_CLIP_LEASE_S
    assert handle_clip(key) == "busy"
    # The embedded broker keeps one file per message; this one carries the key and an ETA.
    messages = list((get_settings().broker_folder / "queue").glob("*.msg"))
    assert len(messages) == 1
    message = json.loads(messages[0].read_text())
    headers = message["headers"]
    assert headers["task"] == CLIP_TASK and headers["argsrepr"] == repr([key])
    assert message["properties"]["delivery_info"]["routing_key"] == "preprocess"
    # Due half a second after the holder's lease lapses (when a claim can succeed if it died).
    eta = datetime.fromisoformat(headers["eta"])
    assert timedelta(0) < eta - held.lease_until < timedelta(seconds=1)


def test_a_worker_that_lost_its_claim_does_not_record(reelrl_home, video_dir, monkeypatch):
    key = _queue(video_dir / "short.mp4")

    class Robbed:
        """Decodes like PyAV, but while it runs the clip's lease lapses and another worker claims it."""

        def __init__(self, path, threads):
            with session_scope() as session:
                session.execute(
                    update(FrameClip).values(lease_until=datetime.now(UTC) - timedelta(seconds=1))
                )
                session.commit()
                assert claim_clip(session, key, "thief", 60, 3).outcome is Claim.claimed
            self._inner = DECODERS["pyav"](path, threads)
            self.info = self._inner.info

        def read(self, indices):
            return self._inner.read(indices)

        def close(self):
            self._inner.close()

    register_decoder("test-robbed")(Robbed)
    monkeypatch.setenv("REELRL_DECODERS", "test-robbed")
    reset_settings_cache()
    try:
        outcome = process_clip(key)
    finally:
        DECODERS.pop("test-robbed")
    assert outcome.outcome == "lost"
    clip = _clip(key)
    assert (clip.status, clip.worker, clip.attempts) == (ClipStatus.running, "thief", 2)
    # Its entry is in the store, so the clip's owner records it without decoding again.
    assert FrameStore.from_settings().has(key)


def test_a_ready_clip_missing_from_the_store_is_decoded_again(reelrl_home, video_dir):
    key = _queue(video_dir / "short.mp4")
    assert process_clip(key).outcome == "ready"
    store = FrameStore.from_settings()
    shutil.rmtree(store.root)  # a wiped frame root
    with session_scope() as session:
        clip = session.query(FrameClip).filter_by(key=key).one()
        request = request_clip(session, key, clip.asset, clip.params, present=store.has)
    assert request.outcome is Requested.queued
    assert process_clip(key).outcome == "ready"
    frames, meta = store.load(key, expect=VideoParams(max_frames=4))
    assert frames.shape[0] == meta["num_frames"] == 4
    assert _clip(key).attempts == 1


class Kaboom(Exception):
    """Not a type any decoder or this project knows."""


def test_a_clip_whose_decoders_all_raise_anything_fails_at_once(reelrl_home, video_dir, monkeypatch):
    class Raises:
        def __init__(self, path, threads):
            raise Kaboom("no idea what happened")

    register_decoder("test-kaboom")(Raises)
    monkeypatch.setenv("REELRL_DECODERS", "test-kaboom,test-kaboom-too")
    register_decoder("test-kaboom-too")(Raises)
    reset_settings_cache()
    source = video_dir / "short.mp4"
    try:
        key = _queue(source)
        outcome = process_clip(key)
    finally:
        DECODERS.pop("test-kaboom")
        DECODERS.pop("test-kaboom-too")
    clip = _clip(key)
    # Failed now, on its one attempt, not left "running" for its lease to lapse and be retried.
    assert outcome.outcome == "failed" and (clip.status, clip.attempts) == (ClipStatus.failed, 1)
    assert (
        clip.error
        == outcome.error
        == (
            f"{source} · test-kaboom, test-kaboom-too · no decoder could read it: "
            "test-kaboom: Kaboom: no idea what happened; test-kaboom-too: Kaboom: no idea what happened"
        )
    )


def test_any_exception_in_a_clip_task_fails_the_clip_with_its_type(reelrl_home, video_dir, monkeypatch):
    def full(self, key, frames, meta):
        raise Kaboom("the store is unwell")

    monkeypatch.setattr(FrameStore, "put", full)
    key = _queue(video_dir / "short.mp4")
    outcome = process_clip(key)
    clip = _clip(key)
    assert outcome.outcome == "failed" and (clip.status, clip.attempts) == (ClipStatus.failed, 1)
    assert clip.error == "Kaboom: the store is unwell"

"""The frame store's index: who may record a clip's outcome, and what a request finds (SQLite and Postgres)."""

import logging
import time

import pytest
from sqlalchemy import select, update

from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames.index import (
    Claim,
    Requested,
    claim_clip,
    complete_clip,
    fail_clip,
    register_asset,
    renew_lease,
    request_clip,
)

pytestmark = [pytest.mark.integration, pytest.mark.twin]

META = {
    "num_frames": 4,
    "height": 56,
    "width": 84,
    "duration": 2.0,
    "fps": 30.0,
    "total_num_frames": 60,
    "source_height": 240,
    "source_width": 320,
}


@pytest.fixture(params=["reelrl_home", "services_env"])
def index(request):
    """A fresh index on embedded SQLite, then on Postgres."""
    request.getfixturevalue(request.param)
    return request.param


def _request(key="k" * 64, present=lambda key: False, retry_failed=False, content="blake3:aa"):
    with session_scope() as session:
        asset = register_asset(session, content, 10, "/videos/a.mp4")
        session.flush()
        return request_clip(session, key, asset, {"fps": 2.0}, present=present, retry_failed=retry_failed)


def _row(key="k" * 64):
    with session_scope() as session:
        clip = session.scalar(select(FrameClip).where(FrameClip.key == key))
        session.expunge(clip)
        return clip


def test_a_stale_workers_late_outcome_is_refused(index):
    _request()
    with session_scope() as session:
        first = claim_clip(session, "k" * 64, "w1", 0.3, 3)
        assert first.outcome is Claim.claimed and first.token.attempt == 1
        time.sleep(0.4)  # w1 stalls: its lease lapses and w2 takes the clip over
        second = claim_clip(session, "k" * 64, "w2", 30, 3)
        assert second.outcome is Claim.claimed and second.token.attempt == 2
        # w1 wakes up: its renewal, its failure and its success are all refused.
        assert not renew_lease(session, first.token, 30)
        assert not fail_clip(session, first.token, "decord: corrupt")
        assert not complete_clip(session, first.token, META, 100)
    clip = _row()
    assert (clip.status, clip.worker, clip.error) == (ClipStatus.running, "w2", None)
    with session_scope() as session:
        assert complete_clip(session, second.token, META, 100)
    clip = _row()
    assert clip.status == ClipStatus.ready and clip.nbytes == 100 and clip.num_frames == 4


def test_the_same_worker_name_reclaiming_does_not_revive_its_old_claim(index):
    _request()
    with session_scope() as session:
        old = claim_clip(session, "k" * 64, "w1", 0.3, 3).token
        time.sleep(0.4)
        new = claim_clip(session, "k" * 64, "w1", 30, 3).token
        assert (old.worker, old.attempt, new.attempt) == ("w1", 1, 2)
        assert not fail_clip(session, old, "late")
        assert fail_clip(session, new, "decord: corrupt")
    assert _row().status == ClipStatus.failed and _row().error == "decord: corrupt"


def test_a_lapsed_lease_cannot_record_even_before_a_take_over(index):
    _request()
    with session_scope() as session:
        token = claim_clip(session, "k" * 64, "w1", 0.3, 3).token
        time.sleep(0.4)
        assert not complete_clip(session, token, META, 100)
    assert _row().status == ClipStatus.running  # the next claim takes it over


def test_ready_but_missing_from_the_store_is_queued_again(index, caplog):
    _request()
    with session_scope() as session:
        token = claim_clip(session, "k" * 64, "w1", 30, 3).token
        assert complete_clip(session, token, META, 100)
    assert _request(present=lambda key: True).outcome is Requested.cached
    with caplog.at_level(logging.WARNING, logger="services.common.frames.index"):
        again = _request(present=lambda key: False)
    assert again.outcome is Requested.queued
    assert "ready in the index but missing from the frame store" in caplog.text
    clip = _row()
    assert (clip.status, clip.attempts, clip.requests, clip.hits) == (ClipStatus.queued, 0, 3, 1)
    # The next request finds it queued by that one.
    assert _request().outcome is Requested.pending


def test_known_failures_are_skipped_unless_retried(index):
    _request()
    with session_scope() as session:
        token = claim_clip(session, "k" * 64, "w1", 30, 3).token
        assert fail_clip(session, token, "no decoder could read it")
    skipped = _request()
    assert skipped.outcome is Requested.known_failed and skipped.error == "no decoder could read it"
    assert _row().status == ClipStatus.failed
    assert _request(retry_failed=True).outcome is Requested.queued
    assert _request(retry_failed=True).outcome is Requested.pending  # queued already, by the retry
    assert _row().status == ClipStatus.queued


def test_of_two_requests_one_queues_and_the_other_waits(index):
    assert _request().outcome is Requested.queued
    assert _request().outcome is Requested.pending
    with session_scope() as session:
        session.execute(update(FrameClip).values(status=ClipStatus.running))
    assert _request().outcome is Requested.pending
    assert _row().requests == 3

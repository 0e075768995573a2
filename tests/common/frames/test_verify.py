"""`reelrl cache verify [--repair]`: the index against the disk and the disk against the index."""

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from services.cli import app
from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames import FrameStore, VideoParams, decode_clip
from services.common.frames.index import claim_clip, complete_clip, fail_clip, register_asset, request_clip

pytestmark = pytest.mark.integration

PARAMS = VideoParams(max_frames=4)


@pytest.fixture(scope="module")
def decoded(video_dir):
    return decode_clip(video_dir / "short.mp4", PARAMS)


def _clip(store, key, outcome, decoded, *, stored=True):
    """An index row for ``key`` that ends ``outcome`` (ready or failed), with or without its entry."""
    frames, meta = decoded
    with session_scope() as session:
        asset = register_asset(session, "blake3:" + key[:8], 1, "/videos/v.mp4")
        session.flush()
        request_clip(session, key, asset, PARAMS.canonical(), present=store.has)
        token = claim_clip(session, key, "w", 30, 3).token
        if stored:
            store.put(key, frames, meta)
        if outcome == "ready":
            assert complete_clip(session, token, {**meta, "num_frames": 4}, 1)
        else:
            assert fail_clip(session, token, "worker died after storing")


def _statuses():
    with session_scope() as session:
        return dict(session.execute(select(FrameClip.key, FrameClip.status)).all())


def test_verify_reports_then_repairs_both_directions(reelrl_home, decoded):
    store = FrameStore.from_settings()
    good, gone, broken, unrecorded, orphan = (c * 64 for c in "abcde")
    _clip(store, good, "ready", decoded)
    _clip(store, gone, "ready", decoded)
    store.remove(gone)  # e.g. a wiped frame root
    _clip(store, broken, "ready", decoded)
    (store.path_for(broken) / "frames.npy").unlink()
    _clip(store, unrecorded, "failed", decoded)  # stored, then the worker died before recording
    store.put(orphan, *decoded)  # no index row at all

    runner = CliRunner()
    found = runner.invoke(app, ["cache", "verify"])
    assert found.exit_code == 1, found.output
    lines = found.output.splitlines()
    assert f"missing {gone}: ready in the index, no entry folder" in lines
    assert f"missing {broken}: ready in the index, no frames.npy" in lines
    assert f"unrecorded {unrecorded}: complete on disk, not ready in the index" in lines
    assert f"orphan {orphan}: on disk, unknown to the index" in lines
    assert "2 missing, 1 unrecorded, 1 orphans; `reelrl cache verify --repair` fixes them" in lines
    assert _statuses()[unrecorded] == ClipStatus.failed and store.path_for(orphan).exists()  # reported only

    repaired = runner.invoke(app, ["cache", "verify", "--repair"])
    assert repaired.exit_code == 0, repaired.output
    statuses = _statuses()
    assert statuses == {
        good: ClipStatus.ready,
        gone: ClipStatus.queued,
        broken: ClipStatus.queued,
        unrecorded: ClipStatus.ready,
        # the orphan has no row, and its folder is gone
    }
    assert sorted(store.keys()) == sorted([good, unrecorded])
    again = runner.invoke(app, ["cache", "verify"])
    assert again.exit_code == 0 and "index and store agree" in again.output

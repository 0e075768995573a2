"""Chaos: a preprocess job of 40 rows through Redis while the broker restarts twice (without its data)
and a clip worker is killed mid-run. Afterwards every row is done or failed with its reason, no job or
clip is left queued or running, and `reelrl cache verify` finds index and store in agreement.

Recovery runs through the production paths only: the job's wait re-sends clips whose messages were
lost or whose worker died (its lease lapsed), the API's reconciler re-sends a job whose own message
was lost, and the workers reconnect by themselves."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from services.cli import app
from services.common.db import session_scope
from services.common.db.models import FrameClip
from services.common.frames.synthetic import make_video
from tests.api.private_redis import PrivateRedis
from tests.api.stack import running_stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
GOOD = 38


def _dataset(data):
    rows = []
    # One encode, 38 files: bytes appended after the last box change the content hash (so each is its
    # own clip) and nothing a decoder reads. Large enough that decoding takes a while: the chaos below
    # happens while clips are in flight.
    base = make_video(data / "chaos" / "base.mp4", seconds=4.0, fps=30, width=640, height=360).read_bytes()
    for i in range(GOOD):
        (data / "chaos" / f"v{i:02d}.mp4").write_bytes(base + b"\0" * (i + 1))
        rows.append({"id": f"ok{i:02d}", "problem": "what happens?", "videos": [f"chaos/v{i:02d}.mp4"]})
    (data / "chaos" / "broken.mp4").write_bytes(b"not a video at all")
    rows.append({"id": "broken", "problem": "what happens?", "videos": ["chaos/broken.mp4"]})
    rows.append({"id": "missing", "problem": "what happens?", "videos": ["chaos/nowhere.mp4"]})
    (data / "chaos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_job_survives_two_broker_restarts_and_a_killed_worker(tmp_path, video_dir):
    broker = PrivateRedis().start()
    env = {
        "REELRL_BROKER_URL": broker.url,
        # Short leases, so lost clip messages and a dead worker's clip are noticed within seconds.
        "REELRL_CLIP_LEASE_S": "2", "REELRL_JOB_LOST_MESSAGE_S": "5",
    }  # fmt: skip
    try:
        with running_stack(tmp_path, video_dir, env) as stack:
            _dataset(stack.data)
            jobs_worker = stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "1")
            stack.start_api()
            with stack.http() as http:
                body = {"kind": "preprocess", "config": {"dataset": "chaos.jsonl", "out": "out/chaos.jsonl"}}
                job_id = http.post("/v1/jobs", json=body).json()["id"]

                def job():
                    return http.get(f"/v1/jobs/{job_id}").json()

                def when_done_at_least(n, what):
                    found = wait_for(lambda: (j := job())["progress"]["done"] >= n and j, 240, 0.2, what)
                    assert found["state"] == "running", f"the job ended before {what}: {found}"

                # Its clips are queued (no clip worker yet); the restart loses every message.
                wait_for(lambda: job()["progress"]["total"] == GOOD + 1, 120, 0.2, "clips queued")
                broker.stop()
                broker.start()
                stack.start("clip-a", "worker", "preprocess", "-c", "1")
                clip_b = stack.start("clip-b", "worker", "preprocess", "-c", "1")
                when_done_at_least(8, "the kill")
                clip_b.kill()  # mid-clip, most likely: that clip's lease lapses and it is sent again
                when_done_at_least(16, "the second restart")
                broker.stop()
                broker.start()
                done = wait_for(lambda: (j := job())["state"] not in ("queued", "running") and j, 300, 0.5)
                assert done["state"] == "succeeded", (done, stack.logs())
                assert (done["result"]["succeeded"], done["result"]["failed"]) == (GOOD, 2), done["result"]
                states = {j["state"] for j in http.get("/v1/jobs", params={"limit": 100}).json()["items"]}
                assert states == {"succeeded"}
            assert jobs_worker.alive() and stack.services["clip-a"].alive(), stack.logs()

            out = stack.data / "out" / "chaos.jsonl"
            ok = [json.loads(line) for line in out.read_text().splitlines()]
            failed = [
                json.loads(line) for line in (out.parent / "chaos.failed.jsonl").read_text().splitlines()
            ]
            assert sorted(r["id"] for r in ok) == [f"ok{i:02d}" for i in range(GOOD)]
            assert all(len(r["clips"]) == 1 for r in ok)
            reasons = {r["id"]: r["error"] for r in failed}
            assert set(reasons) == {"broken", "missing"}
            assert "broken.mp4" in reasons["broken"] and "nowhere.mp4" in reasons["missing"], reasons
            with session_scope() as session:
                by_status = dict(
                    session.execute(select(FrameClip.status, func.count()).group_by(FrameClip.status)).all()
                )
            assert {s.value: n for s, n in by_status.items()} == {"ready": GOOD, "failed": 1}
            verify = CliRunner().invoke(app, ["cache", "verify"])
            assert verify.exit_code == 0 and "index and store agree" in verify.output, verify.output
    finally:
        broker.remove()

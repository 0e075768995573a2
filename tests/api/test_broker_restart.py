"""The job queue across Redis restarts (a Redis of the test's own, without persistence, stopped and
started under the running stack): the `reelrl worker` commands reconnect and keep consuming, the job in
flight finishes once, jobs whose messages the restart lost are sent again by the API's reconciler, and
each worker answers pings under its own node name."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.api.private_redis import PrivateRedis
from tests.api.stack import running_stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CONNECTED = "Connected to redis://"


@pytest.fixture
def broker():
    server = PrivateRedis().start()
    try:
        yield server
    finally:
        server.remove()


def _job(http, job_id):
    return http.get(f"/v1/jobs/{job_id}").json()


def _finished(http, job_id, timeout=240):
    return wait_for(
        lambda: (j := _job(http, job_id))["state"] not in ("queued", "running") and j, timeout, 0.5, "job end"
    )


def _submit(http, out, **config):
    body = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": out, **config}}
    response = http.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _restart(broker, stack, *workers):
    """Restart Redis (losing every key) and wait until each worker has connected again."""
    before = [w.tail(10**7).count(CONNECTED) for w in workers]
    broker.stop()
    broker.start()
    try:
        wait_for(
            lambda: all(not w.alive() or w.tail(10**7).count(CONNECTED) > n for w, n in zip(workers, before, strict=True)),
            90, 0.2, "workers reconnected",
        )  # fmt: skip
    except AssertionError:
        raise AssertionError(stack.logs()) from None
    for worker in workers:
        assert worker.alive(), f"{worker.name} died with the broker: {stack.logs()}"


def test_workers_survive_redis_restarts_and_the_job_in_flight_finishes_once(tmp_path, video_dir, broker):
    # Short clip leases: the clips queued before the restarts were lost with them, and the job sends
    # them again once the clip pool has been idle for 4 leases.
    env = {"REELRL_BROKER_URL": broker.url, "REELRL_CLIP_LEASE_S": "2"}
    with running_stack(tmp_path, video_dir, env) as stack:
        jobs_worker = stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "2")
        stack.start_api()
        with stack.http() as http:
            # No clip pool yet: the job waits for its clips, in flight on the jobs worker, unacknowledged.
            first = _submit(http, "out/first.jsonl")
            running = wait_for(lambda: (j := _job(http, first))["state"] == "running" and j, 120, 0.2)
            _restart(broker, stack, jobs_worker)
            _restart(broker, stack, jobs_worker)
            clip_worker = stack.start("clip-worker", "worker", "preprocess", "-c", "2")
            done = _finished(http, first)
            # the job's own reason first: the whole record and the logs run long enough to be cut off
            assert done["state"] == "succeeded", (done.get("reason"), done, stack.logs())
            assert done["attempts"] == 1 and done["worker"] == running["worker"]
            assert done["result"]["succeeded"] == 3
            # Both workers, the prefork clip pool included, restart with the broker and consume again.
            _restart(broker, stack, jobs_worker, clip_worker)
            second = _submit(http, "out/second.jsonl", video_params={"fps": 1.0})  # new clips to decode
            done = _finished(http, second)
            assert done["state"] == "succeeded" and done["attempts"] == 1, (
                done.get("error"),
                done,
                stack.logs(),
            )
            assert done["result"]["succeeded"] == 3 and done["result"]["cached"] == 0
            assert jobs_worker.alive() and clip_worker.alive(), stack.logs()


def test_jobs_whose_messages_a_restart_lost_are_sent_again_once(tmp_path, video_dir, broker):
    fast = {"REELRL_BROKER_URL": broker.url, "REELRL_JOB_LOST_MESSAGE_S": "3"}
    with running_stack(tmp_path, video_dir, fast) as stack:
        stack.start_api()
        with stack.http() as http:
            # No worker runs: the two messages wait on the broker, which then restarts without them.
            jobs = [_submit(http, "out/a.jsonl"), _submit(http, "out/b.jsonl")]
            broker.stop()
            broker.start()
            stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "2")
            stack.start("clip-worker", "worker", "preprocess", "-c", "2")
            for job_id in jobs:
                done = _finished(http, job_id)
                assert done["state"] == "succeeded" and done["attempts"] == 1, (
                    done.get("error"),
                    done,
                    stack.logs(),
                )
            assert stack.services["api"].tail(10**7).count("its task was sent again") == 2, stack.logs()


def test_each_worker_has_its_own_node_name_and_ping_asks_every_one(tmp_path, video_dir, broker):
    runner = CliRunner()
    with running_stack(tmp_path, video_dir, {"REELRL_BROKER_URL": broker.url}) as stack:
        a = stack.start("clip-a", "worker", "preprocess", "-c", "1")
        b = stack.start("clip-b", "worker", "preprocess", "-c", "1")
        names = [f"preprocess.{w.proc.pid}@" for w in (a, b)]

        def ping(*args):
            return runner.invoke(app, ["worker", "ping", "--timeout", "3", *args])

        both = wait_for(
            lambda: (r := ping()).exit_code == 0 and all(n in r.output for n in names) and r, 120, 0.5
        )
        assert both.output.count("@") == 2, both.output
        assert ping("--role", "preprocess").exit_code == 0
        missing = ping("--role", "eval")
        assert missing.exit_code == 1 and "no `reelrl worker eval` runs on this host" in missing.output
        a.stop()  # a warm shutdown removes its record: the live one alone is asked, and answers
        alone = ping()
        assert alone.exit_code == 0 and names[1] in alone.output and names[0] not in alone.output, (
            alone.output
        )
        broker.stop()  # the broker away: a message naming it, not a traceback
        away = ping()
        assert away.exit_code == 1 and "the broker is unreachable" in away.output, away.output
        assert names[1] in away.output and "Traceback" not in away.output
        broker.start()
        b.kill()  # a killed worker leaves its record, recognised as dead: nothing answers for it
        dead = ping()
        assert dead.exit_code == 1 and "no `reelrl worker` runs on this host" in dead.output, dead.output
        bad = ping("--role", "nope")
        assert bad.exit_code == 2 and "--role must be one of" in bad.output


def test_a_long_broker_outage_fails_no_job(tmp_path, video_dir, broker):
    """Redis away for longer than the clip pool's idle window: the job's re-sends are refused, and it
    waits for the broker instead of failing (it failed with OperationalError: Error 111)."""
    env = {"REELRL_BROKER_URL": broker.url, "REELRL_CLIP_LEASE_S": "1"}  # idle after 4 s
    with running_stack(tmp_path, video_dir, env) as stack:
        stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "1")
        stack.start_api()
        with stack.http() as http:
            job_id = _submit(http, "out/outage.jsonl")
            wait_for(lambda: _job(http, job_id)["state"] == "running", 120, 0.2)
            broker.stop()
            time.sleep(12)  # three idle windows: each pass tries to re-send the lost clips
            assert _job(http, job_id)["state"] == "running", stack.logs()
            broker.start()
            stack.start("clip-worker", "worker", "preprocess", "-c", "2")
            done = _finished(http, job_id)
            assert done["state"] == "succeeded" and done["attempts"] == 1, (
                done.get("error"),
                done,
                stack.logs(),
            )
        assert "the broker refused a clip" in stack.services["jobs-worker"].tail(10**7)

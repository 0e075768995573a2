"""Production wiring (Postgres + Redis): a worker killed mid-job ends the job failed with the reason, and
a restarted API still has every job row and event."""

import json

import pytest

from tests.api.stack import running_stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def read_events(http, job_id, **kwargs):
    with http.stream("GET", f"/v1/jobs/{job_id}/events", **kwargs) as response:
        assert response.status_code == 200
        events, event = [], {}
        for line in response.iter_lines():
            if not line:
                if "data" in event:
                    events.append(event)
                    if event["event"] == "end":
                        return events
                event = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                event[name] = value.strip()
    return events


def test_killed_worker_fails_the_job_and_an_api_restart_loses_nothing(
    tmp_path, video_dir, postgres_url, redis_url
):
    production = {"REELRL_DATABASE_URL": postgres_url, "REELRL_BROKER_URL": redis_url}
    with running_stack(tmp_path, video_dir, production) as stack:
        worker = stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "1")
        stack.start_api()
        with stack.http() as http:
            # No clip pool runs: the job waits for its clips, heartbeating, until its worker is killed.
            body = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "out/x.jsonl"}}
            job_id = http.post("/v1/jobs", json=body).json()["id"]
            running = wait_for(
                lambda: (j := http.get(f"/v1/jobs/{job_id}").json())["state"] == "running" and j,
                timeout=120,
                message="job running",
            )
            worker.kill()
            failed = wait_for(
                lambda: (j := http.get(f"/v1/jobs/{job_id}").json())["state"] != "running" and j,
                timeout=60,
                message="job no longer running",
            )
            assert failed["state"] == "failed", stack.logs()
            assert failed["reason"].startswith(f"worker lost: no heartbeat from {running['worker']}")
            before = read_events(http, job_id)
            assert json.loads(before[-2]["data"])["data"]["state"] == "failed"

        stack.services["api"].stop()
        stack.start_api()
        with stack.http() as http:
            assert http.get(f"/v1/jobs/{job_id}").json() == failed
            after = read_events(http, job_id)
            assert [(e["id"], e["event"], json.loads(e["data"])) for e in after[:-1]] == [
                (e["id"], e["event"], json.loads(e["data"])) for e in before[:-1]
            ]
            # A client that saw the first two events resumes from the third.
            resumed = read_events(http, job_id, headers={"Last-Event-ID": "2"})
            assert [e["id"] for e in resumed[:-1]] == [e["id"] for e in before[2:-1]]

"""The whole path on real processes (embedded wiring): `reelrl serve api`, `reelrl worker preprocess-jobs`,
the `reelrl` CLI over HTTP, server-sent events."""

import json
import subprocess
import sys
import threading

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.api.stack import running_stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, video_dir):
    with running_stack(tmp_path_factory.mktemp("live"), video_dir) as stack:
        # Only the job pool: each job below either decodes in processes of its own (workers: 1) or
        # waits for a clip pool that is not there (to be cancelled).
        stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "2")
        stack.start_api()
        yield stack


def cli(stack, *args, timeout=240):
    env = {**stack.env, "REELRL_API_URL": stack.url}
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def events_of(http, job_id, **params):
    with http.stream("GET", f"/v1/jobs/{job_id}/events", params=params) as response:
        assert response.status_code == 200
        out, event = [], {}
        for line in response.iter_lines():
            if not line:
                if "data" in event:
                    out.append(event)
                    if event["event"] == "end":
                        return out
                event = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                event[name] = value.strip()
    return out


def test_submit_follow_status_on_real_workers(stack, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(
        "dataset: train.jsonl\nout: out/train.clips.jsonl\nworkers: 1\nvideo_params:\n  max_frames: 8\n"
    )
    done = cli(stack, "submit", "preprocess", str(config), "video_params.fps=1.0", "--follow")
    assert done.returncode == 0, done.stderr + stack.logs()
    job_id = done.stdout.strip().splitlines()[0]
    assert "succeeded" in done.stderr

    with stack.http() as http:
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["state"] == "succeeded" and job["config"]["video_params"]["fps"] == 1.0
        assert (
            job["result"]["succeeded"] == 3 and job["result"]["clips"] == 3 and job["result"]["failed"] == 0
        )
        assert job["progress"] == {"done": 3, "total": 3, "message": "clips"}
        rows = [json.loads(line) for line in (stack.data / "out/train.clips.jsonl").read_text().splitlines()]
        assert [len(r["clips"]) for r in rows] == [1, 1, 1]
        events = events_of(http, job_id)
        states = [json.loads(e["data"])["data"]["state"] for e in events if e["event"] == "state"]
        assert states == ["queued", "running", "succeeded"]
        assert [int(e["id"]) for e in events if e["event"] != "end"] == list(range(1, job["last_event"] + 1))
        stats = http.get("/v1/cache/stats").json()
        assert stats["clips_by_status"].get("ready") == 3 and stats["ready_bytes"] > 0

    # The other commands in process (the same client code, without a Python start each).
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REELRL_API_URL", stack.url)
        shown = runner.invoke(app, ["status", job_id])
        assert shown.exit_code == 0 and "succeeded" in shown.stdout
        listed = runner.invoke(app, ["status", "--kind", "preprocess"])
        assert listed.exit_code == 0 and job_id in listed.stdout
        again = runner.invoke(app, ["submit", "preprocess", str(config), "--key", "k1", "--max-retries", "0"])
        assert again.exit_code == 0
        with stack.http() as http:
            assert http.get(f"/v1/jobs/{again.stdout.strip()}").json()["max_retries"] == 0
        same = runner.invoke(app, ["submit", "preprocess", str(config), "--key", "k1"])
        assert same.stdout.strip() == again.stdout.strip() and "existing job" in same.stderr
        refused = runner.invoke(app, ["submit", "preprocess", str(config), "dataset=/etc/passwd"])
        assert refused.exit_code == 1
        assert "config.dataset" in refused.stderr and "outside the data roots" in refused.stderr
        bad = runner.invoke(app, ["submit", "preprocess", str(config), "video_params"])
        assert bad.exit_code == 2 and "not key=value" in bad.stderr


def test_cancel_reaches_a_running_job(stack):
    with stack.http() as http:
        # New parameters, so its clips are not cached; no clip pool runs, so the job waits until cancelled.
        body = {
            "kind": "preprocess",
            "config": {"dataset": "train.jsonl", "out": "out/wait.jsonl", "video_params": {"fps": 0.5}},
        }
        job_id = http.post("/v1/jobs", json=body).json()["id"]
        wait_for(lambda: http.get(f"/v1/jobs/{job_id}").json()["state"] == "running", message="running")
        assert http.post(f"/v1/jobs/{job_id}/cancel").json()["cancel_requested"] is True
        job = wait_for(
            lambda: (j := http.get(f"/v1/jobs/{job_id}").json())["state"] != "running" and j, message="ended"
        )
        assert job["state"] == "cancelled" and job["reason"] == "cancelled on request"
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
    assert stack.services["jobs-worker"].alive()


def test_jobs_stream_announces_new_jobs(stack):
    seen = []

    def listen(http):
        with http.stream("GET", "/v1/events") as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
                    if any(j["id"] == job_id for j in seen):
                        return

    with stack.http() as http:
        job_id = http.post(
            "/v1/jobs",
            json={"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "out/s.jsonl"}},
        ).json()["id"]
        listener = threading.Thread(target=listen, args=(http,), daemon=True)
        listener.start()
        listener.join(60)
        assert any(j["id"] == job_id for j in seen), seen
        http.post(f"/v1/jobs/{job_id}/cancel")


def test_rebound_host_names_and_cross_origin_writes_are_refused(stack):
    """DNS rebinding: a page on attacker.example whose name now points at 127.0.0.1 reaches the real
    server with its own Host and Origin; the open API refuses it (reads too)."""
    body = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "out/rebind.jsonl"}}
    rebound = {"host": "attacker.example:18101", "origin": "http://attacker.example:18101"}
    with stack.http() as http:
        before = http.get("/v1/jobs").json()["total"]
        assert http.post("/v1/jobs", json=body, headers=rebound).status_code == 400
        assert http.get("/v1/jobs", headers={"host": "attacker.example:18101"}).status_code == 400
        assert http.get("/", headers={"host": "attacker.example"}).status_code == 400
        # A page on another site, sent to the right name: the write is refused, in this open mode too.
        foreign = http.post("/v1/jobs", json=body, headers={"origin": "http://attacker.example"})
        assert foreign.status_code == 403 and "cross-origin" in foreign.json()["detail"]
        assert http.get("/v1/jobs").json()["total"] == before
        port = stack.url.rsplit(":", 1)[1]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            assert http.get("/healthz", headers={"host": host}).status_code == 200
        own = http.post("/v1/jobs", json=body, headers={"origin": stack.url})
        assert own.status_code == 202, own.text
        assert (
            http.post(f"/v1/jobs/{own.json()['id']}/cancel", headers={"origin": stack.url}).status_code == 200
        )

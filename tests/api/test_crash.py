"""Production wiring (Postgres + Redis): a worker killed mid-job ends the job failed with the reason when
it has no retry left, and a restarted API still has every job row and event; with retries, a second
worker runs the job again and finishes it (a training job resuming from its checkpoint, each step shown
once)."""

import json
from pathlib import Path

import pytest

from tests.api.stack import running_stack, wait_for

ROOT = Path(__file__).resolve().parents[2]

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
            body = {
                "kind": "preprocess",
                "config": {"dataset": "train.jsonl", "out": "out/x.jsonl"},
                "max_retries": 0,
            }
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
            assert failed["attempts"] == 1
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


def job_when(http, job_id, predicate, message, timeout=120):
    return wait_for(
        lambda: predicate(j := http.get(f"/v1/jobs/{job_id}").json()) and j, timeout=timeout, message=message
    )


def state_events(http, job_id):
    return [json.loads(e["data"])["data"] for e in read_events(http, job_id) if e["event"] == "state"]


def test_killed_worker_job_is_retried_by_a_second_worker(tmp_path, video_dir, postgres_url, redis_url):
    production = {"REELRL_DATABASE_URL": postgres_url, "REELRL_BROKER_URL": redis_url}
    with running_stack(tmp_path, video_dir, production) as stack:
        first = stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "1")
        stack.start_api()
        with stack.http() as http:
            # Without a clip pool the job waits for its clips, heartbeating, until its worker dies.
            body = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "out/x.jsonl"}}
            job_id = http.post("/v1/jobs", json=body).json()["id"]
            running = job_when(http, job_id, lambda j: j["state"] == "running", "job running")
            assert running["max_retries"] == 2 and running["attempts"] == 1  # the preprocess default
            first.kill()
            requeued = job_when(http, job_id, lambda j: j["state"] != "running", "job re-queued", 60)
            assert requeued["state"] == "queued", stack.logs()
            assert requeued["reason"].startswith(f"worker lost: no heartbeat from {running['worker']}")
            assert requeued["reason"].endswith("retry 1 of 2")
            # The API sent the task again: a new worker (and the clip pool) pick the job up and finish it.
            stack.start("jobs-worker-2", "worker", "preprocess-jobs", "-c", "1")
            stack.start("clip-worker", "worker", "preprocess", "-c", "1")
            done = job_when(http, job_id, lambda j: j["state"] not in ("queued", "running"), "job done", 180)
            assert done["state"] == "succeeded", (done, stack.logs())
            assert done["attempts"] == 2 and done["worker"] != running["worker"] and done["reason"] is None
            assert done["result"]["succeeded"] == 3
            states = state_events(http, job_id)
            assert [s["state"] for s in states] == ["queued", "running", "queued", "running", "succeeded"]
            assert [s.get("attempt") for s in states if s["state"] == "running"] == [1, 2]
            assert (states[2]["retry"], states[2]["max_retries"]) == (1, 2)


def test_killed_train_worker_resumes_from_its_checkpoint_and_shows_each_step_once(
    tmp_path, video_dir, postgres_url, redis_url
):
    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model
    from services.trainer.config import load_config
    from services.trainer.tracking import read_metrics

    production = {"REELRL_DATABASE_URL": postgres_url, "REELRL_BROKER_URL": redis_url}
    with running_stack(tmp_path, video_dir, production) as stack:
        # At the data root: the datasets name their videos relative to it.
        files = make_task_datasets(stack.data, train_videos=8, val_videos=4)
        model = build_tiny_model("qwen2_5_vl", stack.data / "tiny-qwen2_5_vl", seed=0)
        out = stack.data / "run"
        config = load_config(
            ROOT / "examples" / "tiny_cpu.yaml",
            [
                f"data.train_files=[{files['colour_mix']}]", f"data.val_files=[{files['colour_val']}]",
                "data.batch_size=4", "rollout.n=4", f"actor.model_path={model}", f"trainer.output_dir={out}",
                "trainer.total_steps=4", "trainer.save_freq=2", "trainer.val_freq=0",
                "trainer.val_before_train=false", "trainer.loggers=[jsonl]",
                # What the demo sets: the retry must continue from the first attempt's checkpoint anyway.
                "trainer.resume=none",
            ],
        )  # fmt: skip
        first = stack.start("train-worker", "worker", "train")
        stack.start_api()
        with stack.http() as http:
            body = {"kind": "train", "config": config.model_dump(mode="json")}
            job_id = http.post("/v1/jobs", json=body).json()["id"]
            assert http.get(f"/v1/jobs/{job_id}").json()["max_retries"] == 1  # the train default

            # Killed once step 3 is reported: step 2's checkpoint is saved, step 4 is not done.
            def step_3_reported():
                if http.get(f"/v1/jobs/{job_id}").json()["state"] not in ("queued", "running"):
                    pytest.fail(f"the job ended before step 3: {stack.logs()}")
                return 3 in [s["step"] for s in http.get(f"/v1/jobs/{job_id}/metrics").json()["steps"]]

            wait_for(step_3_reported, timeout=420, every=0.05, message="step 3 reported")
            first.kill()
            assert (out / "checkpoints" / "step_000002").is_dir()
            before = http.get(f"/v1/jobs/{job_id}/metrics").json()
            assert [s["step"] for s in before["steps"]] == [1, 2, 3]
            job_when(http, job_id, lambda j: j["state"] == "queued", "train job re-queued", 60)
            stack.start("train-worker-2", "worker", "train")
            done = job_when(http, job_id, lambda j: j["state"] not in ("queued", "running"), "job done", 420)
            assert done["state"] == "succeeded", (done, stack.logs())
            assert done["attempts"] == 2 and done["result"]["steps"] == 4

            # The retry recomputed step 3; the stream says so before reporting it again.
            events = [json.loads(e["data"]) for e in read_events(http, job_id)[:-1]]
            reported = [(e["type"], e["data"].get("step", e["data"].get("after_step"))) for e in events
                        if e["type"] in ("metrics", "metrics_rewind")]  # fmt: skip
            assert reported == [("metrics", 1), ("metrics", 2), ("metrics", 3), ("metrics_rewind", 2),
                                ("metrics", 3), ("metrics", 4)]  # fmt: skip
            rewind = next(e["data"] for e in events if e["type"] == "metrics_rewind")
            assert rewind == {"after_step": 2, "superseded": [3], "attempt": 2}
            # The metrics endpoint (what the page draws) and the run's metrics file: each step once,
            # step 3 as recomputed.
            steps = http.get(f"/v1/jobs/{job_id}/metrics").json()["steps"]
            in_file = read_metrics(out / "metrics.jsonl")
            assert [s["step"] for s in steps] == [r["step"] for r in in_file] == [1, 2, 3, 4]
            recomputed = [e["data"] for e in events if e["type"] == "metrics" and e["data"]["step"] == 3][-1]
            assert steps[2] == recomputed

"""The REST API in process (embedded SQLite and filesystem broker): validation, lifecycle routes, reads."""

import json
from datetime import timedelta

import pytest

from services.api import kinds
from services.api.kinds import KINDS, JobKind, KindSpec
from services.api.settings import ApiSettings
from services.common.db.models import JobState, utcnow
from services.common.jobs import create_job, get_job, job_events, list_jobs, reap_stale_jobs, run_job
from services.common.settings import get_settings
from tests.api.stack import wait_for


def preprocess_body(**config):
    return {
        "kind": "preprocess",
        "config": {"dataset": "train.jsonl", "out": "out/train.clips.jsonl", **config},
    }


def locs(response):
    return [".".join(str(p) for p in e["loc"]) for e in response.json()["detail"]]


def test_submit_preprocess_records_and_enqueues(client, data_root):
    response = client.post("/v1/jobs", json=preprocess_body(video_params={"fps": 1.0, "max_frames": 8}))
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["state"] == "queued" and body["created"] is True
    job = client.get(f"/v1/jobs/{body['id']}").json()
    # The stored config is the validated one: resolved paths, every default filled in.
    assert job["config"]["dataset"] == str((data_root / "train.jsonl").resolve())
    assert job["config"]["out"] == str((data_root / "out/train.clips.jsonl").resolve())
    assert job["config"]["video_params"]["fps"] == 1.0 and job["config"]["video_params"]["min_frames"] == 4
    assert job["enqueued_at"] is not None and job["owner"] is None
    assert [e.type for e in job_events(body["id"])] == ["state"]


@pytest.mark.parametrize(
    ("content", "expected_loc"),
    [
        (b'{"kind": "preprocess", "config": ', "body.33"),  # malformed JSON: the position where it ends
        (b'["preprocess"]', "body"),  # not an object
        (b'{"kind": 5, "config": {}}', "body.kind"),  # wrong type
        (b'{"kind": "preprocess", "config": "x"}', "body.config"),
        (b'{"kind": "render", "config": {}}', "body.kind"),  # unknown kind
        (b'{"kind": "preprocess", "config": {}, "priority": 1}', "body.priority"),  # unknown field
        (b'{"kind": "preprocess", "config": {}, "idempotency_key": ""}', "body.idempotency_key"),
    ],
)
def test_malformed_bodies_are_422_naming_the_field(client, content, expected_loc):
    response = client.post("/v1/jobs", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert expected_loc in locs(response)
    assert list_jobs()[1] == 0


def test_bad_configs_are_422_naming_the_config_field(client, data_root, tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    cases = [
        (preprocess_body(dataset=str(outside)), "body.config.dataset", "outside the data roots"),
        (preprocess_body(dataset="../elsewhere.jsonl"), "body.config.dataset", "outside the data roots"),
        (preprocess_body(out=str(tmp_path / "x.jsonl")), "body.config.out", "outside the data roots"),
        (preprocess_body(dataset="missing.jsonl"), "body.config.dataset", "not found"),
        (preprocess_body(out="train.jsonl"), "body.config", "is the dataset being read"),
        (preprocess_body(threads=3), "body.config.threads", "Extra inputs"),
        (preprocess_body(video_params={"fps": -1}), "body.config.video_params.fps", "greater than 0"),
        (preprocess_body(video_params={"nframes": 8}), "body.config.video_params", "either fps or nframes"),
        (preprocess_body(workers="many"), "body.config.workers", "integer"),
        # a worker would try to allocate petabytes: bounded by what the family can take
        (
            preprocess_body(video_params={"min_pixels": 10**14}),
            "body.config.video_params",
            "more than family",
        ),
        # each bound alone holds, their product does not: 8 frames of 50M pixels (a 1.2 GB clip)
        (
            preprocess_body(video_params={"fps": None, "nframes": 8, "min_pixels": 50_000_000}),
            "body.config.video_params",
            "8 frames of at least min_pixels=50000000",
        ),
        (
            preprocess_body(video_params={"max_frames": 10**6}),
            "body.config.video_params.max_frames",
            "less than",
        ),
    ]
    for body, loc, message in cases:
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 422, (body, response.text)
        errors = {".".join(map(str, e["loc"])): e["msg"] for e in response.json()["detail"]}
        assert loc in errors and message in errors[loc], (loc, errors)
    assert list_jobs()[1] == 0


def test_without_data_roots_no_path_is_accepted(client, monkeypatch):
    from services.common.settings import reset_settings_cache

    monkeypatch.delenv("REELRL_DATA_ROOTS")
    reset_settings_cache()
    response = client.post("/v1/jobs", json=preprocess_body())
    assert response.status_code == 422
    assert "set REELRL_DATA_ROOTS" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(("kind", "required"), [("train", "data"), ("eval", "model")])
def test_train_and_eval_configs_are_checked_by_their_services_models(client, kind, required):
    response = client.post("/v1/jobs", json={"kind": kind, "config": {"bogus": 1}})
    assert response.status_code == 422
    assert {f"body.config.{required}", "body.config.bogus"} <= set(locs(response))


def test_an_eval_job_may_only_name_files_inside_the_data_roots(client, data_root, tmp_path):
    outside = tmp_path / "elsewhere-model"
    outside.mkdir()
    response = client.post("/v1/jobs", json={"kind": "eval", "config": {"model": str(outside)}})
    assert response.status_code == 422, response.text
    assert "outside the data roots" in json.dumps(response.json()["detail"])
    assert list_jobs()[1] == 0
    assert list_jobs()[1] == 0


def test_a_kind_whose_service_is_missing_is_not_available(client, monkeypatch):
    monkeypatch.setitem(
        KINDS, JobKind.eval, KindSpec("services.no_such_service.config:Config", "reelrl.eval.run", "eval")
    )
    response = client.post("/v1/jobs", json={"kind": "eval", "config": {}})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "kind"]
    assert "kind not available in this installation" in response.json()["detail"][0]["msg"]
    listed = {k["kind"]: k for k in client.get("/v1/kinds").json()}
    assert listed["eval"]["available"] is False and listed["preprocess"]["available"] is True
    assert "dataset" in listed["preprocess"]["config_schema"]["properties"]
    assert list_jobs()[1] == 0


def test_preprocess_kind_names_the_queue_its_task_runs_on():
    from services.preprocess.job_task import JOB_QUEUE, JOB_TASK

    assert (KINDS[JobKind.preprocess].task, KINDS[JobKind.preprocess].queue) == (JOB_TASK, JOB_QUEUE)
    with pytest.raises(kinds.KindUnavailable, match="unknown job kind 'render'"):
        kinds.kind_spec("render")


def test_huge_bodies_are_413(make_client):
    client = make_client(max_body_bytes=4096)
    big = preprocess_body(padding="x" * 10_000)
    declared = client.post("/v1/jobs", json=big)
    assert declared.status_code == 413 and "exceeds 4096" in declared.json()["detail"]

    def chunks():  # no Content-Length: counted as it streams in
        for _ in range(10):
            yield b" " * 1000

    streamed = client.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert list_jobs()[1] == 0


def test_idempotency_key_names_one_job(client):
    first = client.post("/v1/jobs", json={**preprocess_body(), "idempotency_key": "nightly-1"})
    again = client.post("/v1/jobs", json={**preprocess_body(), "idempotency_key": "nightly-1"})
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"] and again.json()["created"] is False
    other = client.post(
        "/v1/jobs", json={**preprocess_body(video_params={"fps": 4.0}), "idempotency_key": "nightly-1"}
    )
    assert other.status_code == 409 and "nightly-1" in other.json()["detail"]
    assert list_jobs()[1] == 1


def test_unknown_ids_are_404(client):
    for path in ("/v1/jobs/{}", "/v1/jobs/{}/metrics", "/v1/jobs/{}/results", "/v1/jobs/{}/events"):
        for job_id in ("0" * 32, "not-an-id", "%00"):
            response = client.get(path.format(job_id))
            assert response.status_code == 404, (path, job_id, response.text)
    assert client.post(f"/v1/jobs/{'a' * 32}/cancel").status_code == 404


def test_cancel_queued_then_finished_is_409(client):
    job_id = client.post("/v1/jobs", json=preprocess_body()).json()["id"]
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    again = client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]

    done = create_job("preprocess", {})
    with run_job(done):
        pass
    finished = client.post(f"/v1/jobs/{done}/cancel")
    assert finished.status_code == 409 and "already succeeded" in finished.json()["detail"]


def test_list_filters_and_pages(client):
    ids = [create_job("train", {"n": i}) for i in range(3)] + [create_job("eval", {})]
    with run_job(ids[0]):
        pass
    listing = client.get("/v1/jobs", params={"kind": "train"}).json()
    assert listing["total"] == 3 and [j["id"] for j in listing["items"]] == ids[2::-1]
    assert client.get("/v1/jobs", params={"state": "succeeded"}).json()["total"] == 1
    page = client.get("/v1/jobs", params={"limit": 2, "offset": 2}).json()
    assert [j["id"] for j in page["items"]] == [ids[1], ids[0]] and page["total"] == 4
    for bad in ({"kind": "x"}, {"state": "done"}, {"limit": 0}, {"limit": 501}, {"offset": -1}):
        assert client.get("/v1/jobs", params=bad).status_code == 422


def test_a_retried_eval_reads_the_latest_result_of_each_benchmark(client):
    job_id = create_job("eval", {}, max_retries=1)
    with run_job(job_id, worker="first:1:1") as first:
        first.event("result", {"benchmark": "mvbench", "overall": 0.25})
        reap_stale_jobs(now=utcnow() + timedelta(seconds=60))
    # The retry scores mvbench again (its summary covers the resumed samples too), then the rest.
    with run_job(job_id, worker="second:1:1") as second:
        second.event("result", {"benchmark": "mvbench", "overall": 0.75})
        second.event("result", {"benchmark": "videomme", "overall": 0.5})
    assert client.get(f"/v1/jobs/{job_id}/results").json()["results"] == [
        {"benchmark": "mvbench", "overall": 0.75},
        {"benchmark": "videomme", "overall": 0.5},
    ]
    table = client.get(f"/jobs/{job_id}/results.html").text
    assert table.count(">mvbench<") == 1 and "0.25" not in table and "25.0" not in table


def test_metrics_results_and_event_stream(client):
    job_id = create_job("train", {})
    with run_job(job_id) as ctx:
        for step in range(1, 4):
            ctx.event("metrics", {"step": step, "reward/overall": step / 4})
            ctx.progress(step, 3)
        ctx.event("result", {"benchmark": "mvbench", "overall": 0.5})
    metrics = client.get(f"/v1/jobs/{job_id}/metrics").json()
    assert [s["step"] for s in metrics["steps"]] == [1, 2, 3]
    newer = client.get(f"/v1/jobs/{job_id}/metrics", params={"after": metrics["last_event"]}).json()
    assert newer["steps"] == [] and newer["last_event"] == metrics["last_event"]
    assert client.get(f"/v1/jobs/{job_id}/results").json()["results"] == [
        {"benchmark": "mvbench", "overall": 0.5}
    ]

    def stream(**kwargs):
        with client.stream("GET", f"/v1/jobs/{job_id}/events", **kwargs) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            return list(_sse(response.iter_lines()))

    events = stream()
    numbered = [e for e in events if e["event"] != "end"]
    assert [int(e["id"]) for e in numbered] == list(range(1, get_job(job_id).last_event + 1))
    assert events[-1]["event"] == "end" and json.loads(events[-1]["data"])["state"] == "succeeded"
    # Reconnecting with Last-Event-ID resumes after it.
    resumed = stream(headers={"Last-Event-ID": "5"})
    assert next(int(e["id"]) for e in resumed if e["event"] != "end") == 6
    assert stream(params={"after": 7})[0]["id"] == "8"
    bad = client.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 422


def _sse(lines):
    event: dict = {}
    for line in lines:
        if not line:
            if "data" in event:
                yield event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            event[name] = value.strip()


def test_metrics_show_each_step_once_after_a_rewind(client):
    job_id = create_job("train", {}, max_retries=1)
    with run_job(job_id) as ctx:
        for step in range(4):
            ctx.event("metrics", {"step": step, "reward/overall": 0.1})
        reap_stale_jobs(now=utcnow() + timedelta(seconds=60))  # its worker is lost
    first = client.get(f"/v1/jobs/{job_id}/metrics").json()
    assert [s["step"] for s in first["steps"]] == [0, 1, 2, 3] and first["rewind_after_step"] is None
    # A retry resumed from step 1's checkpoint and recomputes 2 and 3.
    with run_job(job_id) as ctx:
        ctx.event("metrics_rewind", {"after_step": 1})
        ctx.event("metrics", {"step": 2, "reward/overall": 0.7})
    whole = client.get(f"/v1/jobs/{job_id}/metrics").json()
    assert [(s["step"], s["reward/overall"]) for s in whole["steps"]] == [(0, 0.1), (1, 0.1), (2, 0.7)]
    newer = client.get(f"/v1/jobs/{job_id}/metrics", params={"after": first["last_event"]}).json()
    assert newer["rewind_after_step"] == 1 and [s["step"] for s in newer["steps"]] == [2]


def test_retry_budget_from_the_kind_the_settings_or_the_submit(make_client, monkeypatch):
    assert KINDS[JobKind.preprocess].max_retries == 2 and KINDS[JobKind.eval].max_retries == 2
    assert KINDS[JobKind.train].max_retries == 1
    monkeypatch.setenv("REELRL_API_MAX_RETRIES", '{"train": 0}')
    settings = ApiSettings()
    assert settings.default_max_retries(JobKind.train) == 0
    assert settings.default_max_retries(JobKind.preprocess) == 2  # a kind left out keeps its default
    monkeypatch.setenv("REELRL_API_MAX_RETRIES", '{"train": -1}')
    with pytest.raises(ValueError, match="max_retries"):
        ApiSettings()
    monkeypatch.delenv("REELRL_API_MAX_RETRIES")

    client = make_client(max_retries={"preprocess": 5})
    by_setting = client.post("/v1/jobs", json=preprocess_body()).json()["id"]
    assert client.get(f"/v1/jobs/{by_setting}").json()["max_retries"] == 5
    body = {**preprocess_body(out="out/b.jsonl"), "max_retries": 0}
    by_submit = client.post("/v1/jobs", json=body).json()["id"]
    assert client.get(f"/v1/jobs/{by_submit}").json()["max_retries"] == 0
    too_many = client.post("/v1/jobs", json={**preprocess_body(), "max_retries": 21})
    assert too_many.status_code == 422 and locs(too_many) == ["body.max_retries"]


def test_the_reaper_requeues_a_lost_job_and_sends_its_task_again(client):
    queue = get_settings().broker_folder / "queue"
    job_id = client.post("/v1/jobs", json={**preprocess_body(), "max_retries": 1}).json()["id"]
    assert len(list(queue.iterdir())) == 1  # its task: no worker consumes the embedded queue here
    with run_job(job_id):  # this test plays the worker, which then dies
        (reaped,) = reap_stale_jobs(now=utcnow() + timedelta(seconds=60))
        assert reaped.state == JobState.queued
        # The API's reaper loop sends the retry's task, once.
        wait_for(lambda: get_job(job_id).enqueued_at is not None, timeout=20, message="retry sent")
    assert len(list(queue.iterdir())) == 2
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "queued" and job["attempts"] == 1 and "retry 1 of 1" in job["reason"]


def test_health_kinds_cache_and_prometheus(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    stats = client.get("/v1/cache/stats").json()
    assert stats["assets"] == 0 and stats["hit_ratio"] == 0.0 and stats["frame_root"].endswith("frames")
    create_job("train", {})
    text = client.get("/metrics").text
    assert 'reelrl_api_jobs{kind="train",state="queued"} 1.0' in text
    assert 'reelrl_api_requests_total{method="GET",route="/v1/cache/stats",status="200"} 1.0' in text


def test_broker_down_is_503_and_the_job_is_failed(make_client, monkeypatch):
    from services.common.settings import reset_settings_cache

    monkeypatch.setenv("REELRL_BROKER_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    reset_settings_cache()
    client = make_client()
    response = client.post("/v1/jobs", json=preprocess_body())
    assert response.status_code == 503 and "could not enqueue" in response.json()["detail"]
    (job,), _ = list_jobs()
    assert job.state == JobState.failed and "could not enqueue on the broker" in job.reason

"""The API's edges in process: strict JSON numbers, strict integers, Host and Origin, Allow, paging,
one live train job per output folder, a missing model refused at submit."""

import json

import pytest

from services.api.hosts import split_host
from services.common.jobs import create_job, list_jobs


def post_raw(client, text: str, **headers):
    return client.post(
        "/v1/jobs", content=text.encode(), headers={"content-type": "application/json", **headers}
    )


def locs(response):
    return [".".join(str(p) for p in e["loc"]) for e in response.json()["detail"]]


PREPROCESS = '{"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "o.jsonl", %s}}'


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
@pytest.mark.parametrize(
    ("template", "loc"),
    [
        (PREPROCESS % '"video_params": {"fps": %s}', "body.config.video_params.fps"),
        (PREPROCESS % '"video_params": {"max_pixels": %s}', "body.config.video_params.max_pixels"),
        (PREPROCESS % '"timeout_s": %s', "body.config.timeout_s"),  # valid when finite: was stored null
        ('{"kind": "train", "config": {"rollout": {"top_p": %s}}}', "body.config.rollout.top_p"),
        ('{"kind": "train", "config": {"actor": {"optim": {"lr": %s}}}}', "body.config.actor.optim.lr"),
        ('{"kind": "eval", "config": {"rollout": {"temperature": %s}}}', "body.config.rollout.temperature"),
        ('{"kind": "preprocess", "config": {}, "max_retries": %s}', "body.max_retries"),
        ('{"kind": "preprocess", "config": {"x": [1, {"y": %s}]}}', "body.config.x.1.y"),
    ],
)
def test_non_finite_numbers_are_422_naming_the_field(client, template, loc, number):
    response = post_raw(client, template % number)
    assert response.status_code == 422, response.text
    errors = {".".join(map(str, e["loc"])): e for e in response.json()["detail"]}
    assert loc in errors and errors[loc]["type"] == "finite_number", errors
    assert number in errors[loc]["msg"]
    assert list_jobs()[1] == 0


@pytest.mark.parametrize("text", ['"Infinity"', '"1e400"'])
def test_non_finite_numbers_written_as_strings_are_422_too(client, text):
    """pydantic reads these strings as floats (and `reelrl submit` sends YAML's 1e400 as one): refused
    like the numbers, naming the field (before: accepted, a timeout_s of infinity stored as null)."""
    response = post_raw(client, PREPROCESS % f'"timeout_s": {text}')
    assert response.status_code == 422, response.text
    errors = {".".join(map(str, e["loc"])): e for e in response.json()["detail"]}
    assert errors["body.config.timeout_s"]["type"] == "finite_number", errors
    assert list_jobs()[1] == 0


def test_finite_numbers_still_pass(client):
    response = post_raw(client, PREPROCESS % '"timeout_s": 1e3, "video_params": {"fps": 0.5}')
    assert response.status_code == 202, response.text
    assert list_jobs()[0][0].config["timeout_s"] == 1000.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"kind": "preprocess", "config": {"dataset": "\xff"}}', "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
        (b'{"kind": "preprocess", "config": {}, "max_retries": 1' + b"0" * 5000 + b"}", "integers must lie"),
    ],
)
def test_unreadable_bodies_are_422_not_400(make_client, content, message):
    client = make_client(max_body_bytes=10**6)
    response = client.post("/v1/jobs", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize("value", ["false", "true", "1.0", '"1"'])
def test_max_retries_is_a_strict_integer(client, value):
    body = '{"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "o.jsonl"}, "max_retries": %s}'
    response = post_raw(client, body % value)
    assert response.status_code == 422, response.text
    assert "body.max_retries" in locs(response)
    assert list_jobs()[1] == 0


def test_the_schema_documents_422_for_malformed_bodies(client):
    responses = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]["responses"]
    assert "422" in responses and "400" not in responses


def test_options_and_wrong_methods_name_every_allowed_method(client):
    for method in ("OPTIONS", "PUT", "DELETE"):
        response = client.request(method, "/v1/jobs")
        assert response.status_code == 405
        assert set(response.headers["allow"].split(", ")) == {"GET", "POST"}, response.headers
    one = client.request("DELETE", "/v1/jobs/" + "0" * 32)
    assert one.status_code == 405 and one.headers["allow"] == "GET"


# --- Host and Origin ---------------------------------------------------------------------------


def test_split_host():
    assert split_host("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert split_host("[::1]:80") == ("::1", 80)
    assert split_host("LocalHost.") == ("localhost", None)
    assert split_host("a.example:x") is None and split_host("") is None and split_host("[::1") is None
    assert split_host("evil@x:1") is None


@pytest.mark.parametrize("auth", ["open", "required"])
def test_foreign_host_names_are_refused_in_every_mode(make_client, auth):
    client = make_client(auth=auth)
    for method, path in (("GET", "/v1/jobs"), ("GET", "/"), ("GET", "/healthz"), ("POST", "/v1/jobs")):
        response = client.request(method, path, headers={"host": "attacker.example:18101"})
        assert response.status_code == 400, (method, path, response.text)
        assert "REELRL_API_ALLOWED_HOSTS" in response.json()["detail"]
    assert list_jobs()[1] == 0


def test_loopback_names_ip_literals_and_configured_names_are_served(make_client):
    client = make_client(allowed_hosts="testserver, reelrl.example.com, *.corp.example")
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "10.1.2.3:8000", "reelrl.example.com",
                 "api.corp.example:443"):  # fmt: skip
        assert client.get("/healthz", headers={"host": host}).status_code == 200, host
    assert client.get("/healthz", headers={"host": "corp.example.evil"}).status_code == 400


def test_cross_origin_writes_are_refused_in_every_mode(make_client, data_root):
    body = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "o.jsonl"}}
    for auth in ("open", "required"):
        client = make_client(auth=auth)
        for origin in (
            "http://attacker.example:18101",
            "null",
            "http://localhost:3000",
            "http://testserver.evil",
        ):
            response = client.post("/v1/jobs", json=body, headers={"origin": origin})
            assert response.status_code == 403, (auth, origin, response.text)
            assert "cross-origin" in response.json()["detail"]
        # A rebound name is refused on the Host already, whatever the Origin says.
        rebound = client.post(
            "/v1/jobs",
            json=body,
            headers={"host": "attacker.example:18101", "origin": "http://attacker.example:18101"},
        )
        assert rebound.status_code == 400
    assert list_jobs()[1] == 0
    client = make_client()
    # The page's own origin, and clients that send none (curl, reelrl), may write.
    assert client.post("/v1/jobs", json=body, headers={"origin": "http://testserver"}).status_code == 202
    assert client.post("/v1/jobs", json=body).status_code == 202
    # Reads from another origin are not writes (the browser keeps their answer from the other site).
    assert client.get("/v1/jobs", headers={"origin": "http://attacker.example"}).status_code == 200


# --- paging -------------------------------------------------------------------------------------


def test_jobs_page_pages_and_counts_what_it_shows(make_client, data_root):
    client = make_client()
    ids = [create_job("preprocess", {"n": i}) for i in range(7)]
    first = client.get("/?limit=3")
    assert first.status_code == 200
    assert "1–3 of 7 jobs" in first.text
    shown = sorted(
        (first.text.index(f'data-job-id="{i}"'), i) for i in ids if f'data-job-id="{i}"' in first.text
    )
    assert [i for _, i in shown] == ids[::-1][:3]  # the newest three, newest first
    assert 'href="/?limit=3&amp;offset=3"' in first.text and 'rel="prev"' not in first.text
    last = client.get("/?limit=3&offset=6")
    assert "7–7 of 7 jobs" in last.text
    assert [i for i in ids if f'data-job-id="{i}"' in last.text] == [ids[0]]
    assert 'href="/?limit=3&amp;offset=3" rel="prev"' in last.text and 'rel="next"' not in last.text
    api = client.get("/v1/jobs", params={"limit": 3, "offset": 6}).json()
    assert [j["id"] for j in api["items"]] == [ids[0]] and api["total"] == 7 and api["offset"] == 6


# --- train jobs: one live job per output folder; the model must exist -----------------------------


def _tiny_model_dir(data_root):
    model = data_root / "models" / "tiny"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    return model


def train_body(data_root, **trainer):
    _tiny_model_dir(data_root)
    return {
        "kind": "train",
        "config": {
            "data": {"train_files": ["train.jsonl"]},
            "actor": {"model_path": "models/tiny"},
            "trainer": {"output_dir": "runs/a", **trainer},
        },
    }


def test_a_train_job_naming_a_missing_model_is_refused_at_submit(client, data_root):
    body = train_body(data_root)
    for missing in ("models/none", "Qwen/Qwen2.5-VL-7B-Instruct"):
        body["config"]["actor"]["model_path"] = missing
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 422, response.text
        detail = json.dumps(response.json()["detail"])
        assert "body.config.actor.model_path" in locs(response) or "actor.model_path" in detail
        assert "no model" in detail, detail
    assert list_jobs()[1] == 0


def test_two_live_train_jobs_may_not_share_an_output_dir(client, data_root):
    body = train_body(data_root)
    first = client.post("/v1/jobs", json=body)
    assert first.status_code == 202, first.text
    again = client.post("/v1/jobs", json=body)
    assert again.status_code == 409, again.text
    assert first.json()["id"] in again.json()["detail"] and "output_dir" in again.json()["detail"]
    # the same folder spelled otherwise is the same folder
    for spelling in ("./runs/./a/", "runs/b/../a", str(data_root / "runs" / "a")):
        other = client.post("/v1/jobs", json=train_body(data_root, output_dir=spelling))
        assert other.status_code == 409, (spelling, other.text)
    # The same idempotency key is the same job, not a conflict; another folder is another job.
    keyed = client.post(
        "/v1/jobs", json={**train_body(data_root, output_dir="runs/b"), "idempotency_key": "k1"}
    )
    replay = client.post(
        "/v1/jobs", json={**train_body(data_root, output_dir="runs/b"), "idempotency_key": "k1"}
    )
    assert keyed.status_code == replay.status_code == 202 and replay.json()["created"] is False
    # Once the first job ended, its folder is free again.
    assert client.post(f"/v1/jobs/{first.json()['id']}/cancel").status_code == 200
    assert client.post("/v1/jobs", json=body).status_code == 202


@pytest.mark.parametrize(
    ("config", "loc", "message"),
    [
        ('"dataset": "tr\\ud800ain.jsonl"', "body.config.dataset", "lone surrogate at character 2"),
        ('"\\udfff": 1', "body.config.<key with a lone surrogate at character 0>", "key is not valid"),
        ('"workers": 1' + "0" * 3999, "body.config.workers", "an integer of 4000 digits"),
        ('"workers": -9223372036854775809', "body.config.workers", "integers must lie within"),
    ],
)
def test_text_and_integers_a_config_cannot_hold_are_422_naming_the_place(client, config, loc, message):
    """A lone surrogate anywhere was a 500 (UnicodeEncodeError, even while rendering the 422); a
    4,000-digit integer was accepted into a job config."""
    response = post_raw(client, '{"kind": "preprocess", "config": {' + config + "}}")
    assert response.status_code == 422, response.text
    (error,) = [e for e in response.json()["detail"] if ".".join(map(str, e["loc"])) == loc]
    assert message in error["msg"] and error["input"] is None
    assert list_jobs()[1] == 0

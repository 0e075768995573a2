"""The FastAPI app in-process (ASGI): per-item errors, 422/413, problem types, metrics."""

import json
import time

import pytest
from fastapi.testclient import TestClient

from services.reward.app import create_app
from services.reward.registry import get_type
from services.reward.sample import MAX_ANSWER_CHARS, MAX_NAME_CHARS, MAX_OPTION_CHARS
from services.reward.settings import RewardServiceSettings

MC = {"problem_type": "multiple choice", "answer": "B", "options": ["A. red", "B. blue"]}


@pytest.fixture(scope="module")
def client():
    app = create_app(RewardServiceSettings(warm_math=False, max_batch_items=4, max_response_chars=1000))
    with TestClient(app) as client:
        yield client


def test_scores_a_batch_and_fails_bad_items_alone(client):
    body = {
        "items": [
            {"sample": MC, "response": "<answer>B</answer>"},
            {"sample": {"problem_type": "horoscope", "answer": "B"}, "response": "B"},
            {"sample": {"problem_type": "mcq"}, "response": "B"},
            {"sample": MC, "response": "A"},
        ]
    }
    response = client.post("/v1/score", json=body)
    assert response.status_code == 200
    first, unknown, no_answer, wrong = response.json()["results"]
    assert first == {
        "overall": 1.0, "accuracy": 1.0, "format": 1.0, "extracted": "B",
        "problem_type": "multiple choice", "error": None, "note": None, "parts": None,
    }  # fmt: skip
    assert "unknown problem_type 'horoscope'" in unknown["error"] and unknown["overall"] == 0.0
    assert "field answer" in no_answer["error"]
    assert (wrong["accuracy"], wrong["format"], wrong["error"]) == (0.0, 0.0, None)


def test_options_change_the_weights(client):
    body = {"items": [{"sample": MC, "response": "B"}], "options": {"w_acc": 0.5, "w_fmt": 0.5}}
    assert client.post("/v1/score", json=body).json()["results"][0]["overall"] == 0.5  # 0.5·1 + 0.5·0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, ["body", "items"]),
        ({"items": [{"sample": 1, "response": "x"}]}, ["body", "items", 0, "sample"]),
        ({"items": [{"sample": {}, "response": 5}]}, ["body", "items", 0, "response"]),
        ({"items": [{"sample": {}}]}, ["body", "items", 0, "response"]),
        ({"items": [], "options": {"w_acc": 2}}, ["body", "options", "w_acc"]),
        ({"items": [], "surprise": 1}, ["body", "surprise"]),
    ],
)
def test_malformed_bodies_get_422_naming_the_field(client, body, field):
    response = client.post("/v1/score", json=body)
    assert response.status_code == 422
    assert field in [error["loc"] for error in response.json()["detail"]]


MC_JSON = json.dumps(MC).encode()


@pytest.mark.parametrize(
    ("body", "field", "spelled"),
    [
        (b'{"items": [], "options": {"w_acc": NaN}}', ["body", "options", "w_acc"], "NaN"),
        (b'{"items": [], "options": {"w_fmt": Infinity}}', ["body", "options", "w_fmt"], "Infinity"),
        (b'{"items": [], "options": {"w_acc": -Infinity}}', ["body", "options", "w_acc"], "-Infinity"),
        (b'{"items": [], "options": {"max_response_chars": 1e999}}', ["body", "options", "max_response_chars"], "Infinity"),
        (b'{"items": [{"sample": %s, "response": NaN}]}' % MC_JSON, ["body", "items", 0, "response"], "NaN"),
        (b'{"items": [{"sample": %s, "response": -1e999}]}' % MC_JSON, ["body", "items", 0, "response"], "-Infinity"),
        (b'{"items": [{"sample": {"problem_type": "regression", "answer": NaN}, "response": "1"}]}',
         ["body", "items", 0, "sample", "answer"], "NaN"),
        (b'{"items": [{"sample": {"problem_type": "mcq", "answer": "B", "meta": {"fps": [30, Infinity]}}, '
         b'"response": "B"}]}', ["body", "items", 0, "sample", "meta", "fps", 1], "Infinity"),
        (b'{"items": [{"sample": NaN, "response": "B"}]}', ["body", "items", 0, "sample"], "NaN"),
        (b'{"items": [], "surprise": NaN}', ["body", "surprise"], "NaN"),
        (b"NaN", ["body"], "NaN"),
    ],
)  # fmt: skip
def test_non_finite_numbers_get_422_naming_the_field(client, body, field, spelled):
    response = client.post("/v1/score", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422

    def refuse(constant):
        raise AssertionError(f"the error body carries {constant}: not JSON")

    errors = json.loads(response.text, parse_constant=refuse)["detail"]
    assert {"type": "finite_number", "loc": field, "input": spelled}.items() <= errors[0].items()
    assert "1e999" in errors[0]["msg"]


def test_every_non_finite_field_is_named(client):
    body = b'{"items": [{"sample": {"problem_type": "numerical", "answer": NaN}, "response": Infinity}], "options": {"w_acc": NaN}}'
    response = client.post(
        "/v1/score", content=body, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert [e["loc"] for e in response.json()["detail"]] == [
        ["body", "items", 0, "sample", "answer"],
        ["body", "items", 0, "response"],
        ["body", "options", "w_acc"],
    ]


def test_finite_neighbours_still_score(client):
    # a huge finite number is legal JSON and scores; only an overflow to Infinity is refused
    body = b'{"items": [{"sample": {"problem_type": "regression", "answer": 1e300}, "response": "<answer>1e300</answer>"}]}'
    response = client.post("/v1/score", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert response.json()["results"][0]["accuracy"] == 1.0


def test_limits_get_413_with_a_message(client):
    too_many = {"items": [{"sample": MC, "response": "B"}] * 5}
    response = client.post("/v1/score", json=too_many)
    assert response.status_code == 413
    assert "5 items exceed the batch limit 4" in response.json()["detail"]

    too_long = {"items": [{"sample": MC, "response": "B"}, {"sample": MC, "response": "x" * 1001}]}
    response = client.post("/v1/score", json=too_long)
    assert response.status_code == 413
    assert "items[1].response has 1001 characters; the limit is 1000" in response.json()["detail"]


def test_declared_body_size_limit():
    app = create_app(RewardServiceSettings(warm_math=False, max_body_bytes=100))
    with TestClient(app) as small:
        response = small.post("/v1/score", json={"items": [{"sample": MC, "response": "B" * 200}]})
    assert response.status_code == 413
    assert "exceeds 100" in response.json()["detail"]


def test_a_chunked_body_over_the_limit_is_413_before_it_is_read_whole():
    """A body streamed in chunks declares no length: it was read whole (188 MiB past a 64 MiB cap)."""
    app = create_app(RewardServiceSettings(warm_math=False, max_body_bytes=1000))
    sent = []

    def chunks():
        for _ in range(1000):  # 100 kB offered, 100 bytes a chunk
            sent.append(1)
            yield b" " * 100

    with TestClient(app) as small:
        response = small.post("/v1/score", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text
    assert "more than 1000 bytes" in response.json()["detail"]
    assert "REELRL_REWARD_MAX_BODY_BYTES" in response.json()["detail"]


def test_problem_types_and_health(client):
    types = client.get("/v1/problem-types").json()["problem_types"]
    assert {
        "name": "boolean",
        "aliases": ["binary classification", "yes/no", "yes no", "binary"],
    }.items() <= (types[0].items())
    assert len(types) == 15
    assert client.get("/healthz").json() == {"status": "ok"}


def test_metrics_count_requests_items_and_errors():
    app = create_app(RewardServiceSettings(warm_math=False))
    with TestClient(app) as fresh:
        fresh.post("/v1/score", json={"items": [{"sample": MC, "response": "B"}] * 3})
        fresh.post(
            "/v1/score", json={"items": [{"sample": {"problem_type": "?", "answer": 1}, "response": ""}]}
        )
        fresh.post("/v1/score", json={"items": 7})
        text = fresh.get("/metrics").text
    assert 'reelrl_reward_requests_total{method="POST",route="/v1/score",status="200"} 2.0' in text
    assert 'reelrl_reward_requests_total{method="POST",route="/v1/score",status="422"} 1.0' in text
    assert 'reelrl_reward_items_total{problem_type="multiple choice"} 3.0' in text
    assert 'reelrl_reward_item_errors_total{problem_type="unknown"} 1.0' in text
    assert 'reelrl_reward_request_seconds_count{route="/v1/score"} 3.0' in text


def test_an_item_that_crashes_the_scorer_fails_alone(monkeypatch):
    def broken(*_args):
        raise MemoryError

    monkeypatch.setattr(get_type("code"), "extract", broken)
    app = create_app(RewardServiceSettings(warm_math=False))
    body = {
        "items": [
            {"sample": MC, "response": "<answer>B</answer>"},
            {"sample": {"problem_type": "code", "answer": "x = 1"}, "response": "<answer>x = 1</answer>"},
        ]
    }
    with TestClient(app) as fresh:
        response = fresh.post("/v1/score", json=body)
    assert response.status_code == 200
    good, crashed = response.json()["results"]
    assert (good["overall"], good["error"]) == (1.0, None)
    assert (crashed["overall"], crashed["problem_type"]) == (0.0, "code")
    assert crashed["error"].startswith("item 1: internal error") and "MemoryError" in crashed["error"]


def test_the_service_applies_its_math_deadline_to_each_request():
    # in-process scoring has no batch deadline; the service always has one (REELRL_REWARD_MATH_DEADLINE_S)
    app = create_app(RewardServiceSettings(warm_math=False, math_deadline_s=1e-6))
    sample = {"problem_type": "math", "answer": "z^2+4z+4"}
    body = {"items": [{"sample": sample, "response": r"\boxed{(z+2)^2}"}, {"sample": MC, "response": "B"}]}
    with TestClient(app) as fresh:
        math_item, choice = fresh.post("/v1/score", json=body).json()["results"]
    assert math_item["accuracy"] == 0.0
    assert (
        math_item["note"]
        == "math equivalence check timed out (the request deadline passed before this check started)"
    )
    assert choice["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("sample", "field", "message"),
    [
        ({**MC, "answer": "B" * (MAX_ANSWER_CHARS + 1)}, "answer", "the ground truth has 100,001 characters"),
        ({"problem_type": "ocr", "solution": "w " * 50_001}, "solution", "the ground truth has 100,002"),
        ({**MC, "options": ["A. red", "x" * (MAX_OPTION_CHARS + 1)]}, "options", "option 1 has 4,001"),
        (
            {**MC, "problem_type": "m" * (MAX_NAME_CHARS + 1)},
            "problem_type",
            "1,001 characters; at most 1,000",
        ),
        ({**MC, "id": "v" * (MAX_NAME_CHARS + 1)}, "id", "1,001 characters; at most 1,000"),
    ],
)
def test_sample_texts_over_their_bounds_get_422_naming_the_field(client, sample, field, message):
    body = {"items": [{"sample": MC, "response": "B"}, {"sample": sample, "response": "B"}]}
    response = client.post("/v1/score", json=body)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "items", 1, "sample", field]
    assert message in error["msg"]


def test_sample_texts_at_their_bounds_are_scored(client):
    sample = {"problem_type": "ocr", "answer": "w " * (MAX_ANSWER_CHARS // 2), "id": "v" * MAX_NAME_CHARS}
    response = client.post(
        "/v1/score", json={"items": [{"sample": sample, "response": "<answer>w</answer>"}]}
    )
    assert response.status_code == 200
    assert response.json()["results"][0]["error"] is None


def test_the_service_stops_an_item_at_its_item_timeout(monkeypatch):
    def spin(*_args):
        stop = time.monotonic() + 60  # never reached while the limit works
        while time.monotonic() < stop:
            pass
        return 1.0

    monkeypatch.setattr(get_type("ocr"), "accuracy", spin)
    app = create_app(RewardServiceSettings(warm_math=False, item_timeout_s=0.5))
    body = {"items": [{"sample": {"problem_type": "ocr", "answer": "stop"}, "response": "stop"},
                      {"sample": MC, "response": "B"}]}  # fmt: skip
    with TestClient(app) as fresh:
        stuck, choice = fresh.post("/v1/score", json=body).json()["results"]
        text = fresh.get("/metrics").text
    assert stuck["error"] == "item 0: scoring took longer than item_timeout_s=0.5 s; stopped"
    assert (stuck["overall"], choice["accuracy"]) == (0.0, 1.0)
    assert 'reelrl_reward_item_errors_total{problem_type="ocr"} 1.0' in text

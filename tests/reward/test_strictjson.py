"""Strict JSON at the service's edge: where the non-finite numbers are, and error bodies that stay JSON."""

import asyncio
import json
import math

from fastapi.exceptions import RequestValidationError

from services.reward.strictjson import json_safe, non_finite_locations, validation_error_handler

NAN, INF = float("nan"), float("inf")


def _strict_loads(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} in a response body is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_locations_in_document_order():
    body = {"items": [{"sample": {"answer": NAN, "x": [1.0, -INF]}, "response": "r"}], "options": {"w": INF}}
    found = non_finite_locations(body)
    assert [path for path, _ in found] == [
        ("items", 0, "sample", "answer"),
        ("items", 0, "sample", "x", 1),
        ("options", "w"),
    ]
    assert math.isnan(found[0][1]) and found[1][1] == -INF and found[2][1] == INF


def test_non_finite_locations_finite_body_and_limit():
    assert non_finite_locations({"a": [1, 2.5, "NaN", None, True], "b": {"c": 1e308}}) == []
    assert non_finite_locations(NAN)[0][0] == ()  # the whole body
    assert len(non_finite_locations([NAN] * 100, limit=3)) == 3


def test_non_finite_locations_survive_deep_nesting():
    deep = NAN
    for _ in range(5000):  # deeper than the recursion limit: the walk is iterative
        deep = [deep]
    ((path, _),) = non_finite_locations(deep)
    assert path == (0,) * 5000


def test_json_safe_names_non_finite_values():
    assert json_safe({"a": [NAN, INF, -INF, 1.5, "x"], "b": (2, -INF)}) == {
        "a": ["NaN", "Infinity", "-Infinity", 1.5, "x"],
        "b": [2, "-Infinity"],
    }


def test_validation_error_handler_answers_json_whatever_the_input():
    # a validation error whose input is non-finite (how FastAPI's own handler crashed with a 500)
    errors = [
        {"type": "finite_number", "loc": ("body", "options", "w_acc"), "msg": "m", "input": NAN},
        {"type": "less_than", "loc": ("body", "x"), "msg": "m", "input": {"v": [INF]}, "ctx": {"lt": -INF}},
    ]
    response = asyncio.run(validation_error_handler(None, RequestValidationError(errors)))
    assert response.status_code == 422
    detail = _strict_loads(response.body.decode())["detail"]
    assert [(e["loc"], e["input"]) for e in detail] == [
        (["body", "options", "w_acc"], "NaN"),
        (["body", "x"], {"v": ["Infinity"]}),
    ]
    assert detail[1]["ctx"] == {"lt": "-Infinity"}

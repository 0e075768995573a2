"""Schemathesis against the service's OpenAPI schema: whatever the body, never a 5xx.

Generated bodies are valid JSON, so a hook also plants a non-finite number (``NaN``, ``Infinity``,
``-Infinity``, ``1e999``, ``-1e999``, spelled as Python's parser reads them) at a random place in some of
them: those must get a 422 naming that place.
"""

import json

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from services.reward.app import create_app
from services.reward.settings import RewardServiceSettings

app = create_app(RewardServiceSettings(warm_math=False, max_batch_items=64))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
client = TestClient(app)

SPELLINGS = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999")
# A string no generated body contains, replaced by the raw token after serialising.
_MARK = "\ue000non-finite:{}\ue000"


def _places(value, path=()):
    """Every node's path: the planted number replaces a leaf, a container or the whole body."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _places(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _places(child, (*path, index))


def _plant(body, path, spelling):
    if not path:
        return _MARK.format(spelling)
    copy = json.loads(json.dumps(body))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _MARK.format(spelling)
    return copy


@schema.hook("flatmap_body")
def plant_non_finite(context, body):
    if not isinstance(body, dict | list):
        return st.just(body)
    planted = st.builds(
        _plant, st.just(body), st.sampled_from(list(_places(body))), st.sampled_from(SPELLINGS)
    )
    return st.one_of(planted, st.just(body))


def _planted(body) -> tuple[tuple, str] | None:
    for path in _places(body):
        node = body
        for step in path:
            node = node[step]
        if isinstance(node, str) and node.startswith(_MARK[0]) and node.endswith(_MARK[-1]):
            return path, node[len("\ue000non-finite:") : -1]
    return None


OPERATIONS = [result.ok() for result in schema.get_all_operations()]


# One test per operation, each with an id of its own: schemathesis' own parametrize gave every
# operation the same test id, and pytest-xdist ran only some of them (2,401 of 2,404 tests ran).
@pytest.mark.slow
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_no_server_errors(operation) -> None:
    seen = {"planted": 0, "plain": 0}

    @given(case=operation.as_strategy(hooks=schema.hooks))
    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def no_5xx(case) -> None:
        planted = _planted(case.body) if isinstance(case.body, dict | list | str) else None
        seen["plain" if planted is None else "planted"] += 1
        check(case, planted)

    no_5xx()
    assert seen["plain"] > 0
    if operation.body:  # the hook planted non-finite numbers in some of the bodies
        assert seen["planted"] > 0, seen


def check(case, planted) -> None:
    if planted is None:
        response = case.call()
    else:
        path, spelling = planted
        # json.dumps would refuse a float NaN; the raw token is what a hostile client sends
        mark = json.dumps(_MARK.format(spelling), ensure_ascii=False)
        text = json.dumps(case.body, ensure_ascii=False).replace(mark, spelling)
        response = client.request(
            case.method,
            case.formatted_path,
            content=text.encode(),
            headers={"content-type": "application/json"},
        )
    case.validate_response(response, checks=[not_a_server_error])
    if planted is not None:
        assert response.status_code == 422, response.text
        errors = response.json()["detail"]
        assert {"type": "finite_number", "loc": ["body", *path]}.items() <= errors[0].items()
    elif response.status_code == 200 and case.path == "/v1/score":
        results = response.json()["results"]
        assert len(results) == len(case.body["items"])
        assert all(0.0 <= r["accuracy"] <= 1.0 and r["format"] in (0.0, 0.5, 1.0) for r in results)

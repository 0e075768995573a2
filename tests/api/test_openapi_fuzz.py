"""Schemathesis against the real server's OpenAPI schema (uvicorn, open auth): whatever it sends, no 5xx.

Cases are drawn per operation with Hypothesis directly (schemathesis' pytest plugin does not run under
this pytest version): data that fits the schema and data that does not, for random ids and for the id
of a real (finished) job.
"""

import contextlib

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode

from tests.api.stack import running_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The all-jobs stream never ends by design (a GET without parameters; tested in test_live).
ENDLESS = {("GET", "/v1/events")}


def strategies(operation, job_id):
    """Fitting and unfitting data; for operations on one job, also with the id of a real job."""
    fixed = {"path_parameters": {"job_id": job_id}} if "{job_id}" in operation.path else None
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        yield operation.as_strategy(mode)
        if fixed:
            yield operation.as_strategy(mode, **fixed)


def fuzz(strategy, seen):
    @given(case=strategy)
    @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def no_5xx(case):
        response = case.call(timeout=30)
        seen.add(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])

    return no_5xx


def test_no_server_errors(tmp_path, video_dir):
    with running_stack(tmp_path, video_dir, {"REELRL_API_MAX_BODY_BYTES": "65536"}) as stack:
        stack.start_api()
        with stack.http() as http:
            body = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "o.jsonl"}}
            job_id = http.post("/v1/jobs", json=body).json()["id"]
            # Finished, so its event stream ends; no worker runs in this stack.
            assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        schema = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
        statuses: dict[str, set[int]] = {}
        for result in schema.get_all_operations():
            operation = result.ok()
            name = f"{operation.method.upper()} {operation.path}"
            if (operation.method.upper(), operation.path) in ENDLESS:
                continue
            for strategy in strategies(operation, job_id):
                # Unsatisfiable: nothing of this operation can be made invalid (no parameters, or all fixed).
                with contextlib.suppress(Unsatisfiable):
                    fuzz(strategy, statuses.setdefault(name, set()))()
        # Both the happy and the refusing paths were reached.
        assert {202, 422} <= statuses["POST /v1/jobs"], statuses
        assert {200, 404} <= statuses["GET /v1/jobs/{job_id}/events"], statuses
        assert {409, 404} <= statuses["POST /v1/jobs/{job_id}/cancel"], statuses
        assert 422 in statuses["GET /v1/jobs"], statuses

"""Schemathesis against the service's OpenAPI schema: whatever the body, never a 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from services.reward.app import create_app
from services.reward.settings import RewardServiceSettings

app = create_app(RewardServiceSettings(warm_math=False, max_batch_items=64))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code == 200 and case.path == "/v1/score":
        results = response.json()["results"]
        assert len(results) == len(case.body["items"])
        assert all(0.0 <= r["accuracy"] <= 1.0 and r["format"] in (0.0, 0.5, 1.0) for r in results)

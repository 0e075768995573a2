"""The API while its Postgres restarts: 503 with Retry-After for every door that needs the database
(lists, the page, submits, authenticated requests), never a 500, and it serves again by itself once
the database is back. A Postgres of the test's own, stopped and started under the running app."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.common.db.engine import dispose_engines
from services.common.settings import reset_settings_cache
from tests.api.private_postgres import PrivatePostgres

pytestmark = pytest.mark.integration
BODY = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "out/x.jsonl"}}


@pytest.fixture
def postgres(monkeypatch, data_root):
    server = PrivatePostgres()
    try:
        server.start()
        monkeypatch.setenv("REELRL_DATABASE_URL", server.url)
        reset_settings_cache()
        yield server
    finally:
        dispose_engines()
        server.remove()


def test_a_database_restart_is_503_then_served_again(postgres):
    with TestClient(create_app(ApiSettings(allowed_hosts="testserver"))) as client:
        assert client.get("/v1/jobs").status_code == 200
        postgres.stop()
        for method, path in [
            ("GET", "/v1/jobs"),
            ("GET", "/"),
            ("GET", "/v1/cache/stats"),
            ("POST", "/v1/jobs"),
        ]:
            response = client.request(method, path, json=BODY if method == "POST" else None)
            assert response.status_code == 503, (method, path, response.status_code, response.text[:300])
            assert response.headers["retry-after"] == "5"
            assert "the database is unreachable" in response.json()["detail"]
        assert client.get("/healthz").status_code == 503
        postgres.start()
        assert client.get("/v1/jobs").status_code == 200  # no restart of the API
        assert client.post("/v1/jobs", json=BODY).status_code == 202


def test_token_checks_while_the_database_is_away_are_503_not_401_or_500(postgres):
    from services.api.tokens import Scope, create_token

    token = create_token("ci", [Scope.read, Scope.submit])
    with TestClient(create_app(ApiSettings(allowed_hosts="testserver", auth="required"))) as client:
        headers = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/jobs", headers=headers).status_code == 200
        postgres.stop()
        response = client.get("/v1/jobs", headers=headers)
        assert response.status_code == 503 and response.headers["retry-after"] == "5", response.text[:300]
        postgres.start()
        assert client.get("/v1/jobs", headers=headers).status_code == 200

"""Bearer tokens: stored hashed, scoped; unauthenticated → 401, out of scope → 403, neither touches anything."""

import hashlib

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from services.api.auth import CSRF_HEADER, csrf_token
from services.api.settings import ApiSettings
from services.api.tokens import Scope, TokenError, authenticate, create_token, parse_scopes, revoke_token
from services.cli import app as cli
from services.common.db import session_scope
from services.common.db.models import ApiToken
from services.common.jobs import create_job, get_job, list_jobs, run_job

BODY = {"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": "o.jsonl"}}


@pytest.fixture
def locked(make_client):
    return make_client(auth="required")


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_unauthenticated_requests_are_401_and_change_nothing(locked):
    for method, path in [
        ("GET", "/v1/jobs"),
        ("GET", "/v1/cache/stats"),
        ("GET", "/metrics"),
        ("POST", "/v1/jobs"),
    ]:
        response = locked.request(method, path, json=BODY if method == "POST" else None)
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == "Bearer"
        assert "token is required" in response.json()["detail"]
    # Authentication comes before parsing: even a malformed body gets 401.
    garbage = locked.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert garbage.status_code == 401
    for header in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer rrl_not-a-real-token"):
        assert locked.get("/v1/jobs", headers={"Authorization": header}).status_code == 401
    assert list_jobs()[1] == 0
    # Liveness and the schema stay public.
    assert locked.get("/healthz").status_code == 200 and locked.get("/openapi.json").status_code == 200


def test_scopes(locked):
    reader = create_token("reader", [Scope.read])
    submitter = create_token("ci", [Scope.read, Scope.submit])
    other = create_token("other", [Scope.submit])
    admin = create_token("root", [Scope.admin])

    assert locked.get("/v1/jobs", headers=bearer(reader)).status_code == 200
    refused = locked.post("/v1/jobs", json=BODY, headers=bearer(reader))
    assert refused.status_code == 403 and "lacks the 'submit' scope" in refused.json()["detail"]
    assert list_jobs()[1] == 0

    accepted = locked.post("/v1/jobs", json=BODY, headers=bearer(submitter))
    assert accepted.status_code == 202
    job_id = accepted.json()["id"]
    assert locked.get(f"/v1/jobs/{job_id}", headers=bearer(submitter)).json()["owner"] == "ci"
    # submit without read: may submit, may not list
    assert locked.get("/v1/jobs", headers=bearer(other)).status_code == 403
    # Only the owner or an admin cancels a job.
    foreign = locked.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(other))
    assert foreign.status_code == 403 and "admin" in foreign.json()["detail"]
    assert locked.get(f"/v1/jobs/{job_id}", headers=bearer(admin)).json()["state"] == "queued"
    assert locked.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(admin)).json()["state"] == "cancelled"
    mine = locked.post("/v1/jobs", json={**BODY, "idempotency_key": "k"}, headers=bearer(submitter)).json()[
        "id"
    ]
    assert locked.post(f"/v1/jobs/{mine}/cancel", headers=bearer(submitter)).status_code == 200


def test_tokens_are_stored_hashed_and_revocable(locked):
    token = create_token("ci", [Scope.read])
    assert token.startswith("rrl_") and len(token) > 40
    with session_scope() as session:
        row = session.scalar(select(ApiToken))
        stored = [str(getattr(row, c.key)) for c in ApiToken.__table__.columns]
    assert not any(token in value for value in stored)
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert authenticate(token).name == "ci"
    revoke_token("ci")
    assert authenticate(token) is None
    assert locked.get("/v1/jobs", headers=bearer(token)).status_code == 401
    with pytest.raises(TokenError, match="no active token"):
        revoke_token("ci")
    # A revoked token's name is free again (the old token stays refused); an active one's is not.
    again = create_token("ci", [Scope.read])
    assert authenticate(again).name == "ci" and authenticate(token) is None
    with pytest.raises(TokenError, match="exists already"):
        create_token("ci", [Scope.read])
    with pytest.raises(TokenError, match="unknown scope"):
        parse_scopes("read,write")
    assert parse_scopes("submit, read") == [Scope.read, Scope.submit]


def test_pages_need_a_token_and_the_cookie_only_reads(locked):
    page = locked.get("/")
    assert page.status_code == 401 and 'name="token"' in page.text
    assert locked.get("/cache").status_code == 401
    assert locked.get("/static/app.css").status_code == 200  # assets are public
    token = create_token("viewer", [Scope.read, Scope.submit])
    wrong = locked.post("/login", data={"token": "rrl_wrong", "next": "/cache"}, follow_redirects=False)
    assert wrong.status_code == 401 and "invalid or revoked token" in wrong.text
    login = locked.post("/login", data={"token": token, "next": "/cache"}, follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == "/cache"
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert locked.get("/cache").status_code == 200 and "signed in as" in locked.get("/").text
    # A cookie alone never authorises a write (a cross-site form cannot submit jobs).
    assert locked.post("/v1/jobs", json=BODY).status_code == 403
    assert list_jobs()[1] == 0
    off_site = locked.post("/login", data={"token": token, "next": "//evil.example"}, follow_redirects=False)
    assert off_site.headers["location"] == "/"


def test_the_cookie_writes_only_with_the_pages_csrf_header(locked):
    token = create_token("operator", [Scope.read, Scope.submit])
    locked.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    job_id = locked.post("/v1/jobs", json=BODY, headers=bearer(token)).json()["id"]
    # The job page hands its scripts the header value for this cookie (the button is for the owner).
    page = locked.get(f"/jobs/{job_id}").text
    assert 'id="cancel-job"' in page and csrf_token(token) in page and token not in page
    for headers in ({}, {CSRF_HEADER: "0" * 64}, {CSRF_HEADER: csrf_token(token + "x")}):
        refused = locked.post(f"/v1/jobs/{job_id}/cancel", headers=headers)
        assert refused.status_code == 403 and CSRF_HEADER in refused.json()["detail"], headers
    assert get_job(job_id).state.value == "queued"
    accepted = locked.post(f"/v1/jobs/{job_id}/cancel", headers={CSRF_HEADER: csrf_token(token)})
    assert accepted.status_code == 200 and accepted.json()["state"] == "cancelled"
    # Finished: no button.
    assert 'id="cancel-job"' not in locked.get(f"/jobs/{job_id}").text


def test_the_cancel_button_is_shown_to_who_may_cancel(locked):
    owner = create_token("owner", [Scope.read, Scope.submit])
    job_id = locked.post("/v1/jobs", json=BODY, headers=bearer(owner)).json()["id"]
    for name, scopes, shown in [
        ("viewer", [Scope.read], False),  # no submit scope
        ("colleague", [Scope.read, Scope.submit], False),  # not the owner
        ("root", [Scope.admin], True),
    ]:
        page = locked.get(f"/jobs/{job_id}", headers=bearer(create_token(name, scopes))).text
        assert ('id="cancel-job"' in page) is shown, name
    assert 'id="cancel-job"' in locked.get(f"/jobs/{job_id}", headers=bearer(owner)).text


def test_metrics_scope_and_public_metrics(make_client, monkeypatch):
    locked = make_client(auth="required")
    scraper = create_token("prometheus", [Scope.metrics])
    assert locked.get("/metrics", headers=bearer(scraper)).status_code == 200
    assert "reelrl_api_requests_total" in locked.get("/metrics", headers=bearer(scraper)).text
    # A scrape token reads nothing else, and a token without read or metrics cannot scrape.
    assert locked.get("/v1/jobs", headers=bearer(scraper)).status_code == 403
    assert locked.get("/", headers=bearer(scraper)).status_code == 403
    submitter = create_token("ci", [Scope.submit])
    refused = locked.get("/metrics", headers=bearer(submitter))
    assert refused.status_code == 403 and "'read' or 'metrics'" in refused.json()["detail"]
    assert locked.get("/metrics", headers=bearer(create_token("r", [Scope.read]))).status_code == 200
    # Protected unless said otherwise, and saying so opens /metrics only.
    assert ApiSettings().metrics_public is False
    monkeypatch.setenv("REELRL_API_METRICS_PUBLIC", "true")
    public = make_client(auth="required", metrics_public=ApiSettings().metrics_public)
    assert public.get("/metrics").status_code == 200
    assert public.get("/v1/jobs").status_code == 401 and public.get("/").status_code == 401


def test_a_cancelled_running_job_via_cookie_ends_cancelled(locked):
    token = create_token("operator", [Scope.read, Scope.submit])
    locked.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    job_id = create_job("train", {}, owner="operator")
    with run_job(job_id) as ctx:
        response = locked.post(f"/v1/jobs/{job_id}/cancel", headers={CSRF_HEADER: csrf_token(token)})
        assert response.status_code == 200 and response.json()["cancel_requested"] is True
        assert ctx._cancel.wait(10)
    assert get_job(job_id).state.value == "cancelled"


def test_open_mode_and_the_default(make_client):
    open_api = make_client(auth="open")
    assert open_api.post("/v1/jobs", json=BODY).status_code == 202
    assert "open API" in open_api.get("/").text
    # A token that is given is still checked.
    assert open_api.get("/v1/jobs", headers=bearer("rrl_forged")).status_code == 401
    # Default: open on loopback binds only.
    assert not ApiSettings(host="127.0.0.1").auth_required
    assert not ApiSettings(host="::1").auth_required
    assert ApiSettings(host="0.0.0.0").auth_required
    assert ApiSettings(host="10.1.2.3").auth_required
    assert ApiSettings(host="127.0.0.1", auth="required").auth_required


def test_an_open_api_refuses_a_cookie_write_without_the_csrf_header(make_client):
    """The cookie is not dropped to run the write anonymously (with every scope): it is refused."""
    open_api = make_client(auth="open")
    viewer = create_token("viewer", [Scope.read])
    open_api.post("/login", data={"token": viewer, "next": "/"}, follow_redirects=False)
    job_id = create_job("preprocess", {})
    for headers in ({}, {CSRF_HEADER: csrf_token(viewer + "x")}):
        refused = open_api.post(f"/v1/jobs/{job_id}/cancel", headers=headers)
        assert refused.status_code == 403 and CSRF_HEADER in refused.json()["detail"], headers
        assert open_api.post("/v1/jobs", json=BODY, headers=headers).status_code == 403
    # With the header the cookie's own token decides: a read-only one may not cancel.
    scoped = open_api.post(f"/v1/jobs/{job_id}/cancel", headers={CSRF_HEADER: csrf_token(viewer)})
    assert scoped.status_code == 403 and "lacks the 'submit' scope" in scoped.json()["detail"]
    assert get_job(job_id).state.value == "queued" and list_jobs()[1] == 1


def test_token_commands(reelrl_home):
    runner = CliRunner()
    created = runner.invoke(cli, ["token", "create", "--scopes", "read,submit", "--name", "ci"])
    assert created.exit_code == 0, created.output
    token = created.stdout.strip().splitlines()[-1]
    assert authenticate(token).scopes == [Scope.read, Scope.submit]
    listed = runner.invoke(cli, ["token", "list"])
    assert listed.exit_code == 0 and "ci" in listed.stdout and token not in listed.stdout
    assert runner.invoke(cli, ["token", "create", "--scopes", "write"]).exit_code == 2
    assert runner.invoke(cli, ["token", "revoke", "ci"]).exit_code == 0
    assert authenticate(token) is None
    assert runner.invoke(cli, ["token", "revoke", "ci"]).exit_code == 1

"""Idempotency keys belong to their token, and one live train job per output folder is the database's
rule, not a read before the insert (issue: a shared API's keys and a check-then-insert race)."""

from __future__ import annotations

import threading

import pytest

from services.api.tokens import Scope, create_token
from services.common import jobs
from services.common.jobs import JobConflict, create_or_get_job, list_jobs
from tests.api.test_auth import BODY, bearer


def test_the_same_key_from_another_token_is_another_job(make_client):
    locked = make_client(auth="required")
    a = create_token("team-a", [Scope.read, Scope.submit])
    b = create_token("team-b", [Scope.read, Scope.submit])
    body = {**BODY, "idempotency_key": "train-nightly"}
    first = locked.post("/v1/jobs", json=body, headers=bearer(a))
    assert first.status_code == 202 and first.json()["created"] is True
    assert locked.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=bearer(a)).status_code == 200
    # B's submit with the same key: B's own job, not A's cancelled one
    second = locked.post("/v1/jobs", json=body, headers=bearer(b))
    assert second.status_code == 202 and second.json()["created"] is True, second.text
    assert second.json()["id"] != first.json()["id"]
    assert locked.post(f"/v1/jobs/{second.json()['id']}/cancel", headers=bearer(b)).status_code == 200
    # each token's replay still finds its own job
    assert locked.post("/v1/jobs", json=body, headers=bearer(a)).json()["id"] == first.json()["id"]
    assert locked.post("/v1/jobs", json=body, headers=bearer(b)).json()["id"] == second.json()["id"]


def _train(output_dir: str) -> dict:
    return {"trainer": {"output_dir": output_dir}, "actor": {"model_path": "m"}}


@pytest.mark.integration
@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_concurrent_submits_on_one_output_dir_make_one_live_job(database, reelrl_home, request, monkeypatch):
    if database == "postgres":
        monkeypatch.setenv("REELRL_DATABASE_URL", request.getfixturevalue("postgres_url"))
        from services.common.settings import reset_settings_cache

        reset_settings_cache()
    # The friendly read before the insert sees nothing (as when every submit reads before any
    # inserts): the database alone must refuse all but one.
    monkeypatch.setattr(jobs, "_refuse_if_held", lambda *_: None)
    barrier = threading.Barrier(12)
    outcomes: list[str] = []

    def submit() -> None:
        barrier.wait()
        try:
            create_or_get_job("train", _train("/runs/a"), exclusive="trainer.output_dir")
            outcomes.append("created")
        except Exception as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=submit) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("created") == 1, outcomes
    assert list_jobs("train")[1] == 1


def test_the_holder_is_named_and_the_folder_is_free_once_it_ends(reelrl_home):
    job, _ = create_or_get_job("train", _train("/runs/b"), exclusive="trainer.output_dir")
    with pytest.raises(JobConflict, match=f"in use by queued train job {job.id}"):
        create_or_get_job("train", _train("/runs/b"), exclusive="trainer.output_dir")
    create_or_get_job("train", _train("/runs/other"), exclusive="trainer.output_dir")  # another folder
    jobs.request_cancel(job.id)  # a queued job cancels at once
    again, created = create_or_get_job("train", _train("/runs/b"), exclusive="trainer.output_dir")
    assert created and again.id != job.id


def test_a_train_folder_belongs_to_the_owner_whose_jobs_used_it(make_client, data_root):
    """Once A's job ended, B could submit into A's output_dir with trainer.resume naming A's checkpoint:
    the run discards A's later checkpoints and truncates A's metrics."""
    from tests.api.test_edges import train_body

    locked = make_client(auth="required")
    a = create_token("owner-a", [Scope.read, Scope.submit])
    b = create_token("owner-b", [Scope.read, Scope.submit])
    body = train_body(data_root, output_dir="runs/a")
    first = locked.post("/v1/jobs", json=body, headers=bearer(a))
    assert first.status_code == 202, first.text
    assert locked.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=bearer(a)).status_code == 200
    foreign = locked.post("/v1/jobs", json=body, headers=bearer(b))
    assert foreign.status_code == 409, foreign.text
    assert "holds the runs of another owner's train jobs" in foreign.json()["detail"]
    assert locked.post("/v1/jobs", json=body, headers=bearer(a)).status_code == 202  # A continues its own
    fresh = locked.post("/v1/jobs", json=train_body(data_root, output_dir="runs/b"), headers=bearer(b))
    assert fresh.status_code == 202, fresh.text


def test_an_eval_output_dir_is_one_live_jobs_and_its_owners(make_client, data_root):
    """Another token's eval could name an earlier eval's folder (its manifest.json makes it a run
    folder) and overwrite its samples and summaries; two live evals could share one."""
    from tests.api.test_edges import _tiny_model_dir

    locked = make_client(auth="required")
    a = create_token("eval-a", [Scope.read, Scope.submit])
    b = create_token("eval-b", [Scope.read, Scope.submit])
    (data_root / "bench").mkdir()
    model = str(_tiny_model_dir(data_root))
    config = {"model": model, "benchmarks": ["mvbench"], "data_root": "bench", "output_dir": "evals/x"}
    body = {"kind": "eval", "config": config}
    first = locked.post("/v1/jobs", json=body, headers=bearer(a))
    assert first.status_code == 202, first.text
    assert locked.post("/v1/jobs", json=body, headers=bearer(a)).status_code == 409  # live: one at a time
    assert locked.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=bearer(a)).status_code == 200
    foreign = locked.post("/v1/jobs", json=body, headers=bearer(b))
    assert foreign.status_code == 409 and "another owner's eval jobs" in foreign.json()["detail"]
    assert locked.post("/v1/jobs", json=body, headers=bearer(a)).status_code == 202

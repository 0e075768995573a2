"""Result persistence on SQLite and Postgres: one row per (run, benchmark, sample) whatever is written
twice; a reopened run must have the settings it was made with; the ORM matches the migration."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import ItemResult
from services.eval.store import (
    ResultRecord,
    RunMismatch,
    as_item,
    current_ids,
    finish_run,
    finished_ids,
    open_run,
    save_result,
    stored_results,
)


@pytest.fixture(params=["sqlite", "postgres"])
def eval_db(request, reelrl_home, monkeypatch):
    if request.param == "postgres":
        monkeypatch.setenv("REELRL_DATABASE_URL", request.getfixturevalue("postgres_url"))
    from services.common.settings import reset_settings_cache

    reset_settings_cache()
    return request.param


def opened(run_id: str, identity: dict) -> bool:
    return open_run(
        run_id, model="/m", family="qwen3_vl", benchmarks=["mvbench"], identity=identity, config={},
        manifest={"family": "qwen3_vl"}, output_dir="/out",
    )  # fmt: skip


def record(sample_id: str, accuracy: float) -> ResultRecord:
    item = ItemResult(id=sample_id, accuracy=accuracy, response="B", extracted="B", details={"iou": 0.5})
    return ResultRecord("mvbench", item, manifest={"clip": {"nframes": 16}}, clip_meta=[{"width": 84}])


def test_one_row_per_sample(eval_db):
    assert opened("r1", {"a": 1}) is False
    assert save_result("r1", record("t/0", 1.0)) is True
    assert save_result("r1", record("t/0", 0.0)) is False  # a second write of a finished sample
    assert save_result("r1", record("t/1", 0.0)) is True
    assert finished_ids("r1", "mvbench") == {"t/0", "t/1"}
    rows = stored_results("r1", "mvbench")
    assert [r.sample_id for r in rows] == ["t/0", "t/1"]
    first = as_item(rows[0])
    assert first.accuracy == 1.0 and first.details == {"iou": 0.5} and rows[0].clip_meta == [{"width": 84}]
    finish_run("r1", "succeeded", {"mvbench": {"overall": 50.0}})


def test_reopen_checks_the_settings(eval_db):
    opened("r2", {"model_fingerprint": "x", "thinking": False})
    assert opened("r2", {"model_fingerprint": "x", "thinking": False}) is True
    with pytest.raises(RunMismatch, match="exists with other settings \\(model_fingerprint, thinking\\)"):
        opened("r2", {"model_fingerprint": "y", "thinking": True})


def test_orm_matches_the_migration(eval_db):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from services.common.db import ensure_schema
    from services.common.db.models import Base

    engine = ensure_schema()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    ours = [d for d in diff if "eval_" in str(d)]
    assert ours == []


def test_a_resume_redoes_results_of_another_prompt_version(eval_db):
    """Resuming on code whose prompt changed: a stored result made with another prompt template
    version is deleted so the sample is redone (before: skipped by id, mixing two prompt versions);
    a result of the current version is kept, one of a sample not in this attempt is left alone."""
    opened("r3", {})
    for sample_id, version in (("t/0", "old"), ("t/1", "new"), ("t/2", "old")):
        item = ItemResult(id=sample_id, accuracy=1.0, response="B")
        save_result("r3", ResultRecord("mvbench", item, manifest={"prompt_template_version": version}))
    assert current_ids("r3", "mvbench", {"t/0": "new", "t/1": "new", "t/3": "new"}) == ({"t/1"}, 1)
    assert finished_ids("r3", "mvbench") == {"t/1", "t/2"}
    # the redone sample is written anew, and then counts as current
    item = ItemResult(id="t/0", accuracy=0.0, response="C")
    assert save_result("r3", ResultRecord("mvbench", item, manifest={"prompt_template_version": "new"}))
    assert current_ids("r3", "mvbench", {"t/0": "new", "t/1": "new"}) == ({"t/0", "t/1"}, 0)

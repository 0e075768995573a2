"""Revision 0006 on a database with jobs: existing keys are scoped to their owner, and of two live train
jobs on one output folder (what the old check-then-insert let through) the first holds the folder."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from services.common.db import engine as db_engine
from services.common.jobs import _digest


def _job(conn, job_id: str, kind: str, state: str, config: dict, owner=None, key=None) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    conn.execute(
        text(
            "INSERT INTO jobs (id, kind, state, config, idempotency_key, owner, progress_done, progress_message,"
            " cancel_requested, attempts, max_retries, last_seq, created_at, updated_at) VALUES (:id, :kind,"
            " :state, :config, :key, :owner, 0, '', false, 0, 0, 1, :now, :now)"
        ),
        {"id": job_id, "kind": kind, "state": state, "config": json.dumps(config), "key": key, "owner": owner,
         "now": now},
    )  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_upgrade_scopes_keys_and_gives_a_shared_folder_to_its_first_live_job(database, tmp_path, request):
    url = (
        f"sqlite:///{tmp_path / 'jobs.db'}"
        if database == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(db_engine._MIGRATIONS))
    train = {"trainer": {"output_dir": "/runs/a"}}
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0005")
            _job(conn, "a" * 32, "preprocess", "cancelled", {}, owner="team-a", key="nightly")
            _job(conn, "b" * 32, "train", "running", train)
            _job(conn, "c" * 32, "train", "queued", train)  # the race's second live job
            _job(conn, "d" * 32, "train", "succeeded", train)
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "heads")
            rows = dict(conn.execute(text("SELECT id, idempotency_scope FROM jobs")).all())
            held = dict(conn.execute(text("SELECT id, exclusive_key FROM jobs")).all())
        assert rows["a" * 32] == _digest("team-a", "nightly")
        folder = _digest("train", json.dumps("/runs/a"))
        assert held == {"a" * 32: None, "b" * 32: folder, "c" * 32: None, "d" * 32: None}
    finally:
        engine.dispose()

"""Several processes migrating one fresh SQLite file at once (an API and its workers starting
together) all succeed: they take turns on a lock file beside the database."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect


def _migrate(url: str) -> None:
    from services.common.db.engine import ensure_schema

    ensure_schema(url)


@pytest.mark.slow
def test_concurrent_first_migrations_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    context = mp.get_context("spawn")
    procs = [context.Process(target=_migrate, args=(url,)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    tables = set(inspect(create_engine(url)).get_table_names())
    assert {"frame_clips", "jobs", "train_runs", "train_step_metrics"} <= tables

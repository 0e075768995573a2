"""`reelrl db upgrade`, the one-shot migration the compose file and the API pod run before services start."""

from __future__ import annotations

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from services.cli import app
from services.common.db import engine as db_engine
from services.common.settings import reset_settings_cache

pytestmark = pytest.mark.integration


def test_db_upgrade_brings_postgres_to_every_head(reelrl_home, postgres_url, monkeypatch):
    monkeypatch.setenv("REELRL_DATABASE_URL", postgres_url)
    reset_settings_cache()
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert "schema up to date" in result.output
    heads = set(ScriptDirectory(str(db_engine._MIGRATIONS)).get_heads())
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            applied = set(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
    finally:
        engine.dispose()
    assert applied == heads and heads

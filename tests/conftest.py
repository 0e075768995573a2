"""Fixtures shared by every test: an isolated REELRL_HOME, real Postgres and Redis, synthetic videos.

Postgres and Redis are part of the test environment (scripts/test.sh starts or checks them). A test
that needs one and cannot reach it fails with the reason; nothing is skipped.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from services.common.settings import reset_settings_cache

PG_BASE = os.environ.get("REELRL_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_BASE = os.environ.get("REELRL_TEST_REDIS", "redis://127.0.0.1:6379/15")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def reelrl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Embedded defaults (SQLite, local frame root, filesystem broker) under a fresh home."""
    home = tmp_path / "reelrl-home"
    for var in list(os.environ):
        if var.startswith("REELRL_") and not var.startswith("REELRL_TEST_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("REELRL_HOME", str(home))
    reset_settings_cache()
    yield home
    reset_settings_cache()


@pytest.fixture(scope="session")
def postgres_admin():
    if not _reachable("127.0.0.1", 5432):
        pytest.fail("Postgres is not reachable on 127.0.0.1:5432 (scripts/test.sh starts it)")
    from sqlalchemy import create_engine

    engine = create_engine(PG_BASE)
    yield engine
    engine.dispose()


@pytest.fixture
def postgres_url(postgres_admin) -> str:
    """A private, empty schema in the running Postgres for one test, dropped afterwards."""
    from sqlalchemy import text

    schema = f"reelrl_test_{uuid.uuid4().hex[:10]}"
    with postgres_admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield f"{PG_BASE}?options=-csearch_path%3D{schema}"
    from services.common.db.engine import dispose_engines

    dispose_engines()
    with postgres_admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


@pytest.fixture
def redis_url() -> str:
    """A Redis database emptied before and after the test."""
    if not _reachable("127.0.0.1", 6379):
        pytest.fail("Redis is not reachable on 127.0.0.1:6379 (scripts/test.sh starts it)")
    import redis

    client = redis.Redis.from_url(REDIS_BASE)
    client.flushdb()
    yield REDIS_BASE
    client.flushdb()
    client.close()


@pytest.fixture
def services_env(
    reelrl_home: Path, postgres_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Production wiring: Postgres index, Redis broker, frame root under the test home."""
    monkeypatch.setenv("REELRL_DATABASE_URL", postgres_url)
    monkeypatch.setenv("REELRL_BROKER_URL", redis_url)
    reset_settings_cache()
    return reelrl_home


@pytest.fixture(scope="session")
def video_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small synthetic H.264 clips shared by the session (made once, read-only by convention)."""
    from services.common.frames.synthetic import make_video

    root = tmp_path_factory.mktemp("videos")
    make_video(root / "short.mp4", seconds=2.0, fps=30, width=320, height=240)
    make_video(root / "wide.mp4", seconds=3.0, fps=25, width=426, height=240)
    make_video(root / "tall.mp4", seconds=2.5, fps=24, width=240, height=352)
    return root

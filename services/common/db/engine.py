"""Engines, sessions and schema migration (Alembic, applied on start by every process)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from services.common.settings import get_settings

_MIGRATIONS = Path(__file__).with_name("migrations")
_engines: dict[str, Engine] = {}
_migrated: set[str] = set()
_lock = threading.Lock()
# Alembic's `context` is module-global state: one migration at a time per process.
_migrate_lock = threading.Lock()


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets readers run beside the one writer; the busy timeout makes concurrent
    # worker processes wait for the write lock instead of failing.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def get_engine(url: str | None = None) -> Engine:
    url = url or get_settings().resolved_database_url
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            if url.startswith("sqlite"):
                db_path = url.split("///", 1)[-1]
                if db_path and db_path != ":memory:":
                    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
                engine = create_engine(url, connect_args={"timeout": 30})
                event.listen(engine, "connect", _sqlite_pragmas)
            else:
                engine = create_engine(url, pool_pre_ping=True)
            _engines[url] = engine
        return engine


def dispose_engines() -> None:
    """Close pooled connections (call in a forked child before it touches the database)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose(close=False)


def ensure_schema(url: str | None = None) -> Engine:
    """Upgrade the database to every newest Alembic revision (once per process and URL).

    Each service's tables live on their own migration branch from ``0001``, so ``heads``, not ``head``.
    """
    engine = get_engine(url)
    key = str(engine.url)
    if key in _migrated:
        return engine
    with _migrate_lock, _sqlite_file_lock(engine):
        if key not in _migrated:
            cfg = Config()
            cfg.set_main_option("script_location", str(_MIGRATIONS))
            with engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "heads")
            _migrated.add(key)
    return engine


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """Processes migrating one SQLite file take turns (an API and its workers start together; two
    first migrations at once fail with "table alembic_version already exists"). Postgres serialises
    in the migration itself, with an advisory lock (migrations/env.py)."""
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    import fcntl

    with open(f"{database}.migrate.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    factory = sessionmaker(ensure_schema(url), expire_on_commit=False)
    with factory() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise

"""jobs: idempotency keys scoped per owner; one live job per exclusive config value, enforced by the database

Revision ID: 0006
Revises: 0005
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

LIVE = "state IN ('queued', 'running')"
# The one exclusive config key of the kinds at the time of this revision (services/api/kinds.py).
EXCLUSIVE = {"train": "trainer.output_dir"}


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _at(config, dotted):
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def upgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table(
        "jobs", naming_convention={"uq": "uq_%(table_name)s_%(column_0_name)s"}
    ) as batch:
        batch.add_column(sa.Column("idempotency_scope", sa.String(64)))
        batch.add_column(sa.Column("exclusive_key", sa.String(64)))
        # the key alone was unique across every token: B's submit returned A's job
        if bind.dialect.name == "sqlite":
            batch.drop_constraint("uq_jobs_idempotency_key", type_="unique")
        else:
            batch.drop_constraint("jobs_idempotency_key_key", type_="unique")
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String),
        sa.column("kind", sa.String),
        sa.column("state", sa.String),
        sa.column("config", sa.JSON),
        sa.column("owner", sa.String),
        sa.column("idempotency_key", sa.String),
        sa.column("idempotency_scope", sa.String),
        sa.column("exclusive_key", sa.String),
        sa.column("created_at", sa.DateTime),
    )
    rows = bind.execute(sa.select(jobs).order_by(jobs.c.created_at, jobs.c.id)).mappings().all()
    held: set[str] = set()
    for row in rows:
        values = {}
        if row["idempotency_key"] is not None:
            values["idempotency_scope"] = _digest(row["owner"] or "", row["idempotency_key"])
        dotted = EXCLUSIVE.get(row["kind"])
        config = row["config"] if isinstance(row["config"], dict) else json.loads(row["config"] or "{}")
        value = _at(config, dotted) if dotted else None
        if value is not None and row["state"] in ("queued", "running"):
            key = _digest(row["kind"], json.dumps(value, sort_keys=True))
            if key not in held:  # two live holders (the race this revision closes): the first keeps it
                held.add(key)
                values["exclusive_key"] = key
        if values:
            bind.execute(sa.update(jobs).where(jobs.c.id == row["id"]).values(**values))
    op.create_index("uq_jobs_idempotency_scope", "jobs", ["idempotency_scope"], unique=True)
    op.create_index(
        "uq_jobs_live_exclusive",
        "jobs",
        ["exclusive_key"],
        unique=True,
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )


def downgrade() -> None:
    op.drop_index("uq_jobs_live_exclusive", table_name="jobs")
    op.drop_index("uq_jobs_idempotency_scope", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("exclusive_key")
        batch.drop_column("idempotency_scope")
        batch.create_unique_constraint("jobs_idempotency_key_key", ["idempotency_key"])

"""training runs and their per-step metrics

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "train_runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("output_dir", sa.Text, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(32)),
        sa.Column("last_step", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_index("ix_train_runs_status", "train_runs", ["status"])
    op.create_index("ix_train_runs_job_id", "train_runs", ["job_id"])
    op.create_table(
        "train_step_metrics",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column(
            "run_id", sa.String(64), sa.ForeignKey("train_runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.UniqueConstraint("run_id", "step", name="uq_train_step_metrics_run_step"),
    )
    op.create_index("ix_train_step_metrics_run_id", "train_step_metrics", ["run_id"])


def downgrade() -> None:
    op.drop_table("train_step_metrics")
    op.drop_table("train_runs")

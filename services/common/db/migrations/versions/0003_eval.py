"""evaluation: eval_runs and their per-sample eval_results

Revision ID: 0003
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(32)),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("family", sa.String(32), nullable=False),
        sa.Column("benchmarks", sa.JSON, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("output_dir", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("summaries", sa.JSON),
        sa.Column("error", sa.Text),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_index("ix_eval_runs_job_id", "eval_runs", ["job_id"])
    op.create_index("ix_eval_runs_status", "eval_runs", ["status"])
    op.create_table(
        "eval_results",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("eval_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("benchmark", sa.String(64), nullable=False),
        sa.Column("sample_id", sa.String(512), nullable=False),
        sa.Column("response", sa.Text),
        sa.Column("accuracy", sa.Float, nullable=False),
        sa.Column("format", sa.Float, nullable=False),
        sa.Column("extracted", sa.JSON),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("judged", sa.Boolean, nullable=False),
        sa.Column("judge_response", sa.Text),
        sa.Column("finish_reason", sa.String(16)),
        sa.Column("prompt_tokens", sa.Integer),
        sa.Column("response_tokens", sa.Integer),
        sa.Column("latency_s", sa.Float),
        sa.Column("clip_meta", sa.JSON),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.UniqueConstraint("run_id", "benchmark", "sample_id", name="uq_eval_results_run_benchmark_sample"),
    )
    op.create_index("ix_eval_results_run_id", "eval_results", ["run_id"])


def downgrade() -> None:
    op.drop_table("eval_results")
    op.drop_table("eval_runs")

"""frame_clips.retryable: a failure of the machine (disk full, I/O error, timeout), not of the video

Revision ID: 0007
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Earlier failures were all remembered as the video's: they stay so (--retry-failed decodes them).
    op.add_column(
        "frame_clips", sa.Column("retryable", sa.Boolean, nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    with op.batch_alter_table("frame_clips") as batch:
        batch.drop_column("retryable")

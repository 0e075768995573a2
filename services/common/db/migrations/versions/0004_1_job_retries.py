"""jobs: max_retries, the re-queues a job gets when its worker dies

Revision ID: 0004_1
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_1"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows from before retries existed keep their old behaviour: a lost worker fails the job.
    op.add_column("jobs", sa.Column("max_retries", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("jobs", "max_retries")

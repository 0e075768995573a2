"""output_files: what each job or command wrote as output, so outputs never replace a file they did not make

Revision ID: 0005
Revises: 0004_1
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004_1"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "output_files",
        sa.Column("path_hash", sa.String(64), primary_key=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("job_id", sa.String(32)),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("output_files")

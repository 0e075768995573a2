"""frame store index: video_assets and frame_clips

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "video_assets",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("content_hash", sa.String(80), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("duration_s", sa.Float),
        sa.Column("fps", sa.Float),
        sa.Column("frame_count", sa.Integer),
        sa.Column("width", sa.Integer),
        sa.Column("height", sa.Integer),
        sa.Column("paths", sa.JSON, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
    )
    op.create_index("ix_video_assets_content_hash", "video_assets", ["content_hash"], unique=True)
    op.create_table(
        "frame_clips",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(80), nullable=False),
        sa.Column("asset_id", sa.Integer, sa.ForeignKey("video_assets.id"), nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("num_frames", sa.Integer),
        sa.Column("height", sa.Integer),
        sa.Column("width", sa.Integer),
        sa.Column("nbytes", sa.BigInteger),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(200)),
        sa.Column("lease_until", TZ),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("hits", sa.Integer, nullable=False),
        sa.Column("timings", sa.JSON),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("started_at", TZ),
        sa.Column("finished_at", TZ),
    )
    op.create_index("ix_frame_clips_key", "frame_clips", ["key"], unique=True)
    op.create_index("ix_frame_clips_asset_id", "frame_clips", ["asset_id"])
    op.create_index("ix_frame_clips_status", "frame_clips", ["status"])


def downgrade() -> None:
    op.drop_table("frame_clips")
    op.drop_table("video_assets")

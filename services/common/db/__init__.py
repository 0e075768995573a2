from services.common.db.engine import ensure_schema, get_engine, session_scope
from services.common.db.models import Base, ClipStatus, FrameClip, VideoAsset

__all__ = ["Base", "ClipStatus", "FrameClip", "VideoAsset", "ensure_schema", "get_engine", "session_scope"]

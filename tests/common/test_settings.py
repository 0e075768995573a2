from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common.settings import Settings


def test_embedded_defaults_live_under_home(tmp_path, monkeypatch):
    for var in ("REELRL_DATABASE_URL", "REELRL_BROKER_URL", "REELRL_FRAME_ROOT", "REELRL_DATA_ROOTS"):
        monkeypatch.delenv(var, raising=False)
    s = Settings(home=tmp_path)
    assert s.resolved_database_url == f"sqlite:///{tmp_path / 'reelrl.db'}"
    assert s.is_embedded_broker and s.resolved_frame_root == tmp_path / "frames"
    assert s.decoders == ["decord", "pyav"] and s.data_roots == []


def test_environment_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("REELRL_DATABASE_URL", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("REELRL_BROKER_URL", "redis://h:6379/0")
    monkeypatch.setenv("REELRL_DATA_ROOTS", "/data/a:/data/b")
    monkeypatch.setenv("REELRL_DECODERS", "pyav, decord")
    s = Settings(home=tmp_path)
    assert s.resolved_database_url.startswith("postgresql") and not s.is_embedded_broker
    assert s.data_roots == [Path("/data/a"), Path("/data/b")]
    assert s.decoders == ["pyav", "decord"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task_soft_time_limit_s": 700, "task_time_limit_s": 600}, "TIME_LIMIT_S must exceed"),
        ({"broker_visibility_timeout_s": 600, "task_time_limit_s": 660}, "VISIBILITY_TIMEOUT_S must exceed"),
    ],
)
def test_inconsistent_limits_are_rejected(fields, message, tmp_path):
    with pytest.raises(ValidationError, match=message):
        Settings(home=tmp_path, **fields)

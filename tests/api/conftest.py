"""Fixtures of the jobs API tests: an in-process app on the embedded database (real processes: stack.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.common.settings import reset_settings_cache
from tests.api.stack import HEARTBEAT_ENV, write_dataset


@pytest.fixture
def data_root(reelrl_home, tmp_path, video_dir, monkeypatch) -> Path:
    data = tmp_path / "data"
    write_dataset(data, video_dir)
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(data))
    for key, value in HEARTBEAT_ENV.items():
        monkeypatch.setenv(key, value)
    reset_settings_cache()
    return data


@pytest.fixture
def make_client(data_root):
    """An in-process app (TestClient runs its startup: migration, reaper) with the given settings."""
    clients = []

    def make(**settings) -> TestClient:
        settings.setdefault("allowed_hosts", "testserver")  # the name TestClient sends
        client = TestClient(create_app(ApiSettings(**settings)))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client) -> TestClient:
    return make_client()

"""Fixtures of the jobs API tests: an in-process app on the embedded database, and real stacks
(uvicorn + celery worker processes started through the `reelrl` CLI) on embedded or production wiring."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.common.settings import reset_settings_cache

# Short enough that a killed worker is noticed within seconds, long enough for a busy 2-core machine.
HEARTBEAT_ENV = {"REELRL_JOB_HEARTBEAT_S": "0.5", "REELRL_JOB_HEARTBEAT_TIMEOUT_S": "4"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_dataset(data: Path, video_dir: Path, names=("short.mp4", "wide.mp4", "tall.mp4")) -> Path:
    """A data root holding the session's clips and a JSONL dataset naming them (relative to the root)."""
    (data / "videos").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, name in enumerate(names):
        shutil.copy(video_dir / name, data / "videos" / name)
        rows.append({"id": f"s{i}", "problem": "what happens?", "videos": [f"videos/{name}"]})
    dataset = data / "train.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dataset


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


# --- real processes ------------------------------------------------------------------------------


class Service:
    """A `reelrl` command in its own process group; its output goes to a log file shown on failure."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name, self.args, self.env = name, args, env
        self.log = logs / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Service:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli", *self.args],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return self

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: the worker and its pool children die at once."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20) -> None:
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Stack:
    root: Path
    env: dict[str, str]
    url: str
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return Path(self.env["REELRL_DATA_ROOTS"])

    def start(self, name: str, *args: str) -> Service:
        service = Service(name, list(args), self.env, self.root / "logs").start()
        self.services[name] = service
        return service

    def start_api(self, **env: str) -> Service:
        port = self.url.rsplit(":", 1)[1]
        api = Service(
            "api", ["serve", "api", "--port", port], {**self.env, **env}, self.root / "logs"
        ).start()
        self.services["api"] = api
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if not api.alive():
                pytest.fail(f"the API exited: {api.tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return api
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.fail(f"the API did not answer within 90 s: {api.tail()}")

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def logs(self) -> str:
        return "\n".join(f"--- {n} ---\n{s.tail()}" for n, s in self.services.items())

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            service.stop()


@contextmanager
def running_stack(root: Path, video_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """A data root with a dataset, and the API on a free port; this process shares its environment
    (so tests can use ``services.common.jobs`` on the same database)."""
    data = root / "data"
    write_dataset(data, video_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELRL_") or k.startswith("REELRL_TEST_")}
    env.update(
        REELRL_HOME=str(root / "home"), REELRL_DATA_ROOTS=str(data), REELRL_API_SSE_POLL_S="0.1",
        PYTHONWARNINGS="ignore:You're running the worker with superuser privileges", **HEARTBEAT_ENV,
    )  # fmt: skip
    env.update(extra_env or {})
    stack = Stack(root, env, f"http://127.0.0.1:{free_port()}")
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("REELRL_") and not k.startswith("REELRL_TEST_")]:
            mp.delenv(key)
        for key, value in env.items():
            if key.startswith("REELRL_"):
                mp.setenv(key, value)
        reset_settings_cache()
        try:
            yield stack
        finally:
            stack.stop()
            reset_settings_cache()


def wait_for(predicate, timeout: float = 60.0, every: float = 0.1, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{message} not reached within {timeout:g} s")

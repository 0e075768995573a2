"""Real processes for the jobs API tests: `reelrl` commands (uvicorn, celery workers) on a shared data
root and database, started and stopped by the tests."""

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

from services.common.settings import reset_settings_cache

# Short enough that a killed worker is noticed within seconds, long enough for a busy 2-core machine:
# beside a second suite (load ~12 on 2 cores) a 4 s timeout once lapsed under a live train worker, which
# then stopped its own retry (tests/api/test_crash.py)
HEARTBEAT_ENV = {"REELRL_JOB_HEARTBEAT_S": "0.5", "REELRL_JOB_HEARTBEAT_TIMEOUT_S": "12"}


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

    def start_api(self, name: str = "api", url: str | None = None, wait: bool = True, **env: str) -> Service:
        """`reelrl serve api` on ``url``'s port (default: the stack's); ``wait``: until it answers."""
        url = url or self.url
        port = url.rsplit(":", 1)[1]
        api = Service(name, ["serve", "api", "--port", port], {**self.env, **env}, self.root / "logs").start()
        self.services[name] = api
        if wait:
            self.wait_healthy(api, url)
        return api

    def wait_healthy(self, api: Service, url: str | None = None, timeout: float = 90) -> None:
        url = url or self.url
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not api.alive():
                pytest.fail(f"the API exited: {api.tail()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.fail(f"the API did not answer within {timeout:g} s: {api.tail()}")

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def logs(self) -> str:
        return "\n".join(f"--- {n} ---\n{s.tail()}" for n, s in self.services.items())

    def stop(self) -> None:
        # All at once: a worker's warm shutdown takes seconds even when idle; they overlap.
        live = [s for s in self.services.values() if s.alive()]
        for service in live:
            os.killpg(service.proc.pid, signal.SIGTERM)
        for service in live:
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

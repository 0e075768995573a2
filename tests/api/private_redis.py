"""A Redis server of the test's own (its own port on 127.0.0.1, no persistence), to stop and start under
running workers: the machine's shared server is never touched."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.api.stack import free_port


class PrivateRedis:
    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("no redis-server on PATH (apt-get install redis-server)")
        self.root = Path(tempfile.mkdtemp(prefix="reelrl-test-redis-"))
        self.port = free_port()
        self.log = self.root / "redis.log"
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        """Start it (empty: nothing is saved across a restart, as after a crash without persistence)."""
        self._proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.root), "--logfile", str(self.log)],
        )  # fmt: skip
        import redis

        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return self
            except redis.ConnectionError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"redis-server did not start: {self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop it at once, losing every key (its queues and unacknowledged messages)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)
        self._proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

"""A Postgres server of the test's own (its own data folder and port on 127.0.0.1), to stop and start
under a running API: the machine's shared server is never touched."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.api.stack import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"no Postgres {name} under /usr/lib/postgresql (apt-get install postgresql)")
    return found[-1]


class PrivatePostgres:
    def __init__(self) -> None:
        # Not under the session's temp folders: the postgres user may not traverse root's 0700 ones.
        self.root = Path(tempfile.mkdtemp(prefix="reelrl-test-pg-", dir="/tmp"))
        self.data = self.root / "pgdata"
        self.port = free_port()
        self.log = self.root / "postgres.log"
        self.data.mkdir()
        if os.geteuid() == 0:  # Postgres refuses to run as root: its own user owns the folder
            shutil.chown(self.root, "postgres")
            shutil.chown(self.data, "postgres")
        self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def _prefix() -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._prefix(), *args], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({done.returncode}): {done.stderr or done.stdout}"
            )

    def start(self) -> PrivatePostgres:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        return self

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        """Stop it if it runs, and delete its folder."""
        subprocess.run(
            [*self._prefix(), _bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)

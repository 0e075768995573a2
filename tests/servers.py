"""Servers tests start as processes of their own (the reward service, vLLM's OpenAI server): a free port
on 127.0.0.1, the process in a session of its own with its output in a log file, ready when its health
route answers 200, and stopped with everything it started (SIGINT to its group, then SIGKILL)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def served(
    command: Sequence[str],
    health: str,
    log: Path,
    env: Mapping[str, str],
    *,
    start_s: float,
    stop_s: float = 30,
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` running until the block ends; ``health`` (a URL) answers 200 before the block starts,
    or the test fails with the end of ``log`` (a process that exits or takes longer than ``start_s``)."""
    with log.open("wb") as sink:
        server = subprocess.Popen(
            list(command), stdout=sink, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
    try:
        deadline = time.monotonic() + start_s
        while True:
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{command[0]} … did not start: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=stop_s)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

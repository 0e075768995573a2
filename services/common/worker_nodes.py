"""Each `reelrl worker` process's own Celery node name, and the record that lets `reelrl worker ping`
find the workers of this host.

Celery names every worker ``celery@<host>`` unless told otherwise, so two workers on one host answer
to the same name: a ping could be answered by the wrong one, after the one it meant had stopped. Each
worker is named ``<role>.<pid>@<host>`` instead, and records itself under ``$REELRL_HOME/workers/``
while it runs. A record outlives a worker that was killed; it is ignored once its process is gone,
recognised by its start time, not only its pid (pids are reused, in containers very soon).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from services.common.settings import get_settings


@dataclass(frozen=True)
class WorkerNode:
    node: str  # the Celery node name, role.pid@host
    role: str
    host: str
    pid: int
    started: float  # the process's start time (psutil), to tell it from a later process with its pid


def node_name(role: str, pid: int | None = None, host: str | None = None) -> str:
    return f"{role}.{pid or os.getpid()}@{host or socket.gethostname()}"


def _folder() -> Path:
    return get_settings().home / "workers"


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


@contextmanager
def registered(role: str) -> Iterator[WorkerNode]:
    """Record this process as a worker of ``role`` while the body runs (the worker's whole life)."""
    pid, host = os.getpid(), socket.gethostname()
    me = WorkerNode(node_name(role, pid, host), role, host, pid, _started(pid) or 0.0)
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{me.node}.json"
    scratch = path.with_suffix(f".tmp{pid}")
    scratch.write_text(json.dumps(me.__dict__))
    os.replace(scratch, path)
    try:
        yield me
    finally:
        with suppress(FileNotFoundError):
            path.unlink()


def _read(path: Path) -> WorkerNode | None:
    """The record in ``path``, or None when it is not one (torn, hand-edited, another tool's file)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or set(data) != set(WorkerNode.__dataclass_fields__):
        return None
    pid, started = data["pid"], data["started"]
    fields_ok = all(isinstance(data[k], str) for k in ("node", "role", "host"))
    if not fields_ok or type(pid) is not int or pid <= 0 or type(started) not in (int, float):
        return None
    return WorkerNode(**data)


def local_workers(role: str | None = None) -> list[WorkerNode]:
    """The workers recorded on this host (of ``role``, if given) whose process still runs; the records
    of those that are gone are removed."""
    host, found = socket.gethostname(), []
    folder = _folder()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        node = _read(path)
        if node is None:
            continue  # being written, or not ours: left alone
        if node.host != host or (role is not None and node.role != role):
            continue
        started = _started(node.pid)
        if started is None or abs(started - node.started) > 1.0:
            with suppress(FileNotFoundError):
                path.unlink()
            continue
        found.append(node)
    return found

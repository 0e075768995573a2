"""Which jobs the broker still holds a message for: read-only, without consuming anything.

A job is queued in the database and, separately, as a message on the broker. A broker that restarts
without its data (Redis without persistence, a crash) loses the messages, and the database alone
cannot tell: the reconciler (:meth:`services.api.service.JobService.reap`) asks here before it sends
a job's task again, so a job waiting its turn in a long queue is not sent twice.

Read per transport, as kombu stores messages: Redis keeps a queue as a list per priority step plus
one hash of the messages delivered but not yet acknowledged (a worker holds them); the embedded
filesystem broker keeps one file per message. A transport it cannot read answers None (unknown),
and the caller then sends nothing.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from celery import Celery

log = logging.getLogger(__name__)

# kombu's Redis transport: the key of priority step p of queue q is q + SEP + str(p) (p > 0), and the
# delivered-but-unacknowledged messages sit in one hash (see kombu/transport/redis.py).
_REDIS_PRIORITY_SEP = "\x06\x16"
_REDIS_PRIORITY_STEPS = (0, 3, 6, 9)
_REDIS_UNACKED = "unacked"


def job_id_of(message: Any) -> str | None:
    """The ``job_id`` keyword of a Celery (protocol 2) message as kombu stores it, else None."""
    if not isinstance(message, dict):
        return None
    body = message.get("body")
    try:
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        decoded = json.loads(body)
        kwargs = decoded[1] if isinstance(decoded, list) and len(decoded) > 1 else None
    except (TypeError, ValueError):
        return None
    job_id = kwargs.get("job_id") if isinstance(kwargs, dict) else None
    return job_id if isinstance(job_id, str) else None


def _ids(raw_messages: Iterable[bytes | str]) -> set[str]:
    found = set()
    for raw in raw_messages:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        job_id = job_id_of(message)
        if job_id is not None:
            found.add(job_id)
    return found


def _redis_job_ids(url: str, queues: Iterable[str], timeout_s: float) -> set[str]:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        raw: list[Any] = []
        for queue in queues:
            for step in _REDIS_PRIORITY_STEPS:
                key = f"{queue}{_REDIS_PRIORITY_SEP}{step}" if step else queue
                raw.extend(client.lrange(key, 0, -1))
        # Each unacknowledged entry is [message, exchange, routing key]; its queue does not matter here.
        raw.extend(json.dumps(json.loads(v)[0]) for v in client.hvals(_REDIS_UNACKED))
        return _ids(raw)
    finally:
        client.close()


def _folder_job_ids(folder: Path, queues: Iterable[str]) -> set[str]:
    wanted = {f".{q}.msg" for q in queues}
    raw = []
    for path in folder.iterdir() if folder.is_dir() else []:
        if any(path.name.endswith(w) for w in wanted):
            try:
                raw.append(path.read_bytes())
            except FileNotFoundError:
                continue  # consumed meanwhile
    return _ids(raw)


def waiting_job_ids(celery: Celery, queues: Iterable[str], timeout_s: float = 5.0) -> set[str] | None:
    """The job ids that ``queues`` hold a message for (waiting, or delivered and not yet
    acknowledged); None if this broker's transport cannot be read. Raises the transport's connection
    errors (the broker is away: nothing can be decided)."""
    queues = list(queues)
    with celery.connection_for_read() as connection:
        transport = connection.transport_cls
        url = connection.as_uri(include_password=True)
        options = dict(celery.conf.broker_transport_options or {})
    if transport in ("redis", "rediss"):
        return _redis_job_ids(url, queues, timeout_s)
    if transport == "filesystem":
        folder = options.get("data_folder_in")
        return _folder_job_ids(Path(folder), queues) if folder else None
    log.debug("cannot read the queues of a %s broker", transport)
    return None

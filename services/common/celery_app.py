"""The Celery application shared by every service's workers (queues ``preprocess``, ``train``, ``eval``).

Tasks carry ids, never tensors. Delivery is at-least-once: late acknowledgement, a task whose worker
process died is put back on the queue, and one message is prefetched at a time; task bodies are
idempotent (the job or clip state lives in the database).

This module knows no service. A task named ``reelrl.<queue>.<name>`` is routed to ``<queue>`` by its
name. A service defines its tasks with ``celery.shared_task`` in its own tasks module, and its worker
command imports that module before starting (``reelrl worker <service>``). Nothing is built or written
on import: :func:`get_celery` builds the app on first use (creating the embedded broker's folders).
"""

from __future__ import annotations

import threading

from celery import Celery

from services.common.settings import Settings, get_settings

QUEUES = ("preprocess", "train", "eval")
TASK_ROUTES = {f"reelrl.{queue}.*": {"queue": queue} for queue in QUEUES}


def queue_for(task_name: str) -> str:
    """The queue a task name is routed to; an unknown prefix is an error, not a default queue."""
    parts = task_name.split(".")
    if len(parts) < 3 or parts[0] != "reelrl" or parts[1] not in QUEUES:
        raise ValueError(
            f"task name {task_name!r} is not reelrl.<queue>.<name> with a queue among {list(QUEUES)}"
        )
    return parts[1]


def _filesystem_transport_options(settings: Settings) -> dict:
    folder = settings.broker_folder / "queue"
    processed = settings.broker_folder / "processed"
    # kombu otherwise keeps its exchange bindings in ./control, wherever the process was started.
    control = settings.broker_folder / "control"
    for path in (folder, processed, control):
        path.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(control),
        "processed_folder": str(processed),
        "store_processed": False,
        "polling_interval": 0.2,
    }


def make_celery(settings: Settings | None = None) -> Celery:
    """A new app on ``settings``' broker (the embedded broker's folders are created here)."""
    settings = settings or get_settings()
    app = Celery("reelrl", broker=settings.resolved_broker_url, set_as_current=False)
    transport_options: dict = {"visibility_timeout": settings.broker_visibility_timeout_s}
    if settings.is_embedded_broker:
        transport_options.update(_filesystem_transport_options(settings))
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_routes=TASK_ROUTES,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    return app


_lock = threading.Lock()
_cached: tuple[Settings, Celery] | None = None


def get_celery() -> Celery:
    """The process's app for the current settings, built on first use (and again after the settings
    change, as tests do). It becomes Celery's current app, so ``shared_task`` tasks bind to it."""
    global _cached
    settings = get_settings()
    with _lock:
        if _cached is None or _cached[0] is not settings:
            app = make_celery(settings)
            app.set_default()
            app.set_current()
            _cached = (settings, app)
        return _cached[1]


def send(task_name: str, *args: object, countdown: float | None = None) -> None:
    """Enqueue ``task_name`` on the queue its name routes to (see :func:`queue_for`)."""
    get_celery().send_task(task_name, args=list(args), queue=queue_for(task_name), countdown=countdown)


def __getattr__(name: str) -> Celery:
    # ``celery -A services.common.celery_app`` and older callers read the module's ``app``.
    if name == "app":
        return get_celery()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

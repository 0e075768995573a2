"""The Celery application shared by every service's workers (queues ``preprocess``, ``train``, ``eval``).

Tasks carry ids, never tensors. Delivery is at-least-once: late acknowledgement, a task whose worker
process died is put back on the queue, and one message is prefetched at a time; task bodies are
idempotent (the job or clip state lives in the database).
"""

from __future__ import annotations

from celery import Celery

from services.common.settings import Settings, get_settings

QUEUES = ("preprocess", "train", "eval")


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
    settings = settings or get_settings()
    app = Celery("reelrl", broker=settings.resolved_broker_url, include=["services.preprocess.tasks"])
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
        task_default_queue="preprocess",
        task_routes={"reelrl.preprocess.*": {"queue": "preprocess"}},
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    return app


app = make_celery()

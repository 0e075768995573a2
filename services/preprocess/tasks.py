"""Celery tasks of the preprocessing worker pool (queue ``preprocess``).

Registered with ``shared_task``: `reelrl worker preprocess` (and the local pool) import this module
into the shared app (``services.common.celery_app``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from celery import shared_task
from celery.signals import worker_process_init
from sqlalchemy.exc import OperationalError

from services.common.celery_app import send
from services.common.db.engine import dispose_engines
from services.common.settings import get_settings
from services.preprocess.worker import process_clip

CLIP_TASK = "reelrl.preprocess.clip"


@worker_process_init.connect
def _init_child(**_: object) -> None:
    import torch

    # Connections inherited from the parent must not be shared across the fork.
    dispose_engines()
    # Workers scale by processes; one decode/resize thread each measured best on small machines.
    torch.set_num_threads(max(1, get_settings().decode_threads))


def handle_clip(key: str) -> str:
    """One clip message: process it; if another worker holds the clip, free this slot at once and
    put the key back on the queue for when that worker's lease would lapse."""
    outcome = process_clip(key)
    if outcome.recycle_process:
        # A hung decoder thread cannot be stopped: end this child (the failure is already recorded;
        # the redelivered message finds the clip failed and does nothing).
        os._exit(70)
    if outcome.outcome == "busy":
        lease_s = get_settings().clip_lease_s
        left = (outcome.lease_until - datetime.now(UTC)).total_seconds() if outcome.lease_until else lease_s
        send(CLIP_TASK, key, countdown=min(max(left, 0.0), lease_s) + 0.5)
    return outcome.outcome


@shared_task(
    name=CLIP_TASK, autoretry_for=(OperationalError, TimeoutError), retry_backoff=True, max_retries=5
)
def preprocess_clip(key: str) -> str:
    return handle_clip(key)

"""Celery tasks of the preprocessing worker pool (queue ``preprocess``)."""

from __future__ import annotations

import os

from celery.signals import worker_process_init
from sqlalchemy.exc import OperationalError

from services.common.celery_app import app
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


@app.task(name=CLIP_TASK, autoretry_for=(OperationalError, TimeoutError), retry_backoff=True, max_retries=5)
def preprocess_clip(key: str) -> str:
    outcome = process_clip(key)
    if outcome.recycle_process:
        # A hung decoder thread cannot be stopped: end this child (the failure is already recorded;
        # the redelivered message finds the clip failed and does nothing).
        os._exit(70)
    return outcome.outcome

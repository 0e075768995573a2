"""The ``preprocess`` job kind: one Celery task that queues a dataset's clips and waits for them.

It runs on the ``preprocess-jobs`` queue (`reelrl worker preprocess-jobs`), apart from the clip tasks it
waits on (queue ``preprocess``): a coordinator holding a slot of the clip pool could wait forever for
clips that no free slot decodes.
"""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from services.common.jobs import run_job
from services.preprocess.dispatch import run_preprocess
from services.preprocess.job_config import PreprocessJobConfig

JOB_TASK = "reelrl.preprocess.job"
JOB_QUEUE = "preprocess-jobs"
# The coordinator only waits; the config's timeout_s bounds it, and each clip has its own task limit.
_WAIT_LIMIT_S = 7 * 24 * 3600
_ERRORS_KEPT = 20


@shared_task(name=JOB_TASK, soft_time_limit=_WAIT_LIMIT_S, time_limit=_WAIT_LIMIT_S + 60)
def preprocess_job(job_id: str) -> None:
    with run_job(job_id) as ctx:
        # Checked again here: the worker's data roots may differ from the API's.
        config = PreprocessJobConfig.model_validate(ctx.config)

        def progress(done: int, total: int) -> None:
            ctx.progress(done, total, "clips")
            ctx.raise_if_cancelled()

        report = run_preprocess(
            config.dataset, config.out, config.video_params, workers=config.workers,
            timeout_s=config.timeout_s, progress=progress, retry_failed=config.retry_failed,
            job_id=ctx.job_id,
        )  # fmt: skip
        result = asdict(report)
        result["errors"] = report.errors[:_ERRORS_KEPT]
        ctx.set_result(result)

"""Server-sent event streams, read from the database (so an API restart loses nothing).

- one job: its events in order, each with ``id`` = the job's event number (``Last-Event-ID`` resumes),
  ending with an ``end`` event once the job is finished and everything was sent;
- all jobs: a ``job`` snapshot whenever a job's row changes (the jobs list page).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio

from services.common.db.models import utcnow
from services.common.jobs import changed_jobs, get_job, job_events

_BATCH = 500
# A change is looked for again this long after it was first seen: it covers a transaction that
# stamped its row before a later-committed one (clock order is not commit order).
_RECHECK = timedelta(seconds=5)


async def job_event_stream(job_id: str, after: int, poll_s: float) -> AsyncIterator[dict]:
    while True:
        events = await anyio.to_thread.run_sync(job_events, job_id, after, None, _BATCH)
        for event in events:
            yield {"id": str(event.seq), "event": event.type, "data": event.model_dump_json()}
            after = event.seq
        if len(events) == _BATCH:
            continue
        job = await anyio.to_thread.run_sync(get_job, job_id)
        if job.state.terminal and job.last_event <= after:
            yield {"event": "end", "data": job.model_dump_json()}
            return
        await anyio.sleep(poll_s)


async def jobs_snapshot_stream(poll_s: float) -> AsyncIterator[dict]:
    since = utcnow() - _RECHECK
    sent: dict[str, object] = {}
    while True:
        window = since - _RECHECK
        jobs = await anyio.to_thread.run_sync(changed_jobs, window)
        for job in jobs:
            if sent.get(job.id) != job.updated_at:
                sent[job.id] = job.updated_at
                yield {"event": "job", "data": job.model_dump_json()}
            since = max(since, job.updated_at)
        seen = {job.id for job in jobs}
        for job_id in [j for j in sent if j not in seen]:
            del sent[job_id]  # older than the window: never sent again unless it changes
        await anyio.sleep(poll_s)

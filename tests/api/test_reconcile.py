"""The reaper's lost-message check runs at most every quarter of REELRL_JOB_LOST_MESSAGE_S: it reads
every long-queued job, and with the reaper's 5 s period it cost an API process a fifth of a core at
1,500 queued jobs."""

from __future__ import annotations

import services.api.service as service


def test_the_lost_message_check_is_rate_limited(data_root, monkeypatch):
    monkeypatch.setenv("REELRL_JOB_LOST_MESSAGE_S", "40")
    reads = []
    monkeypatch.setattr(service, "unclaimed_jobs", lambda settings: reads.append(settings) or [])
    clock = [1000.0]
    monkeypatch.setattr(service.time, "monotonic", lambda: clock[0])
    jobs = service.JobService()
    for _ in range(5):
        jobs.reap()
    assert len(reads) == 1
    clock[0] += 9.9  # under a quarter of 40 s
    jobs.reap()
    assert len(reads) == 1
    clock[0] += 0.2
    jobs.reap()
    assert len(reads) == 2 and reads[-1].lost_message_s == 40

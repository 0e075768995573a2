"""The eval job kind's task: its name routes to the `eval` queue, and a summary becomes the `result`
event the status page's tables read."""

from __future__ import annotations

from services.common.celery_app import queue_for
from services.eval.benchmarks import Cell, Summary
from services.eval.tasks import EVAL_TASK, eval_job, result_event


def test_task_name_and_queue():
    assert EVAL_TASK == "reelrl.eval.run" == eval_job.name
    assert queue_for(EVAL_TASK) == "eval"


def test_result_event_shape():
    summary = Summary(
        benchmark="charades_sta", metric="mIoU", overall=50.0, count=3, metrics={"R@0.5": 66.7},
        breakdowns={"task": {"a": Cell(score=10.0, count=2)}}, missing=["x"], errors={"y": "bad"},
        robust_overall=60.0, unreadable=1,
    )  # fmt: skip
    event = result_event(summary, {"family": "qwen3_vl"})
    assert event["benchmark"] == "charades_sta" and event["overall"] == 50.0 and event["R@0.5"] == 66.7
    assert event["missing"] == 1 and event["errors"] == 1 and event["samples"] == 3
    assert event["by task"] == {"a": {"score": 10.0, "n": 2}}
    assert event["manifest"] == {"family": "qwen3_vl"}
    assert (event["reader"], event["robust_overall"], event["unreadable"]) == ("official", 60.0, 1)

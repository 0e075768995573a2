"""The streaming loop's per-sample failures, without an engine: a fake engine answers, a fake judge
refuses. A failure of one sample's rubric judge or preparation is that sample's, never the run's."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from services.eval.benchmarks import get_benchmark
from services.eval.clips import PlannedSample
from services.eval.pipeline import Pipeline, Ready, Task
from services.eval.store import as_item, open_run, stored_results
from services.rollout.samples import RolloutResponse
from tests.eval.conftest import write_json

ITEM = {
    "id": 0, "video_path": "video/a.mp4", "duration": 45, "dimension": "Temporal Spatial Reasoning",
    "question": "Where is the cat?\nA. sofa\nB. bed\nC. floor\nD. table", "multiple-choice": True,
    "choices": {"A": "sofa", "B": "bed", "C": "floor", "D": "table"}, "answer": "D",
    "reasoning": ["1. The cat walks to the table."],
}  # fmt: skip


class FakeEngine:
    """Answers every request with ``text``; nothing is loaded or tokenised."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def generate(self, item, n, **sampling):
        return [7, 8, 9], [response(self.text)]


def response(text: str) -> RolloutResponse:
    return RolloutResponse(
        token_ids=[1], logprobs=[0.0], text=text, finish_reason="stop", weight_version=0,
        weight_versions=((0, 0),),
    )  # fmt: skip


def pipeline(engine, judge=None) -> Pipeline:
    """A pipeline writing into run ``r1`` (opened here: results reference their run)."""
    open_run(
        "r1", model="/m", family="qwen3_vl", benchmarks=["vcrbench"], identity={}, config={},
        manifest={"family": "qwen3_vl"}, output_dir="/out",
    )  # fmt: skip
    return Pipeline(
        engine, run_id="r1", run_manifest={"family": "qwen3_vl"}, family="qwen3_vl", thinking=False,
        concurrency=1, io_threads=1, queue_size=1, judge_engine=judge,
    )  # fmt: skip


def test_a_failing_rubric_judge_keeps_the_answers_score(tmp_path, reelrl_home, monkeypatch):
    """cot=true and the judge refuses the CoT prompts (too long): the answer D still scores 1, the
    response is stored, the rubric error is in the details, and the CoT aggregates leave the item out
    and say so (before: accuracy 0, no response, and the headline accuracy fell)."""
    adapter = get_benchmark("vcrbench", cot=True)
    (sample,) = adapter.load([write_json(tmp_path / "meta_info_video.json", [ITEM])])
    engine = FakeEngine("The cat sits on the table. D")
    runner = pipeline(engine, judge=engine)

    async def refuse(request, max_tokens):
        raise ValueError("prompt is longer than max_model_len")

    monkeypatch.setattr(runner, "_ask_judge", refuse)
    task = Task("vcrbench", adapter, PlannedSample(sample))
    ready = Ready(task, engine_input=object(), clip_meta=None, prompt_version="v1")
    finished = []
    runner.on_result = lambda benchmark, item: finished.append(item)

    async def finish():
        with ThreadPoolExecutor(1) as pool:
            await runner._finish(ready, pool)

    asyncio.run(finish())
    (item,) = finished
    assert item.accuracy == 1.0 and item.error is None
    assert item.details["rubric_error"].startswith("rubric judge failed: prompt is longer")
    (row,) = stored_results("r1", "vcrbench")
    assert row.response == "The cat sits on the table. D" and row.accuracy == 1.0
    summary = adapter.aggregate([sample], {sample.id: as_item(row)})
    assert summary.overall == 100.0 and "cot_recall" not in summary.metrics
    assert any(note.startswith("1 items have no CoT judge replies") for note in summary.notes)


def test_a_failed_sample_keeps_its_response(tmp_path, reelrl_home):
    """A sample whose answer judge fails scores 0 with the error, and its response is stored so the
    row can be re-scored later."""
    adapter = get_benchmark("vcrbench")
    (sample,) = adapter.load([write_json(tmp_path / "meta_info_video.json", [ITEM])])
    ready = Ready(Task("vcrbench", adapter, PlannedSample(sample)), None, None, "v1")
    item = pipeline(FakeEngine("D")).score_and_save(ready, response("D"), 3, 0.1, None, "judge failed: long")
    assert (item.accuracy, item.response, item.error) == (0.0, "D", "judge failed: long")
    (row,) = stored_results("r1", "vcrbench")
    assert row.response == "D"


def test_an_adapter_error_on_one_sample_is_that_samples_error(tmp_path, monkeypatch):
    """An unexpected exception from the adapter while preparing one sample is recorded as its error
    (before: it escaped ``prepare`` and stopped the run)."""
    adapter = get_benchmark("vcrbench")
    (sample,) = adapter.load([write_json(tmp_path / "meta_info_video.json", [ITEM])])
    runner = Pipeline(
        FakeEngine("D"), run_id="r1", run_manifest={}, family="qwen3_vl", thinking=False,
        concurrency=1, io_threads=1, queue_size=1,
    )  # fmt: skip

    def broken(*args, **kwargs):
        raise TypeError("float() argument must be a string or a real number, not 'NoneType'")

    monkeypatch.setattr(adapter, "prompt", broken)
    ready = runner.prepare(Task("vcrbench", adapter, PlannedSample(sample)))
    assert ready.engine_input is None and ready.prompt_version == adapter.prompt_version(sample, False)
    assert (
        ready.error
        == "AdapterFailure: TypeError: float() argument must be a string or a real number, not 'NoneType'"
    )

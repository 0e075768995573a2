"""The streaming evaluation loop: an IO thread pool prepares requests (clip from the frame store, the
benchmark's prompt, the engine input) into a bounded queue; ``concurrency`` consumers stream them
through ``AsyncRolloutEngine``; each answer is scored and written to the database the moment it exists.

Data path per sample: PlannedSample → (IO pool) Ready → (engine) response → (judge and reward
functions, at once) → (IO pool) score → eval_results row → ``on_result``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks import Benchmark, ItemResult
from services.eval.clips import PlannedSample
from services.eval.manifest import result_manifest
from services.eval.reward_functions import item_details
from services.eval.scoring import score_one
from services.eval.store import ResultRecord, save_result
from services.reward.functions import FunctionRunner, Outcome
from services.reward.scoring import as_sample
from services.rollout import adapters
from services.rollout.async_engine import AsyncRolloutEngine
from services.rollout.prompts import EngineInput, prepare_inputs
from services.rollout.samples import RolloutResponse, RolloutSample, continued_response

log = logging.getLogger(__name__)
# what a result keeps of a clip's frame-store metadata (enough to re-score boxes without the clip)
CLIP_META_FIELDS = ("fps", "duration", "source_width", "source_height", "width", "height", "num_frames")


@dataclass
class Task:
    benchmark: str
    adapter: Benchmark
    planned: PlannedSample

    @property
    def sample(self) -> Sample:
        return self.planned.sample


@dataclass
class Ready:
    """A prepared request, or the reason the sample cannot run (it is then recorded as an error)."""

    task: Task
    engine_input: EngineInput | None
    clip_meta: list[dict[str, Any]] | None
    prompt_version: str
    assistant_prefix: str | None = None
    error: str | None = None


def rollout_sample(
    task: Task, prompt: str, system: str | None, assistant_prefix: str | None = None
) -> RolloutSample:
    """Eval's rollout input through the shared adapter: ids unique across benchmarks, the parameters
    each clip must have been stored with (checked when loaded), and no offline response."""
    params, keys = task.planned.params, task.planned.keys
    return adapters.rollout_sample(
        task.sample,
        prompt,
        videos=keys,
        clip_params=[params for _ in keys] if params and keys else None,
        system=system,
        assistant_prefix=assistant_prefix,
        sample_id=f"{task.benchmark}/{task.sample.id}",
        offline_output=False,
    )


class AdapterFailure(ValueError):
    """An unexpected exception of a benchmark adapter on one sample (a bug a record tripped)."""


def from_adapter(task: Task, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, with any exception but the expected per-sample ones turned into an
    :class:`AdapterFailure` (logged with its traceback), so it fails this sample only."""
    try:
        return call(*args, **kwargs)
    except (ValueError, LookupError, OSError):
        raise
    except Exception as exc:
        log.exception("%s/%s: the adapter failed", task.benchmark, task.sample.id)
        raise AdapterFailure(f"{type(exc).__name__}: {exc}") from exc


class Pipeline:
    def __init__(
        self,
        engine: AsyncRolloutEngine,
        *,
        run_id: str,
        run_manifest: dict[str, Any],
        family: str,
        thinking: bool,
        concurrency: int,
        io_threads: int,
        queue_size: int,
        judge_engine: AsyncRolloutEngine | None = None,
        judge_max_tokens: int = 16,
        on_result: Callable[[str, ItemResult], None] | None = None,
        stop: Callable[[], bool] | None = None,
        sampling: dict[str, Any] | None = None,
        reward_functions: Sequence[FunctionRunner] = (),
    ) -> None:
        self.engine = engine
        self.run_id = run_id
        self.run_manifest = run_manifest
        self.family = family
        self.thinking = thinking
        self.concurrency = concurrency
        self.io_threads = io_threads
        self.queue_size = queue_size
        self.judge_engine = judge_engine
        self.judge_max_tokens = judge_max_tokens
        self.on_result = on_result or (lambda benchmark, item: None)
        self.stop = stop or (lambda: False)
        # per-request sampling overrides (benchmarks fix the response length with ignore_eos)
        self.sampling = dict(sampling or {})
        # every answer is also scored by each (services/eval/reward_functions.py); the caller closes them
        self.reward_functions = list(reward_functions)
        self._traced: set[str] = set()  # functions whose first failure was logged with its traceback
        self.written = 0

    # --- IO pool ---------------------------------------------------------------------------------------

    def prepare(self, task: Task) -> Ready:
        """The sample's engine request, or why it cannot run. Whatever one sample's annotation does to
        the adapter is that sample's error, never the run's; of the clip loader and the processor only
        the per-sample failures are (a store or processor outage still stops the run, rather than
        filing every remaining sample as failed)."""
        sample, adapter, planned = task.sample, task.adapter, task.planned
        version, prefix = "", None
        try:
            version = from_adapter(task, adapter.prompt_version, sample, self.thinking)
            prefix = from_adapter(task, adapter.assistant_prefix, sample, self.thinking)
            if planned.error is not None:
                return Ready(task, None, None, version, prefix, planned.error)
            metas = [
                self.engine.source.load(key, expect=planned.params.canonical())[1] for key in planned.keys
            ]
            prompt = from_adapter(
                task, adapter.prompt, sample, self.family, self.thinking, clip_meta=metas or None
            )
            system = from_adapter(task, adapter.system_prompt, sample, self.thinking)
            request = rollout_sample(task, prompt, system, prefix)
            (item,) = prepare_inputs(
                [request], self.engine.checkpoint, self.engine.source, self.engine.config
            )
        except (ValueError, LookupError, OSError) as exc:  # missing clip, parameter mismatch, bad media
            return Ready(task, None, None, version, prefix, f"{type(exc).__name__}: {exc}")
        compact = [{k: m[k] for k in CLIP_META_FIELDS if k in m} for m in metas] or None
        return Ready(task, item, compact, version, prefix)

    def score_and_save(
        self, ready: Ready, response: RolloutResponse | None, prompt_tokens: int | None, latency_s: float | None,
        judge_response: str | None, error: str | None, rubric: dict[str, str] | None = None,
        rubric_error: str | None = None, functions: dict[str, Any] | None = None,
    ) -> ItemResult:  # fmt: skip
        """Score and store one sample. ``rubric_error`` (the rubric judge failed) leaves the item scored
        as without a rubric and is kept in its details, so rubric aggregates can leave the item out.
        ``functions``: the reward functions' details of the answer, kept beside the benchmark's own."""
        task = ready.task
        if error is None and response is not None:
            item = score_one(
                task.adapter, task.sample, response.text, self.family, ready.clip_meta, judge_response,
                assistant_prefix=ready.assistant_prefix, rubric_replies=rubric,
            )  # fmt: skip
            if rubric_error is not None:
                item = item.model_copy(update={"details": {**item.details, "rubric_error": rubric_error}})
        else:
            # the response is kept even when the sample failed, so the row can be re-scored later
            item = ItemResult(
                id=task.sample.id, accuracy=0.0, error=error, problem_type=task.sample.problem_type,
                response=response.text if response is not None else None,
            )  # fmt: skip
        if functions:
            item = item.model_copy(update={"details": {**item.details, **functions}})
        clip = task.planned.params.canonical() if task.planned.params else None
        record = ResultRecord(
            benchmark=task.benchmark,
            item=item,
            manifest=result_manifest(self.run_manifest, clip, ready.prompt_version, ready.assistant_prefix),
            clip_meta=ready.clip_meta,
            judge_response=judge_response,
            finish_reason=response.finish_reason if response else None,
            prompt_tokens=prompt_tokens,
            response_tokens=len(response.token_ids) if response else None,
            latency_s=latency_s,
        )
        if save_result(self.run_id, record):
            self.written += 1
        else:
            log.warning("%s/%s already had a result; kept the stored one", task.benchmark, item.id)
        return item

    # --- engine ----------------------------------------------------------------------------------------

    async def _ask_judge(self, request: RolloutSample, max_tokens: int) -> str:
        engine = self.judge_engine or self.engine
        (item,) = await asyncio.to_thread(
            prepare_inputs, [request], engine.checkpoint, engine.source, engine.config
        )
        _, (response,) = await engine.generate(item, 1, temperature=0.0, max_tokens=max_tokens)
        return response.text

    async def _judge(self, task: Task, text: str) -> str:
        request = RolloutSample(
            id=f"{task.benchmark}/{task.sample.id}#judge", prompt=task.adapter.judge_prompt(task.sample, text)
        )
        return await self._ask_judge(request, self.judge_max_tokens)

    async def _rubric(self, task: Task, text: str) -> dict[str, str] | None:
        """The judge's replies to the benchmark's rubric questions (asked together), or None."""
        questions = task.adapter.rubric_questions(task.sample, text)
        if not questions:
            return None
        max_tokens = max(self.judge_max_tokens, task.adapter.rubric_max_tokens)
        requests = [
            RolloutSample(id=f"{task.benchmark}/{task.sample.id}#{name}", prompt=q.prompt, system=q.system)
            for name, q in questions.items()
        ]
        replies = await asyncio.gather(*(self._ask_judge(r, max_tokens) for r in requests))
        return dict(zip(questions, replies, strict=True))

    async def _judged(
        self, ready: Ready, response: RolloutResponse
    ) -> tuple[str | None, str | None, dict[str, str] | None, str | None]:
        """(judge reply, error, rubric replies, rubric error) for one answer; all None without a judge."""
        judge_response, error, rubric, rubric_error = None, None, None, None
        if self.judge_engine is None:
            return judge_response, error, rubric, rubric_error
        answer = continued_response(ready.assistant_prefix, response.text)
        # a judge prompt the engine refuses (too long) fails this sample only
        if self.wants_judge(ready.task):
            try:
                judge_response = await self._judge(ready.task, answer)
            except ValueError as exc:
                error = f"judge failed: {exc}"
        # The rubric (CoT steps, generation scores) is a figure beside the answer's score: its
        # failure must not zero the answer, or turning the rubric on would lower the accuracy.
        try:
            rubric = await self._rubric(ready.task, answer)
        except ValueError as exc:
            rubric_error = f"rubric judge failed: {exc}"
        return judge_response, error, rubric, rubric_error

    async def _reward_functions(self, ready: Ready, response: RolloutResponse) -> dict[str, Any]:
        """Every reward function's outcome on one answer, as the item's details (none without functions).
        Called as training would call it: on the reward library's view of the sample (the one the
        benchmark's accuracy reads) and the response the library reads (the assistant prefix included).
        A sample the library cannot read fails every function on this item alone."""
        if not self.reward_functions:
            return {}
        task = ready.task
        try:
            view = from_adapter(task, task.adapter.reward_sample, task.sample, self.family, ready.clip_meta)
            sample = as_sample(view)
        except (ValueError, LookupError, OSError) as exc:  # InvalidSample, boxes without the clip's size
            why = f"reward functions not called: {type(exc).__name__}: {exc}"
            outcomes = {runner.name: Outcome(error=why) for runner in self.reward_functions}
        else:
            text = continued_response(ready.assistant_prefix, response.text)
            ran = await asyncio.gather(*(runner.arun([(sample, text)]) for runner in self.reward_functions))
            outcomes = {
                runner.name: outcome for runner, (outcome,) in zip(self.reward_functions, ran, strict=True)
            }
        for name, outcome in outcomes.items():
            if outcome.error is None:
                continue
            if outcome.trace and name not in self._traced:  # the first raise of each, in full
                self._traced.add(name)
                log.warning("%s/%s: %s\n%s", task.benchmark, task.sample.id, outcome.error, outcome.trace)
            else:
                log.warning("%s/%s: %s", task.benchmark, task.sample.id, outcome.error)
        return item_details(outcomes)

    async def _finish(self, ready: Ready, pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        response, prompt_tokens, latency, error = None, None, None, ready.error
        if error is None:
            started = time.perf_counter()
            try:
                prompt_ids, (response,) = await self.engine.generate(ready.engine_input, 1, **self.sampling)
                prompt_tokens = len(prompt_ids)
            except ValueError as exc:  # refused input (too long, placeholder mismatch): this sample only
                error = f"generation failed: {exc}"
            latency = time.perf_counter() - started
        judge_response, rubric, rubric_error, functions = None, None, None, {}
        if error is None and response is not None:
            # the judge and the reward functions read the same answer: asked at once
            (judge_response, error, rubric, rubric_error), functions = await asyncio.gather(
                self._judged(ready, response), self._reward_functions(ready, response)
            )
        item = await loop.run_in_executor(
            pool, self.score_and_save, ready, response, prompt_tokens, latency, judge_response, error,
            rubric, rubric_error, functions,
        )  # fmt: skip
        self.on_result(ready.task.benchmark, item)

    def wants_judge(self, task: Task) -> bool:
        return self.judge_engine is not None and task.adapter.uses_judge(task.sample)

    async def run(self, tasks: list[Task]) -> int:
        """Run every task; returns how many results were written. An engine failure stops everything;
        a sample that cannot be prepared or is refused by the engine is recorded with its error."""
        queue: asyncio.Queue[Ready | None] = asyncio.Queue(maxsize=self.queue_size)
        pending: Iterator[Task] = iter(tasks)
        loop = asyncio.get_running_loop()

        with ThreadPoolExecutor(self.io_threads, thread_name_prefix="eval-io") as pool:

            async def load() -> None:
                for task in pending:  # one shared iterator: loaders take the next task in order
                    if self.stop():
                        return
                    await queue.put(await loop.run_in_executor(pool, self.prepare, task))

            async def consume() -> None:
                while (ready := await queue.get()) is not None:
                    await self._finish(ready, pool)

            async with asyncio.TaskGroup() as group:
                consumers = [group.create_task(consume()) for _ in range(self.concurrency)]
                async with asyncio.TaskGroup() as loaders:
                    for _ in range(self.io_threads):
                        loaders.create_task(load())
                for _ in consumers:
                    await queue.put(None)
        return self.written

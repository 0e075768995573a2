"""The reward HTTP service (FastAPI, stateless): ``uvicorn --factory services.reward.app:create_app``.

POST /v1/score scores a batch in a worker thread (math checks run in helper processes), so the event loop
never waits on a scorer. An unusable item, or one past ``REELRL_REWARD_ITEM_TIMEOUT_S``, gets ``error`` and
zeros while the rest are scored; a malformed body gets 422 naming the field (a non-finite number anywhere
in it too: services/reward/strictjson.py; a sample text over its bound: services/reward/sample.py); too
many items or too long a response get 413. Items naming ``reward_function`` are scored by that function
(services/reward/functions.py), one the operator configured at start (``REELRL_REWARD_FUNCTIONS``); a
name the service does not serve fails its item alone.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from services.common.body_limit import BodyLimitMiddleware
from services.reward import types as _types  # noqa: F401 - registers every problem type
from services.reward.config import RewardConfig, RewardFunctionConfig, ScoringOptions
from services.reward.functions import FunctionRunner, Outcome, load_function
from services.reward.metrics.mathcheck import get_math_checker
from services.reward.metrics_prom import RewardMetrics
from services.reward.mix import callable_items
from services.reward.registry import describe_types
from services.reward.result import RewardResult
from services.reward.sample import BoundedAnswer, BoundedName, BoundedOptions
from services.reward.scoring import score_items
from services.reward.settings import RewardServiceSettings
from services.reward.strictjson import refuse_non_finite, validation_error_handler


@with_config(ConfigDict(extra="allow"))
class SampleBody(TypedDict, total=False):
    """A sample as sent: any fields, read and checked when its item is scored (an unusable sample fails its
    item alone), except the lengths of the texts scoring reads, bounded here (422 naming the field):
    services/reward/sample.py MAX_ANSWER_CHARS, MAX_OPTION_CHARS, MAX_NAME_CHARS."""

    problem_type: BoundedName
    id: BoundedName
    answer: BoundedAnswer
    solution: BoundedAnswer
    options: BoundedOptions


class ScoreItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sample: SampleBody = Field(description="SPEC §2 sample: at least problem_type and answer")
    response: str = Field(description="the model's response text")
    reward_function: str | None = Field(
        None,
        description="score with this reward function (one the service's operator configured, "
        "REELRL_REWARD_FUNCTIONS) instead of the sample's problem type: `overall` is its score, `parts` "
        "holds it and its extra values",
    )


class ScoreRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {
                            "sample": {
                                "problem_type": "multiple choice",
                                "answer": "B",
                                "options": ["A. red", "B. blue"],
                            },
                            "response": "<think>The car is blue.</think><answer>B</answer>",
                        },
                        {
                            "sample": {"problem_type": "regression", "answer": "10"},
                            "response": "<answer>12</answer>",
                        },
                    ],
                    "options": {"w_acc": 0.9, "w_fmt": 0.1},
                }
            ]
        },
    )

    items: list[ScoreItem]
    options: ScoringOptions = Field(default_factory=ScoringOptions)


class ScoreResponse(BaseModel):
    results: list[RewardResult]


class ProblemTypeInfo(BaseModel):
    name: str
    aliases: list[str]
    description: str


class ProblemTypesResponse(BaseModel):
    problem_types: list[ProblemTypeInfo]


class Health(BaseModel):
    status: str


class Problem(BaseModel):
    detail: str


def function_result(name: str, outcome: Outcome) -> RewardResult:
    """A reward function's outcome as an item's result: its score as ``overall``, in ``parts`` by name."""
    if outcome.error is not None:
        return RewardResult.failed(outcome.error)
    return RewardResult(overall=outcome.value, accuracy=0.0, format=0.0, parts=outcome.parts(name))


def load_served_functions(settings: RewardServiceSettings) -> dict[str, FunctionRunner]:
    """Every configured function loaded now, so a bad one stops the service at start, by name."""
    runners: dict[str, FunctionRunner] = {}
    for name, target in settings.functions.items():
        spec = RewardFunctionConfig(name=name, path=target)
        runners[name] = FunctionRunner(
            spec.name, load_function(target), settings.function_timeout_s, settings.function_concurrency
        )
    return runners


def create_app(settings: RewardServiceSettings | None = None) -> FastAPI:
    settings = settings or RewardServiceSettings()
    metrics = RewardMetrics()
    scoring_slots = anyio.CapacityLimiter(settings.score_threads)
    functions = load_served_functions(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        checker = get_math_checker(settings.math_workers)
        if settings.warm_math:
            await anyio.to_thread.run_sync(checker.warm)
        try:
            yield
        finally:
            for runner in functions.values():
                runner.close()

    async def score_with_functions(body: ScoreRequest) -> dict[int, RewardResult]:
        """The results of the items that name a reward function, by index; the functions run at once."""
        asked: dict[str, list[int]] = {}
        for index, item in enumerate(body.items):
            if item.reward_function is not None:
                asked.setdefault(item.reward_function, []).append(index)
        results: dict[int, RewardResult] = {}
        for name, indices in asked.items():
            if name not in functions:
                served = sorted(functions) or "none (REELRL_REWARD_FUNCTIONS is unset)"
                for index in indices:
                    results[index] = RewardResult.failed(
                        f"reward function {name!r} is not served here; this service serves: {served}"
                    )
        served_now = [(n, i) for n, i in asked.items() if n in functions]

        async def run(name: str, indices: list[int]) -> None:
            items = [(dict(body.items[i].sample), body.items[i].response) for i in indices]
            ready, where, refused = callable_items(items)
            for j, why in refused.items():
                results[indices[j]] = RewardResult.failed(why)
            for j, outcome in zip(where, await functions[name].arun(ready), strict=True):
                results[indices[j]] = function_result(name, outcome)

        async with anyio.create_task_group() as group:
            for name, indices in served_now:
                group.start_soon(run, name, indices)
        return results

    app = FastAPI(
        title="ReelRL reward service",
        version="1",
        lifespan=lifespan,
        dependencies=[Depends(refuse_non_finite)],
        exception_handlers={RequestValidationError: validation_error_handler},
    )

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.observe_request(request.method, route, response.status_code, time.perf_counter() - started)
        return response

    # outermost: a body over the limit, declared or streamed in chunks, is 413 before anything reads it
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.max_body_bytes, setting="REELRL_REWARD_MAX_BODY_BYTES"
    )

    @app.post(
        "/v1/score",
        response_model=ScoreResponse,
        responses={413: {"model": Problem, "description": "too many items or too long a response"}},
    )
    async def score(body: ScoreRequest) -> ScoreResponse:
        if len(body.items) > settings.max_batch_items:
            raise HTTPException(
                413,
                f"{len(body.items)} items exceed the batch limit {settings.max_batch_items}; split the batch",
            )
        for index, item in enumerate(body.items):
            if len(item.response) > settings.max_response_chars:
                raise HTTPException(
                    413,
                    f"items[{index}].response has {len(item.response)} characters; the limit is "
                    f"{settings.max_response_chars}",
                )
        config = RewardConfig(
            **body.options.model_dump(),
            math_timeout_s=settings.math_timeout_s,
            math_deadline_s=settings.math_deadline_s,
            math_workers=settings.math_workers,
            item_timeout_s=settings.item_timeout_s,
        )
        by_function = await score_with_functions(body)
        builtin = [i for i, item in enumerate(body.items) if item.reward_function is None]
        pairs = [(dict(body.items[i].sample), body.items[i].response) for i in builtin]
        scored: list[RewardResult] = await anyio.to_thread.run_sync(
            score_items, pairs, config, limiter=scoring_slots
        )
        by_index = {**by_function, **dict(zip(builtin, scored, strict=True))}
        results = [by_index[i] for i in range(len(body.items))]
        metrics.observe_items(results)
        return ScoreResponse(results=results)

    @app.get("/v1/problem-types", response_model=ProblemTypesResponse)
    async def problem_types() -> ProblemTypesResponse:
        return ProblemTypesResponse(problem_types=[ProblemTypeInfo(**t) for t in describe_types()])

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return app

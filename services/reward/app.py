"""The reward HTTP service (FastAPI, stateless): ``uvicorn --factory services.reward.app:create_app``.

POST /v1/score scores a batch in a worker thread (math checks run in helper processes), so the event loop
never waits on a scorer. An unusable item, or one past ``REELRL_REWARD_ITEM_TIMEOUT_S``, gets ``error`` and
zeros while the rest are scored; a malformed body gets 422 naming the field (a non-finite number anywhere
in it too: services/reward/strictjson.py; a sample text over its bound: services/reward/sample.py); too
many items or too long a response get 413.
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
from services.reward.config import RewardConfig, ScoringOptions
from services.reward.metrics.mathcheck import get_math_checker
from services.reward.metrics_prom import RewardMetrics
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


def create_app(settings: RewardServiceSettings | None = None) -> FastAPI:
    settings = settings or RewardServiceSettings()
    metrics = RewardMetrics()
    scoring_slots = anyio.CapacityLimiter(settings.score_threads)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        checker = get_math_checker(settings.math_workers)
        if settings.warm_math:
            await anyio.to_thread.run_sync(checker.warm)
        yield

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
        pairs = [(dict(item.sample), item.response) for item in body.items]
        results: list[RewardResult] = await anyio.to_thread.run_sync(
            score_items, pairs, config, limiter=scoring_slots
        )
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

"""Strict JSON at the service's edge: no NaN, no Infinity, no number beyond float range.

JSON (RFC 8259) has no non-finite numbers, but Python's parser reads ``NaN``, ``Infinity`` and
``-Infinity``, and turns ``1e999`` into ``inf``. Such a body is refused with a 422 naming every field that
holds one, before any model sees it (``refuse_non_finite``, an app-wide dependency). Error bodies name
non-finite inputs instead of carrying them (``validation_error_handler``): ``JSONResponse`` refuses
non-finite floats, so an error about such an input must never contain the input itself.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

# A body with thousands of NaNs gets the first ones named, not an error body larger than the request.
MAX_REPORTED = 20
NON_FINITE_MESSAGE = (
    "Input should be a finite number: JSON has no NaN or Infinity, and numbers beyond float range "
    "(such as 1e999) read as Infinity"
)

Location = tuple[str | int, ...]


def non_finite_name(value: float) -> str:
    """``NaN``, ``Infinity`` or ``-Infinity``: the spelling Python's JSON parser reads."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def non_finite_locations(value: Any, limit: int = MAX_REPORTED) -> list[tuple[Location, float]]:
    """``(path, value)`` of the first ``limit`` non-finite floats in parsed JSON, in document order.

    Iterative, so a deeply nested body cannot exhaust the interpreter's recursion limit here.
    """
    found: list[tuple[Location, float]] = []
    stack: list[tuple[Location, Any]] = [((), value)]
    while stack and len(found) < limit:
        path, item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                found.append((path, item))
        elif isinstance(item, dict):
            stack.extend(((*path, key), child) for key, child in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend(((*path, index), child) for index, child in reversed(list(enumerate(item))))
    return found


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its name, so ``json.dumps`` cannot refuse it."""
    if isinstance(value, float) and not math.isfinite(value):
        return non_finite_name(value)
    if isinstance(value, dict):
        return {key: json_safe(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(child) for child in value]
    return value


def _is_json(content_type: str | None) -> bool:
    # The media types FastAPI parses as JSON; other bodies reach validation as bytes.
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def refuse_non_finite(request: Request) -> None:
    """App-wide dependency: a JSON body holding a non-finite number gets 422 naming each such field.

    FastAPI has parsed the body before dependencies run (``request.json()`` returns its cached result);
    a body that is not valid JSON never gets here (FastAPI answers it with ``json_invalid``).
    """
    if not _is_json(request.headers.get("content-type")) or not await request.body():
        return
    try:
        body = await request.json()
    except ValueError:
        return  # FastAPI reports a malformed body itself
    found = non_finite_locations(body)
    if found:
        raise RequestValidationError(
            [
                {
                    "type": "finite_number",
                    "loc": ("body", *path),
                    "msg": NON_FINITE_MESSAGE,
                    "input": non_finite_name(number),
                }
                for path, number in found
            ]
        )


async def validation_error_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 body (``{"detail": [errors]}``), with non-finite inputs named, never embedded."""
    return JSONResponse(status_code=422, content={"detail": json_safe(jsonable_encoder(exc.errors()))})

"""Request bodies parsed as strict JSON, once, for every route of the API (422 naming the field).

JSON has no NaN or Infinity, but Python's parser accepts them, and turns ``1e400`` into infinity: such
a number then failed validation with a 500 (the error could not be written back as JSON) or was
stored as ``null``. Here they are refused where the body is read, each with its location, before
any model sees them, and so are bodies that are not UTF-8 or nest too deep (FastAPI answered those
with an undocumented 400).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException


class BodyRejected(HTTPException):
    """A body that is not strict JSON; an HTTPException so FastAPI lets it through as it reads."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(422, "invalid JSON body")
        self.errors = errors


class _NonFinite:
    def __init__(self, text: str) -> None:
        self.text = text


class _HugeInt:
    def __init__(self, text: str) -> None:
        self.text = text


#: integers a config may hold: what a signed 64-bit column, numpy or torch can take
INT_LIMIT = 2**63 - 1


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _parse_int(text: str) -> int | _HugeInt:
    # json's own limit (4,300 digits) is far past any count or size a job may name
    if len(text.lstrip("-")) > 19:
        return _HugeInt(text)
    value = int(text)
    return value if abs(value) <= INT_LIMIT else _HugeInt(text)


def _lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate (``\\ud800``: valid JSON, not valid Unicode text), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _non_finite(value: Any, loc: tuple[str | int, ...]) -> list[dict[str, Any]]:
    """Every number JSON or a config cannot hold, and every string that is no Unicode text, by place.
    The offending text is never echoed: a lone surrogate would break the 422's own rendering."""
    if isinstance(value, _NonFinite):
        return [
            {
                "type": "finite_number",
                "loc": loc,
                "msg": f"{value.text} is not a finite number (NaN, Infinity and numbers beyond the float "
                "range such as 1e400 are refused)",
                "input": value.text,
            }
        ]
    if isinstance(value, _HugeInt):
        digits = len(value.text.lstrip("-"))
        return [
            {
                "type": "int_too_large",
                "loc": loc,
                "msg": f"an integer of {digits} digits: integers must lie within ±{INT_LIMIT}",
                "input": None,
            }
        ]
    if isinstance(value, str):
        at = _lone_surrogate(value)
        if at is None:
            return []
        return [
            {
                "type": "string_unicode",
                "loc": loc,
                "msg": f"a lone surrogate at character {at}: the string is not valid Unicode text",
                "input": None,
            }
        ]
    if isinstance(value, dict):
        errors = []
        for key, item in value.items():
            at = _lone_surrogate(key)
            if at is not None:
                place = f"<key with a lone surrogate at character {at}>"
                errors.append(
                    {"type": "string_unicode", "loc": (*loc, place), "msg": "a key is not valid Unicode text",
                     "input": None}
                )  # fmt: skip
                continue
            errors.extend(_non_finite(item, (*loc, key)))
        return errors
    if isinstance(value, list):
        return [e for i, item in enumerate(value) for e in _non_finite(item, (*loc, i))]
    return []


def _invalid(msg: str) -> BodyRejected:
    return BodyRejected([{"type": "json_invalid", "loc": ("body",), "msg": msg, "input": None}])


def strict_json(body: bytes) -> Any:
    """``body`` decoded; :class:`BodyRejected` (every offending location) when it is not strict JSON."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_NonFinite, parse_float=_parse_float, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise BodyRejected(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", exc.pos),
                    "msg": f"JSON decode error: {exc.msg}",
                    "input": None,
                }
            ]
        ) from None
    except (RecursionError, ValueError) as exc:  # nested too deep; an integer of over 4300 digits
        raise _invalid(f"JSON the API cannot read: {exc.__class__.__name__}: {str(exc)[:200]}") from None
    errors = _non_finite(value, ("body",))
    if errors:
        raise BodyRejected(errors)
    return value


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """An API route whose JSON body goes through :func:`strict_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict

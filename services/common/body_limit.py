"""Refuse request bodies over the limit (413) before anything parses them, declared or streamed
(chunked bodies declare no length: counting what arrives is the only limit they meet). An ASGI
middleware every HTTP service of the project mounts (the jobs API, the reward service)."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _TooLarge(HTTPException):
    """Raised while the app reads the body: FastAPI passes HTTP exceptions through as responses."""

    def __init__(self, max_bytes: int, setting: str) -> None:
        super().__init__(413, f"request body exceeds {max_bytes} bytes ({setting})")


class BodyLimitMiddleware:
    """``setting``: the environment variable that sets ``max_bytes``, named in every 413."""

    def __init__(self, app: ASGIApp, max_bytes: int, setting: str = "REELRL_API_MAX_BODY_BYTES") -> None:
        self.app, self.max_bytes, self.setting = app, max_bytes, setting

    async def _refuse(self, send: Send, size: str) -> None:
        detail = f"request body of {size} bytes exceeds {self.max_bytes} ({self.setting})"
        await send_json(send, 413, {"detail": detail})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, declared.decode())
            return
        if declared is None:
            # Chunked: read it here, up to the limit, and hand the app what arrived. (Raised from inside
            # the app's own read, a framework may turn the refusal into a 400 "error parsing the body".)
            messages: list[Message] = []
            size, more = 0, True
            while more:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    messages.append(message)
                    break
                size += len(message.get("body", b""))
                if size > self.max_bytes:
                    await self._refuse(send, f"more than {self.max_bytes}")
                    return
                messages.append(message)
                more = message.get("more_body", False)
            receive = _replay(messages, receive)
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes, self.setting)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if started:
                raise
            await self._refuse(send, f"more than {self.max_bytes}")


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands out ``messages`` first, then whatever ``receive`` gives (a disconnect)."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


async def send_json(
    send: Send, status: int, body: dict, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """An ASGI JSON response from a middleware that answers before (or instead of) the app."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})

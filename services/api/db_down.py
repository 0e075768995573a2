"""While the database is away (a Postgres restart, a failover), every request that needs it is 503 with
``Retry-After``, not a 500: clients such as `reelrl submit` retry a 503, and the API serves again by
itself once the database answers (the engine's pre-ping replaces dead pooled connections)."""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from starlette.types import ASGIApp, Receive, Scope, Send

from services.common.body_limit import send_json

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5


def database_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached (not that a statement was wrong)."""
    if isinstance(exc, (OperationalError, InterfaceError, DisconnectionError)):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


class DatabaseDownMiddleware:
    """Outside authentication (token lookups read the database too) and the routes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started or not database_unreachable(exc):
                raise
            log.warning("database unreachable (%s): 503 for %s", type(exc).__name__, scope.get("path"))
            detail = f"the database is unreachable ({type(exc).__name__}); retry in {RETRY_AFTER_S} s"
            await send_json(send, 503, {"detail": detail}, ((b"retry-after", str(RETRY_AFTER_S).encode()),))

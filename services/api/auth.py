"""Who is asking, checked before a request reaches any route: bearer token → scopes.

GET and HEAD need ``read`` (``/metrics`` also takes ``metrics``), every other method ``submit``
(``admin`` allows all). The status page sends the token as a cookie set by ``/login``. For GET and
HEAD the cookie is enough; any other method also needs the ``X-ReelRL-CSRF`` header holding
:func:`csrf_token` of the cookie, which the page's own scripts read from the page and a cross-site form
or script can neither know nor send; a write with the cookie and without that header is 403 (also on
an open API). When the API runs open, a request without a token may do
everything; a token that is given is still checked.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import Depends, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from services.api.tokens import Scope as TokenScope
from services.api.tokens import authenticate

COOKIE = "reelrl_token"
CSRF_HEADER = "x-reelrl-csrf"
METRICS_PATH = "/metrics"
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/login"})
PUBLIC_PREFIXES = ("/static/",)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def csrf_token(token: str) -> str:
    """What a page signed in with ``token`` sends to write with its cookie: derived from the token
    (nothing to store) and one-way (the page never holds the token itself; the cookie is HttpOnly)."""
    return hashlib.sha256(b"reelrl-csrf:" + token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    name: str | None  # the token's name; None for an anonymous request to an open API
    scopes: frozenset[TokenScope]

    def allows(self, scope: TokenScope) -> bool:
        return scope in self.scopes or TokenScope.admin in self.scopes

    def allows_any(self, scopes: tuple[TokenScope, ...]) -> bool:
        return any(self.allows(scope) for scope in scopes)


ANONYMOUS_OPEN = Principal(None, frozenset(TokenScope))


class AuthFailed(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _bearer(headers: dict[str, str], method: str, cookies: dict[str, str]) -> str | None:
    header = headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise AuthFailed(401, "the Authorization header must be 'Bearer <token>'")
        return value.strip()
    cookie = cookies.get(COOKIE) or None
    if method in _SAFE_METHODS or cookie is None:
        return cookie
    sent = headers.get(CSRF_HEADER)
    if sent is not None and hmac.compare_digest(sent.encode(), csrf_token(cookie).encode()):
        return cookie
    # Refused outright, in every mode: dropping the cookie would let an open API run the write
    # anonymously with every scope, whatever the signed-in token may do.
    raise AuthFailed(403, f"a write sent with the login cookie needs the page's {CSRF_HEADER} header")


def resolve_principal(token: str | None, required: bool) -> Principal:
    if token is None:
        if required:
            raise AuthFailed(401, "a bearer token is required (create one with `reelrl token create`)")
        return ANONYMOUS_OPEN
    info = authenticate(token)
    if info is None:
        raise AuthFailed(401, "invalid or revoked token")
    return Principal(info.name, frozenset(info.scopes))


def needed_scopes(method: str, path: str) -> tuple[TokenScope, ...]:
    """Any one of these admits the request."""
    if method not in _SAFE_METHODS:
        return (TokenScope.submit,)
    return (TokenScope.read, TokenScope.metrics) if path == METRICS_PATH else (TokenScope.read,)


def is_public(path: str, metrics_public: bool = False) -> bool:
    return (
        path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES) or (metrics_public and path == METRICS_PATH)
    )


class AuthMiddleware:
    """Authenticates and checks the scope of every non-public request before it is parsed or routed.

    Failures call ``on_failure(scope, AuthFailed)`` for the response (JSON for the API, a login page
    for the status page); nothing else runs.
    """

    def __init__(self, app: ASGIApp, required: bool, on_failure, metrics_public: bool = False) -> None:
        self.app, self.required, self.on_failure = app, required, on_failure
        self.metrics_public = metrics_public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["path"], self.metrics_public):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        method = scope["method"]
        try:
            token = _bearer(dict(request.headers), method, dict(request.cookies))
            principal = await anyio.to_thread.run_sync(resolve_principal, token, self.required)
            scopes = needed_scopes(method, scope["path"])
            if not principal.allows_any(scopes):
                wanted = " or ".join(repr(s.value) for s in scopes)
                raise AuthFailed(403, f"token {principal.name!r} lacks the {wanted} scope")
        except AuthFailed as failure:
            response = self.on_failure(request, failure)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def current_principal(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    if principal is None:  # a public path: nobody in particular
        return Principal(None, frozenset())
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]

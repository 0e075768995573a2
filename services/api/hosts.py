"""Which ``Host`` and ``Origin`` the API answers: the guard against DNS rebinding and cross-site writes.

A page on another site can point a name it controls at 127.0.0.1 (DNS rebinding); the browser then
treats the API as that site and sends ``Host: attacker.example``. So a request is served only when
its Host is a loopback name, an IP literal (a name-less address cannot be rebound: the browser's
origin is then that address itself), the name the API was bound to, or one of
``REELRL_API_ALLOWED_HOSTS``. A write (any method but GET, HEAD, OPTIONS) that carries an ``Origin``
must also come from the API's own origin (the Host it was sent to) or from a configured name: a
form or script on another site cannot write, whatever the auth mode. Clients that send no Origin
(curl, ``reelrl``) are not browsers and pass.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from services.common.body_limit import send_json

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (``[v6]:port`` too) → (lower-case name, port); None when it is not one."""
    value = value.strip()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    else:
        name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    if port and not port.isdigit():
        return None
    name = name.lower().rstrip(".")
    if not name or any(c.isspace() or c in "/\\@?#" for c in name):
        return None
    return name, int(port) if port else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def name_matches(name: str, patterns: list[str]) -> bool:
    """``name`` is one of ``patterns`` (``*.example.com`` matches its subdomains, ``*`` anything)."""
    for pattern in patterns:
        if pattern == "*" or name == pattern:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


class HostGuardMiddleware:
    def __init__(self, app: ASGIApp, host_names: list[str], configured: list[str]) -> None:
        self.app = app
        self.host_names = [n.lower() for n in host_names]
        self.configured = [n.lower() for n in configured]

    def host_allowed(self, name: str) -> bool:
        return _is_ip(name) or name_matches(name, self.host_names)

    def origin_allowed(self, origin: str, host: tuple[str, int | None], scheme: str) -> bool:
        parts = urlsplit(origin)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            return False  # "null" (sandboxed frames, file pages) and anything odd
        try:
            origin_port = parts.port or _DEFAULT_PORTS[parts.scheme]
        except ValueError:
            return False
        name, port = host
        own = parts.hostname.lower() == name and origin_port == (port or _DEFAULT_PORTS.get(scheme, 80))
        return own or name_matches(parts.hostname.lower(), self.configured)

    async def _refuse(self, send: Send, status: int, detail: str) -> None:
        await send_json(send, status, {"detail": detail})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        raw_host = headers.get(b"host", b"").decode("latin-1")
        host = split_host(raw_host)
        if host is None or not self.host_allowed(host[0]):
            await self._refuse(
                send,
                400,
                f"host {raw_host!r} is not a name this API answers to (add it to REELRL_API_ALLOWED_HOSTS)",
            )
            return
        origin = headers.get(b"origin")
        if origin is not None and scope.get("method", "GET") not in _SAFE_METHODS:
            text = origin.decode("latin-1")
            if not self.origin_allowed(text, host, scope.get("scheme", "http")):
                await self._refuse(
                    send, 403, f"cross-origin write refused: Origin {text!r} is not this API's"
                )
                return
        await self.app(scope, receive, send)

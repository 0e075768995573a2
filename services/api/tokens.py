"""Bearer tokens of the jobs API: created once (shown once), stored as SHA-256, revocable, scoped."""

from __future__ import annotations

import enum
import hashlib
import re
import secrets
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from services.common.db import session_scope
from services.common.db.models import ApiToken, utcnow

PREFIX = "rrl_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,199}")


class Scope(enum.StrEnum):
    read = "read"  # list and watch jobs, metrics, results, cache statistics
    submit = "submit"  # submit jobs, cancel one's own jobs
    admin = "admin"  # everything, including cancelling anyone's jobs
    metrics = "metrics"  # /metrics only: what a Prometheus scrape job needs


class TokenError(ValueError):
    pass


class TokenInfo(BaseModel):
    name: str
    scopes: list[Scope]
    created_at: datetime
    revoked_at: datetime | None

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.admin in self.scopes


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_scopes(text: str) -> list[Scope]:
    """``"read,submit"`` → scopes; unknown names raise, naming the valid ones."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise TokenError(f"give at least one scope of {', '.join(s.value for s in Scope)}")
    unknown = [n for n in names if n not in Scope.__members__]
    if unknown:
        raise TokenError(f"unknown scope(s) {', '.join(unknown)}; valid: {', '.join(s.value for s in Scope)}")
    return sorted({Scope(n) for n in names})


def create_token(name: str, scopes: list[Scope]) -> str:
    """A new token (256 random bits). Only its hash is stored: this is the one time it is seen."""
    if not _NAME.fullmatch(name):
        raise TokenError(f"token name {name!r} must match {_NAME.pattern}")
    if not scopes:
        raise TokenError("a token needs at least one scope")
    token = PREFIX + secrets.token_urlsafe(32)
    try:
        with session_scope() as session:
            # A revoked token gives its name up: it is kept (listed, still refused) as NAME#revoked-ID,
            # which no new name can be ('#' is not allowed in names).
            revoked = session.scalar(
                select(ApiToken).where(ApiToken.name == name, ApiToken.revoked_at.is_not(None))
            )
            if revoked is not None:
                suffix = f"#revoked-{revoked.id}"
                revoked.name = name[: 200 - len(suffix)] + suffix
                session.flush()
            session.add(
                ApiToken(name=name, token_hash=_hash(token), scopes=[s.value for s in sorted(set(scopes))])
            )
    except IntegrityError:
        raise TokenError(f"a token named {name!r} exists already (revoke it or pick another name)") from None
    return token


def revoke_token(name: str) -> None:
    with session_scope() as session:
        done = session.execute(
            update(ApiToken)
            .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
            .values(revoked_at=utcnow())
            .execution_options(synchronize_session=False)
        ).rowcount
    if not done:
        raise TokenError(f"no active token named {name!r}")


def list_tokens() -> list[TokenInfo]:
    with session_scope() as session:
        return [_info(t) for t in session.scalars(select(ApiToken).order_by(ApiToken.created_at))]


def authenticate(token: str) -> TokenInfo | None:
    """The active token ``token`` is, or None."""
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    with session_scope() as session:
        row = session.scalar(
            select(ApiToken).where(ApiToken.token_hash == _hash(token), ApiToken.revoked_at.is_(None))
        )
        return None if row is None else _info(row)


def _info(row: ApiToken) -> TokenInfo:
    return TokenInfo(
        name=row.name,
        scopes=[Scope(s) for s in row.scopes],
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )

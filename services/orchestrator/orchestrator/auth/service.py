"""Minting and checking API tokens. Tokens are random, so a SHA-256 digest is enough to store."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, select

from orchestrator.tables import ApiToken, new_id, utcnow
from shared.orchestration import Role

BOOTSTRAP_ID = "tok_bootstrap_admin"
# Postgres: a commit that revoked tokens notifies every replica, which empties its cache.
TOKENS_CHANNEL = "crosscheck_tokens"


@dataclass(frozen=True)
class Principal:
    id: str
    name: str
    role: Role
    expires_at: datetime | None = None  # a login session's end; None: until revoked

    def can(self, *roles: Role) -> bool:
        return self.role is Role.admin or self.role in roles

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or utcnow())


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class PrincipalCache:
    """Recently seen tokens, so most requests skip the lookup.

    A revocation empties it once its transaction committed (before the 204 goes out); on
    Postgres the same commit notifies every replica (``TOKENS_CHANNEL``), and a replica whose
    listener is not connected (``trusted`` says so) looks every token up instead.
    """

    def __init__(self, ttl_s: float = 5.0, trusted: Callable[[], bool] | None = None) -> None:
        self.ttl_s = ttl_s
        self.trusted = trusted
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, token_digest: str) -> Principal | None:
        if self.trusted is not None and not self.trusted():
            return None
        entry = self._entries.get(token_digest)
        if entry is None or entry[0] < time.monotonic() or entry[1].expired():
            return None
        return entry[1]

    def put(self, token_digest: str, principal: Principal) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[token_digest] = (time.monotonic() + self.ttl_s, principal)

    def clear(self) -> None:
        self._entries.clear()


class TokenService:
    def bootstrap_admin(self, session: Session, raw: str) -> None:
        """Make ``raw`` (from CROSSCHECK_ADMIN_TOKEN) the bootstrap admin token."""
        token = session.get(ApiToken, BOOTSTRAP_ID)
        if token is None:
            token = ApiToken(
                id=BOOTSTRAP_ID, name="bootstrap admin", role=Role.admin.value, token_hash=""
            )
        token.token_hash = digest(raw)
        token.revoked_at = None
        session.add(token)

    def authenticate(self, session: Session, raw: str) -> Principal | None:
        token = session.exec(select(ApiToken).where(ApiToken.token_hash == digest(raw))).first()
        return _live(token)

    def current(self, session: Session, token_id: str) -> Principal | None:
        """The principal of token ``token_id`` if it still works (an open websocket's check)."""
        return _live(session.get(ApiToken, token_id))

    def create(
        self, session: Session, *, name: str, role: Role, created_by: str
    ) -> tuple[ApiToken, str]:
        raw = "cc_" + secrets.token_urlsafe(32)
        token = ApiToken(
            id=new_id("tok"),
            name=name,
            role=role.value,
            token_hash=digest(raw),
            created_by=created_by,
        )
        session.add(token)
        return token, raw

    def revoke(self, session: Session, token_id: str) -> bool:
        token = session.get(ApiToken, token_id)
        if token is None:
            return False
        token.revoked_at = utcnow()
        session.add(token)
        self.announce_revocation(session)
        return True

    @staticmethod
    def announce_revocation(session: Session) -> None:
        """Postgres: tell every replica at commit that tokens were revoked."""
        if session.get_bind().dialect.name == "postgresql":
            session.execute(sa.text(f"SELECT pg_notify('{TOKENS_CHANNEL}', '')"))


def _live(token: ApiToken | None) -> Principal | None:
    """The token's principal, or None when it is unknown, revoked or expired."""
    if token is None or token.revoked_at is not None:
        return None
    if token.expires_at is not None and token.expires_at <= utcnow():
        return None
    return Principal(token.id, token.name, Role(token.role), token.expires_at)

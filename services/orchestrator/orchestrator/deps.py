"""Dependency aliases for the Orchestrator's routes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, Request
from sqlmodel import Session

from orchestrator.auth.service import Principal, PrincipalCache, TokenService, digest
from orchestrator.db import session_scope
from shared.auth import bearer_token
from shared.errors import Forbidden, Unauthorized
from shared.orchestration import Role


def get_engine(request: Request) -> sa.Engine:
    engine: sa.Engine = request.app.state.engine
    return engine


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(get_engine(request)) as session:
        yield session


# "function": commit before the response is sent. With FastAPI's default ("request") the
# commit ran after it, so a client (or another replica it asked next) could act on a 201
# and not find the row yet.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def authenticate(request: Request, session: Session | None = None) -> Principal:
    """The caller's principal: from the cache, else looked up (in ``session``, or in a
    session of its own that gives its connection back at once)."""
    raw = bearer_token(request)
    if raw is None:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    cache: PrincipalCache = request.app.state.principals
    key = digest(raw)
    principal = cache.get(key)
    if principal is None:
        if session is None:
            with Session(get_engine(request)) as own:
                principal = TokenService().authenticate(own, raw)
        else:
            principal = TokenService().authenticate(session, raw)
        if principal is None:
            raise Unauthorized("invalid or revoked token")
        cache.put(key, principal)
    return principal


def require(*roles: Role) -> Callable[[Request], Principal]:
    """Admit the given roles (admins always). The check holds no database connection for
    the rest of the request: an endpoint that waits (hashing, Prefer: wait) does not keep
    one from the pool."""

    def dependency(request: Request) -> Principal:
        principal = authenticate(request)
        if not principal.can(*roles):
            wanted = ", ".join(r.value for r in roles) or "admin"
            raise Forbidden(f"this needs the role {wanted}; your token has {principal.role.value}")
        return principal

    return dependency


ServiceCaller = Annotated[Principal, Depends(require(Role.service))]
Reader = Annotated[Principal, Depends(require(Role.service, Role.reviewer))]
Reviewer = Annotated[Principal, Depends(require(Role.reviewer))]
Admin = Annotated[Principal, Depends(require())]

"""Token administration, console accounts and logins."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from sqlmodel import Session

from orchestrator.auth.accounts import AccountService, hasher, password_matches
from orchestrator.auth.service import TokenService
from orchestrator.auth.throttle import LoginThrottle
from orchestrator.db import Database
from orchestrator.deps import Admin, Reader, SessionDep
from orchestrator.reviews.service import ReviewService
from shared.errors import NotFound, Unauthorized
from shared.orchestration import (
    AccountCreate,
    AccountPublic,
    LoginRequest,
    LoginResult,
    TokenCreate,
    TokenCreated,
    WhoAmI,
)

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
def create_token(body: TokenCreate, admin: Admin, session: SessionDep) -> TokenCreated:
    """Mint a token for a role; the raw token is shown once (and works at once: the row is
    committed before the answer)."""
    token, raw = TokenService().create(session, name=body.name, role=body.role, created_by=admin.id)
    return TokenCreated(id=token.id, name=token.name, role=body.role, token=raw)


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_token(token_id: str, admin: Admin, request: Request) -> None:
    """Revoke a token; it stops working before this answer is sent."""
    db: Database = request.app.state.db
    released = await db.run(lambda s: revoke_and_release(s, token_id))
    if released is None:
        raise NotFound(f"token {token_id} does not exist")
    # After the commit: a request in between could otherwise cache the token again.
    request.app.state.principals.clear()
    request.app.state.hub.tokens_changed()  # its open websockets close
    if released:
        request.app.state.hub.notify()


def revoke_and_release(session: Session, token_id: str) -> int | None:
    """Revoke the token and give back the review items it held, in one transaction: how
    many it held, or None when there is no such token."""
    if not TokenService().revoke(session, token_id):
        return None
    return ReviewService().release_claims_of(session, token_id)


accounts_router = APIRouter(tags=["accounts"])


@accounts_router.post(
    "/v1/accounts", status_code=status.HTTP_201_CREATED, response_model=AccountPublic
)
async def create_account(body: AccountCreate, admin: Admin, request: Request) -> AccountPublic:
    """Create a console account (reviewer by default); the password is stored argon2-hashed.
    A name already taken (also by a request racing this one) is a 409."""
    db: Database = request.app.state.db
    throttle: LoginThrottle = request.app.state.login_throttle
    password_hash = await throttle.hashing(lambda: hasher.hash(body.password))
    return await db.run(lambda s: AccountService().create(s, body, password_hash))


@accounts_router.post(
    "/v1/auth/login",
    response_model=LoginResult,
    responses={
        401: {"description": "bad login"},
        429: {"description": "too many failed logins: wait Retry-After seconds"},
    },
)
async def login(body: LoginRequest, request: Request) -> LoginResult:
    """Exchange a username and password for a session token (12 hours; an account keeps at
    most 10, the oldest go). Failed logins slow down per account and per client (429)."""
    db: Database = request.app.state.db
    throttle: LoginThrottle = request.app.state.login_throttle
    client = request.client.host if request.client else "unknown"
    found = await db.read(lambda s: AccountService().find(s, body.username))
    ok = await throttle.hashing(
        lambda: password_matches(found, body.password), login=(body.username, client)
    )
    if not ok or found is None:
        throttle.failed(body.username, client)
        raise Unauthorized("unknown username or wrong password")
    throttle.succeeded(body.username)
    result, revoked = await db.run(lambda s: AccountService().open_session(s, found))
    if revoked:
        request.app.state.principals.clear()
        request.app.state.hub.tokens_changed()
    return result


@accounts_router.get("/v1/auth/me", response_model=WhoAmI)
def who_am_i(caller: Reader) -> WhoAmI:
    """Who the bearer token belongs to: its id, name and role."""
    return WhoAmI(id=caller.id, name=caller.name, role=caller.role)

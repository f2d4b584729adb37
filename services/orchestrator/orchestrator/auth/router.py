"""Token administration."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from orchestrator.auth.accounts import AccountService
from orchestrator.auth.service import TokenService
from orchestrator.deps import Admin, Reader, SessionDep
from shared.errors import NotFound
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
    """Mint a token for a role; the raw token is shown once."""
    token, raw = TokenService().create(session, name=body.name, role=body.role, created_by=admin.id)
    return TokenCreated(id=token.id, name=token.name, role=body.role, token=raw)


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(token_id: str, admin: Admin, session: SessionDep, request: Request) -> None:
    """Revoke a token; it stops working at once."""
    if not TokenService().revoke(session, token_id):
        raise NotFound(f"token {token_id} does not exist")
    request.app.state.principals.clear()


accounts_router = APIRouter(tags=["accounts"])


@accounts_router.post(
    "/v1/accounts", status_code=status.HTTP_201_CREATED, response_model=AccountPublic
)
def create_account(body: AccountCreate, admin: Admin, session: SessionDep) -> AccountPublic:
    """Create a console account (reviewer by default); the password is stored argon2-hashed."""
    return AccountService().create(session, body)


@accounts_router.post(
    "/v1/auth/login", response_model=LoginResult, responses={401: {"description": "bad login"}}
)
def login(body: LoginRequest, session: SessionDep) -> LoginResult:
    """Exchange a username and password for a session token (12 hours)."""
    return AccountService().login(session, body.username, body.password)


@accounts_router.get("/v1/auth/me", response_model=WhoAmI)
def who_am_i(caller: Reader) -> WhoAmI:
    """Who the bearer token belongs to: its id, name and role."""
    return WhoAmI(id=caller.id, name=caller.name, role=caller.role)

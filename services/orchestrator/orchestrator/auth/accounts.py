"""People who log in: usernames with argon2-hashed passwords, exchanged for session tokens."""

from __future__ import annotations

from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlmodel import Session, select

from orchestrator.auth.service import TokenService
from orchestrator.tables import Account, new_id, utcnow
from shared.errors import Conflict, Unauthorized
from shared.orchestration import AccountCreate, AccountPublic, LoginResult, Role

SESSION_HOURS = 12
_hasher = PasswordHasher()
# Verified against when the username is unknown, so both failures take the same time.
_DUMMY_HASH = _hasher.hash("not-a-real-password-0123456789")


class AccountService:
    def create(self, session: Session, body: AccountCreate) -> AccountPublic:
        if session.exec(select(Account).where(Account.username == body.username)).first():
            raise Conflict(f"an account named {body.username} already exists")
        account = Account(
            id=new_id("acc"),
            username=body.username,
            password_hash=_hasher.hash(body.password),
            role=body.role.value,
        )
        session.add(account)
        return AccountPublic(id=account.id, username=account.username, role=body.role)

    def login(self, session: Session, username: str, password: str) -> LoginResult:
        account = session.exec(select(Account).where(Account.username == username)).first()
        try:
            _hasher.verify(account.password_hash if account else _DUMMY_HASH, password)
        except (VerificationError, InvalidHashError):
            account = None
        if account is None or account.disabled:
            raise Unauthorized("unknown username or wrong password")
        expires = utcnow() + timedelta(hours=SESSION_HOURS)
        token, raw = TokenService().create(
            session, name=account.username, role=Role(account.role), created_by=account.id
        )
        token.expires_at = expires
        session.add(token)
        return LoginResult(
            token=raw, name=account.username, role=Role(account.role), expires_at=expires
        )

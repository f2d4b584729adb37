"""People who log in: usernames with argon2-hashed passwords, exchanged for session tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from orchestrator.auth.service import TokenService
from orchestrator.reviews.service import ReviewService
from orchestrator.tables import Account, ApiToken, new_id, utcnow
from shared.errors import Conflict
from shared.orchestration import AccountCreate, AccountPublic, LoginResult, Role

SESSION_HOURS = 12
# Live session tokens per account; a login past it revokes the oldest.
MAX_SESSIONS = 10
hasher = PasswordHasher()
# Verified against when the username is unknown, so both failures take the same time.
_DUMMY_HASH = hasher.hash("not-a-real-password-0123456789")


@dataclass(frozen=True)
class Credentials:
    id: str
    username: str
    password_hash: str
    role: Role
    disabled: bool


def password_matches(found: Credentials | None, password: str) -> bool:
    """Argon2 check (blocking, about 64 MiB): against a dummy hash when nobody matched."""
    try:
        hasher.verify(found.password_hash if found else _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        return False
    return found is not None and not found.disabled


class AccountService:
    def create(self, session: Session, body: AccountCreate, password_hash: str) -> AccountPublic:
        """Store an account; the name is taken -> 409, also when a concurrent request took
        it first (the unique index decides, before the answer is sent)."""
        taken = Conflict(f"an account named {body.username} already exists")
        if session.exec(select(Account).where(Account.username == body.username)).first():
            raise taken
        account = Account(
            id=new_id("acc"),
            username=body.username,
            password_hash=password_hash,
            role=body.role.value,
        )
        session.add(account)
        try:
            session.flush()
        except IntegrityError:
            raise taken from None
        return AccountPublic(id=account.id, username=account.username, role=body.role)

    def find(self, session: Session, username: str) -> Credentials | None:
        account = session.exec(select(Account).where(Account.username == username)).first()
        if account is None:
            return None
        return Credentials(
            account.id,
            account.username,
            account.password_hash,
            Role(account.role),
            bool(account.disabled),
        )

    def open_session(self, session: Session, account: Credentials) -> tuple[LoginResult, int]:
        """A 12-hour session token -> (result, how many older sessions it revoked)."""
        now = utcnow()
        live = list(
            session.exec(
                select(ApiToken)
                .where(
                    col(ApiToken.created_by) == account.id,
                    col(ApiToken.revoked_at).is_(None),
                    col(ApiToken.expires_at) > now,
                )
                .order_by(col(ApiToken.created_at).desc(), col(ApiToken.id).desc())
            )
        )
        revoked = 0
        for old in live[MAX_SESSIONS - 1 :]:
            old.revoked_at = now
            session.add(old)
            ReviewService().release_claims_of(session, old.id)  # nobody else could take them
            revoked += 1
        if revoked:
            TokenService.announce_revocation(session)
        expires = now + timedelta(hours=SESSION_HOURS)
        token, raw = TokenService().create(
            session, name=account.username, role=account.role, created_by=account.id
        )
        token.expires_at = expires
        session.add(token)
        result = LoginResult(
            token=raw, name=account.username, role=account.role, expires_at=expires
        )
        return result, revoked

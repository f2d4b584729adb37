"""Subscription secrets at rest: Fernet, with keys from settings.

``ORCHESTRATOR_WEBHOOK_KEY`` holds one or more Fernet keys (comma-separated: the first
encrypts, every one decrypts, so a key can be rotated). Unset, the key is derived from
``CROSSCHECK_ADMIN_TOKEN`` with HKDF-SHA256, so ``crosscheck up`` and tests need nothing
more; when both are set the derived key still decrypts (moving to an explicit key loses no
subscription). With neither, subscriptions are refused.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from orchestrator.settings import OrchestratorSettings

_SALT = b"crosscheck-webhooks"
_INFO = b"subscription secrets v1"


def derived_key(admin_token: str) -> bytes:
    """A Fernet key derived from the admin token (HKDF-SHA256, fixed salt and info)."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO).derive(
        admin_token.encode()
    )
    return base64.urlsafe_b64encode(raw)


class SecretBox:
    """Encrypts and decrypts signing keys; never logs or returns them elsewhere."""

    def __init__(self, fernet: MultiFernet) -> None:
        self._fernet = fernet

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> SecretBox | None:
        keys: list[bytes] = []
        if settings.webhook_key is not None:
            keys += [k.strip().encode() for k in settings.webhook_key.get_secret_value().split(",")]
        if settings.admin_token is not None:
            keys.append(derived_key(settings.admin_token.get_secret_value()))
        if not keys:
            return None
        return cls(MultiFernet([Fernet(k) for k in keys]))

    def seal(self, key: bytes) -> str:
        return self._fernet.encrypt(key).decode()

    def open(self, token: str) -> bytes | None:
        """The key, or None when no configured key can decrypt it (the key was changed)."""
        try:
            return self._fernet.decrypt(token.encode())
        except InvalidToken:
            return None

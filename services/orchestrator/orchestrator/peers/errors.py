"""How a peer call failed: worth retrying (environment) or not (the peer said no)."""

from __future__ import annotations

from typing import Any

from shared.errors import UpstreamError, UpstreamUnavailable


class PeerUnavailable(UpstreamUnavailable):
    """Connection refused, timeout, 429 or 5xx: an environment error, retried with backoff."""


class PeerRejected(UpstreamError):
    """The peer answered 4xx: retrying the same request cannot help.

    ``usage`` is what the peer's model calls cost before it gave up (its error body's
    ``usage``), so the run bills failed calls too; ``peer``, ``path`` and ``key`` say which
    call it was."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error: str | None,
        peer: str | None = None,
        path: str | None = None,
        key: str | None = None,
        usage: dict[str, Any] | None = None,
        exchanges: list[dict[str, Any]] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.error = error
        self.peer = peer
        self.path = path
        self.key = key
        self.usage = usage
        self.exchanges = exchanges or []

    def billing(self) -> dict[str, Any] | None:
        """The failed call to bill, as a step argument: None when it spent nothing."""
        if self.usage is None or self.peer is None or self.key is None:
            return None
        stage = (self.path or "").rstrip("/").rsplit("/", 1)[-1] or self.peer
        return {
            "role": self.peer,
            "stage": stage,
            "key": f"{self.key}/failed",
            "usage": self.usage,
            "exchanges": self.exchanges,
        }

"""How a peer call failed: worth retrying (environment) or not (the peer said no)."""

from __future__ import annotations

from shared.errors import UpstreamError, UpstreamUnavailable


class PeerUnavailable(UpstreamUnavailable):
    """Connection refused, timeout, 429 or 5xx: an environment error, retried with backoff."""


class PeerRejected(UpstreamError):
    """The peer answered 4xx: retrying the same request cannot help."""

    def __init__(self, message: str, *, status: int, error: str | None):
        super().__init__(message)
        self.status = status
        self.error = error

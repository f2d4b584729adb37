"""How a call to a platform peer failed: worth retrying (environment) or not (the peer said
no), and what it cost. Whoever calls a peer raises these (the orchestrator's pooled ``Peer``,
the sandbox's typed client); the orchestrator's engine retries the one and stops on the other.
"""

from __future__ import annotations

from typing import Any, Protocol

from shared.errors import UpstreamError, UpstreamUnavailable


class JsonPeer(Protocol):
    """POSTs a JSON body to a peer under an idempotency key and returns its JSON answer.

    A failure raises ``PeerUnavailable`` (unreachable, timed out, 429 or 5xx) or
    ``PeerRejected`` (4xx, or the peer's time ran out); the orchestrator's ``Peer`` is one."""

    async def post(self, path: str, body: dict[str, Any], key: str) -> dict[str, Any]: ...


class _Billed:
    """What a failed peer call spent on models (its error body's ``usage`` and ``exchanges``),
    and which call it was (``peer``, ``path``, ``key``), so the run bills it."""

    peer: str | None
    path: str | None
    key: str | None
    usage: dict[str, Any] | None
    exchanges: list[dict[str, Any]]

    def _bill_of(
        self,
        peer: str | None,
        path: str | None,
        key: str | None,
        usage: dict[str, Any] | None,
        exchanges: list[dict[str, Any]] | None,
    ) -> None:
        self.peer, self.path, self.key = peer, path, key
        self.usage = usage
        self.exchanges = exchanges or []

    def billing(self, attempt: int | None = None) -> dict[str, Any] | None:
        """The failed call to bill, as a step argument: None when it spent nothing.
        ``attempt`` tells apart the failed attempts of one retried call."""
        if self.usage is None or self.peer is None or self.key is None:
            return None
        stage = (self.path or "").rstrip("/").rsplit("/", 1)[-1] or self.peer
        suffix = "/failed" if attempt is None else f"/failed/{attempt}"
        return {
            "role": self.peer,
            "stage": stage,
            "key": f"{self.key}{suffix}",
            "usage": self.usage,
            "exchanges": self.exchanges,
        }


class PeerUnavailable(_Billed, UpstreamUnavailable):
    """Connection refused, timeout, 429 or 5xx: an environment error, retried with backoff.
    ``status`` is the peer's answer (None: it timed out or could not be reached); a peer
    that answered says in ``usage`` what its failed model calls cost."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        peer: str | None = None,
        path: str | None = None,
        key: str | None = None,
        usage: dict[str, Any] | None = None,
        exchanges: list[dict[str, Any]] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self._bill_of(peer, path, key, usage, exchanges)


class PeerRejected(_Billed, UpstreamError):
    """The peer answered 4xx (or ``BudgetExceeded``): retrying the same request cannot help.

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
        self._bill_of(peer, path, key, usage, exchanges)

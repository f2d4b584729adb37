"""What a replay store is: the ``ReplayStore`` protocol and the answers of ``begin``.

A store keeps, per ``Idempotency-Key``, either a *claim* (someone is calling the model for
this key: owner id, body digest, a lease that lapses unless renewed) or a *finished result*
(the body digest and the result's JSON without its ``exchanges``). Every implementation
bounds what it keeps by age (``ttl_s``) and count (``max_entries``, oldest evicted first).
The logic around the store (in-process sharing, heartbeats, polling) lives in ``Replayer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.errors import UpstreamUnavailable

DEFAULT_TTL_S = 6 * 3600.0
DEFAULT_MAX_ENTRIES = 10_000
DEFAULT_LEASE_S = 10.0


@dataclass(frozen=True, slots=True)
class Finished:
    """The key's call finished: replay ``payload`` (the result's JSON, no exchanges)."""

    digest: str
    payload: str


@dataclass(frozen=True, slots=True)
class Busy:
    """Another owner holds a live claim on the key: wait for its result."""

    digest: str
    owner: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """The caller now holds the claim (the key was free, or its last claim lapsed)."""


Begin = Finished | Busy | Claimed


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much a store keeps and for how long, and how long a claim lives unrenewed."""

    max_entries: int = DEFAULT_MAX_ENTRIES
    ttl_s: float = DEFAULT_TTL_S
    lease_s: float = DEFAULT_LEASE_S

    def __post_init__(self) -> None:
        if self.max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if not self.ttl_s > 0 or not self.lease_s > 0:
            raise ValueError("ttl_s and lease_s must be positive")


class ReplayStoreUnavailable(UpstreamUnavailable):
    """The replay store cannot be read or written (Redis down, disk error)."""


class ReplayStore(Protocol):
    """Where finished results and in-flight claims live, keyed by ``Idempotency-Key``."""

    description: str
    """Where the store is, for logs and readiness; never a password."""
    bounds: Bounds

    async def begin(self, key: str, digest: str, owner: str) -> Begin:
        """Atomically: the finished result if any; else a live claim of another owner;
        else take the claim for ``owner`` (with a fresh lease) and answer ``Claimed``."""
        ...

    async def renew(self, key: str, owner: str) -> bool:
        """Extend ``owner``'s lease; False when the claim is no longer theirs."""
        ...

    async def complete(self, key: str, owner: str, digest: str, payload: str) -> None:
        """Store the finished result (unless one is already stored: the first one wins),
        drop ``owner``'s claim, and evict what is past the bounds."""
        ...

    async def release(self, key: str, owner: str) -> None:
        """Drop ``owner``'s claim without a result (the call failed)."""
        ...

    async def check(self) -> str | None:
        """None when the store answers; else why not (for ``/readyz``)."""
        ...

    async def aclose(self) -> None: ...


class UnusableReplayStore:
    """Stands in for a store that could not be built (a malformed ``REDIS_URL``): the
    service starts, ``/readyz`` says why it is not ready, and keyed calls answer 503."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.description = "unusable"
        self.bounds = Bounds()

    async def begin(self, key: str, digest: str, owner: str) -> Begin:
        raise ReplayStoreUnavailable(self.reason)

    async def renew(self, key: str, owner: str) -> bool:
        raise ReplayStoreUnavailable(self.reason)

    async def complete(self, key: str, owner: str, digest: str, payload: str) -> None:
        raise ReplayStoreUnavailable(self.reason)

    async def release(self, key: str, owner: str) -> None:
        raise ReplayStoreUnavailable(self.reason)

    async def check(self) -> str | None:
        return self.reason

    async def aclose(self) -> None:
        return None

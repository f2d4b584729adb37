"""The Critic's profiles, asked from the Critic and kept for a short while, so that a run
naming a profile the Critic does not have is refused when it is created (422) rather than
failing at its first critique."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import httpx

from shared.contracts import TaskKind
from shared.errors import AppError
from shared.logging import get_logger

log = get_logger("crosscheck.orchestrator")
CACHE_S = 30.0


class UnknownProfile(AppError):
    """``policy.profile`` names no profile of the Critic, or one for another task kind."""

    status_code = 422


class ProfileSource(Protocol):
    async def get(self, url: str) -> httpx.Response: ...


class ProfileCatalog:
    """``GET /v1/profiles`` on the Critic, cached for ``CACHE_S`` seconds. When the Critic
    cannot answer, the name is not checked here: the Critic checks it at the critique."""

    def __init__(self, client: ProfileSource, cache_s: float = CACHE_S) -> None:
        self.client = client
        self.cache_s = cache_s
        self._kinds: dict[str, list[str]] | None = None
        self._fetched = 0.0
        self._lock = asyncio.Lock()

    async def kinds(self) -> dict[str, list[str]] | None:
        async with self._lock:
            if self._kinds is not None and time.monotonic() - self._fetched < self.cache_s:
                return self._kinds
            try:
                response = await self.client.get("/v1/profiles")
                response.raise_for_status()
                listed: list[dict[str, Any]] = response.json()
                self._kinds = {str(p["name"]): [str(k) for k in p["kinds"]] for p in listed}
                self._fetched = time.monotonic()
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                log.warning("critic profiles unavailable; not checked", error=type(exc).__name__)
                return self._kinds  # the last list known, if any
            return self._kinds

    async def require(self, name: str, kind: TaskKind) -> None:
        known = await self.kinds()
        if known is None:
            return
        if name not in known:
            raise UnknownProfile(
                f"policy.profile: the critic has no profile {name!r}; known: "
                + ", ".join(sorted(known))
            )
        if kind.value not in known[name]:
            raise UnknownProfile(
                f"policy.profile: {name!r} judges {', '.join(known[name])} tasks, not {kind.value}"
            )

"""The Critic's profiles, asked from the Critic and kept for a short while, so that a run
naming a profile the Critic does not have is refused when it is created (422) rather than
failing at its first critique, and so that the depth its critiques default to is known then
(it decides whether the run researches)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from orchestrator.knowledge.service import profile_for
from shared.contracts import Depth, TaskKind
from shared.errors import AppError
from shared.logging import get_logger
from shared.orchestration import Policy

log = get_logger("crosscheck.orchestrator")
CACHE_S = 30.0
ASK_TIMEOUT_S = 5.0  # a run's creation waits this long at most for the list
RETRY_S = 5.0  # after a failure, the list is not asked again for this long
CONCRETE = (Depth.L1, Depth.L2, Depth.L3)
# as the Critic's DepthTable.AUTO_BY_RISK: `auto` without a latency budget
AUTO_BY_RISK = {"low": Depth.L1, "medium": Depth.L2, "high": Depth.L3}


@dataclass(frozen=True)
class CriticProfile:
    """What the orchestrator keeps of one profile of ``GET /v1/profiles``."""

    kinds: tuple[str, ...]
    risk: str | None = None
    default_depth: Depth | None = None


def _parse(item: dict[str, Any]) -> CriticProfile:
    """One listed profile; a risk or depth this orchestrator does not know is left unknown
    (the run falls back to ``policy.depth``) rather than failing the whole list."""
    depth = str(item.get("default_depth"))
    return CriticProfile(
        kinds=tuple(str(k) for k in item["kinds"]),
        risk=str(item["risk"]) if item.get("risk") is not None else None,
        default_depth=Depth(depth) if depth in {d.value for d in Depth} else None,
    )


class UnknownProfile(AppError):
    """``policy.profile`` names no profile of the Critic, or one for another task kind."""

    status_code = 422


class ProfileSource(Protocol):
    async def get(self, url: str, *, timeout: float) -> httpx.Response: ...


class ProfileCatalog:
    """``GET /v1/profiles`` on the Critic, cached for ``CACHE_S`` seconds. When the Critic
    cannot answer, the name is not checked here: the Critic checks it at the critique."""

    def __init__(
        self,
        client: ProfileSource,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.cache_s = cache_s
        self.clock = clock
        self._profiles: dict[str, CriticProfile] | None = None
        self._fetched = 0.0
        self._failed = float("-inf")
        self._lock = asyncio.Lock()

    async def profiles(self) -> dict[str, CriticProfile] | None:
        async with self._lock:
            now = self.clock()
            if self._profiles is not None and now - self._fetched < self.cache_s:
                return self._profiles
            if now - self._failed < RETRY_S:
                return self._profiles  # the Critic failed a moment ago: not asked again yet
            try:
                response = await self.client.get("/v1/profiles", timeout=ASK_TIMEOUT_S)
                response.raise_for_status()
                listed: list[dict[str, Any]] = response.json()
                self._profiles = {str(p["name"]): _parse(p) for p in listed}
                self._fetched = self.clock()
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                self._failed = self.clock()
                log.warning("critic profiles unavailable; not checked", error=type(exc).__name__)
                return self._profiles  # the last list known, if any
            return self._profiles

    async def require(self, name: str, kind: TaskKind) -> None:
        known = await self.profiles()
        if known is None:
            return
        if name not in known:
            raise UnknownProfile(
                f"policy.profile: the critic has no profile {name!r}; known: "
                + ", ".join(sorted(known))
            )
        kinds = known[name].kinds
        if kind.value not in kinds:
            raise UnknownProfile(
                f"policy.profile: {name!r} judges {', '.join(kinds)} tasks, not {kind.value}"
            )

    async def effective_depth(self, policy: Policy, kind: TaskKind) -> Depth | None:
        """The depth a run's critiques default to: ``policy.depth`` when concrete, else the
        profile's ``default_depth``; ``auto`` by the profile's risk, as the Critic resolves it
        (a ``latency_budget_s`` may step the Critic down further; the risk alone decides
        here). None when the Critic's list is unavailable or does not say."""
        if policy.depth in CONCRETE:
            return policy.depth
        name = profile_for(policy.profile, kind)
        known = await self.profiles()
        profile = known.get(name) if known is not None else None
        requested = policy.depth or (profile.default_depth if profile else None)
        if requested is Depth.auto and profile is not None:
            requested = AUTO_BY_RISK.get(profile.risk or "")
        if requested is None or requested is Depth.auto:
            log.warning(
                "critique depth unknown at run creation; research follows policy.depth only",
                profile=name,
                reason="critic profiles unavailable"
                if known is None
                else "profile not listed"
                if profile is None
                else "profile lists no usable risk or default depth",
            )
            return None
        return requested

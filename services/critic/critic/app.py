"""The Critic's FastAPI app: ``create_app(settings)``; the provider is built in ``lifespan``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from fastapi import Depends, FastAPI

from critic.deps import CriticDep
from critic.profiles import Profile, ProfileBook
from critic.service import CriticService, DepthPlan, DepthTable
from critic.settings import CriticSettings
from shared.auth import require_service_token
from shared.contracts import CritiqueRequest, CritiqueResult, Depth, ServiceInfo
from shared.idempotency import (
    IdempotencyKey,
    ReplayerDep,
    body_digest,
    replay_ready,
    replay_store,
)
from shared.logging import get_logger
from shared.providers import build_provider
from shared.providers.defaults import model_for
from shared.replay.journal import journal_for
from shared.service import build_service_app

log = get_logger("crosscheck.critic")


def create_app(
    settings: CriticSettings, *, http_client: httpx2.AsyncClient | None = None
) -> FastAPI:
    """Build the Critic. ``http_client`` lets tests route the SDK to an in-process fake."""
    provider_kind = settings.critic_provider
    warning = settings.check_provider_split()
    model = model_for(provider_kind, settings.model, demo=settings.demo)
    profiles = ProfileBook.load(settings.profiles_dir)  # a bad file stops the start here
    depths = DepthTable(
        {
            Depth.L1: DepthPlan(Depth.L1, settings.l1_max_tokens, settings.l1_budget_s),
            Depth.L2: DepthPlan(Depth.L2, settings.l2_max_tokens, settings.l2_budget_s),
            Depth.L3: DepthPlan(Depth.L3, settings.l3_max_tokens, settings.l3_budget_s),
        }
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if warning:
            log.warning(warning)
        async with replay_store(app, settings, "critic"):
            provider = build_provider(provider_kind, settings, http_client=http_client)
            try:
                app.state.critic = CriticService(
                    provider,
                    model=model,
                    temperature=settings.temperature,
                    max_tokens=settings.max_output_tokens,
                    profiles=profiles,
                    depths=depths,
                )
                log.info("critic ready", provider=provider_kind.value, model=model)
                yield
            finally:
                await provider.aclose()

    def info() -> ServiceInfo:
        return ServiceInfo(
            service="critic",
            role="critic",
            version="0.1.0",
            provider=provider_kind.value,
            models={"critique": model},
            demo=settings.demo,
        )

    async def ready() -> str | None:
        return await replay_ready(app)

    app = build_service_app(
        title="Crosscheck Critic", info=info, lifespan=lifespan, ready=ready, settings=settings
    )
    auth = [Depends(require_service_token(settings.service_token.get_secret_value()))]

    @app.post("/v1/critique", response_model=CritiqueResult, dependencies=auth, tags=["critic"])
    async def critique(
        body: CritiqueRequest,
        critic: CriticDep,
        replays: ReplayerDep,
        idempotency_key: IdempotencyKey = None,
    ) -> CritiqueResult:
        """Judge an output; the verdict is a structured field, never parsed from prose."""
        journal = journal_for(replays.store, idempotency_key, replays.owner, critic.provider)
        return await replays.run(
            idempotency_key,
            body_digest(body),
            lambda: critic.critique(body, journal),
            CritiqueResult,
        )

    @app.get("/v1/profiles", response_model=list[Profile], dependencies=auth, tags=["critic"])
    async def list_profiles() -> list[Profile]:
        """Every critic profile: persona, rubric dimensions, the five riskiest error types,
        risk level and default depth. A run picks one with ``policy.profile``."""
        return profiles.listed()

    return app

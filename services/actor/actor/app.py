"""The Actor's FastAPI app: ``create_app(settings)``; the provider is built in ``lifespan``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from fastapi import Depends, FastAPI

from actor.deps import ActorDep
from actor.service import ActorService
from actor.settings import ActorSettings
from shared.auth import require_service_token
from shared.contracts import ActorResult, DraftRequest, ReviseRequest, ServiceInfo
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

log = get_logger("crosscheck.actor")


def create_app(
    settings: ActorSettings, *, http_client: httpx2.AsyncClient | None = None
) -> FastAPI:
    """Build the Actor. ``http_client`` lets tests route the SDK to an in-process fake."""
    provider_kind = settings.actor_provider
    warning = settings.check_provider_split()
    draft_model = model_for(provider_kind, settings.draft_model, demo=settings.demo)
    revise_model = model_for(provider_kind, settings.revise_model, demo=settings.demo)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if warning:
            log.warning(warning)
        async with replay_store(app, settings, "actor"):
            provider = build_provider(provider_kind, settings, http_client=http_client)
            try:
                app.state.actor = ActorService(
                    provider,
                    draft_model=draft_model,
                    revise_model=revise_model,
                    draft_temperature=settings.draft_temperature,
                    revise_temperature=settings.revise_temperature,
                    max_tokens=settings.max_output_tokens,
                )
                log.info("actor ready", provider=provider_kind.value, draft_model=draft_model)
                yield
            finally:
                await provider.aclose()

    def info() -> ServiceInfo:
        return ServiceInfo(
            service="actor",
            role="actor",
            version="0.1.0",
            provider=provider_kind.value,
            models={"draft": draft_model, "revise": revise_model},
            demo=settings.demo,
        )

    async def ready() -> str | None:
        return await replay_ready(app)

    app = build_service_app(
        title="Crosscheck Actor", info=info, lifespan=lifespan, ready=ready, settings=settings
    )
    auth = [Depends(require_service_token(settings.service_token.get_secret_value()))]

    @app.post("/v1/draft", response_model=ActorResult, dependencies=auth, tags=["actor"])
    async def draft(
        body: DraftRequest,
        actor: ActorDep,
        replays: ReplayerDep,
        idempotency_key: IdempotencyKey = None,
    ) -> ActorResult:
        """Write the first version of an answer to the task."""
        journal = journal_for(replays.store, idempotency_key, replays.owner, actor.provider)
        return await replays.run(
            idempotency_key, body_digest(body), lambda: actor.draft(body, journal), ActorResult
        )

    @app.post("/v1/revise", response_model=ActorResult, dependencies=auth, tags=["actor"])
    async def revise(
        body: ReviseRequest,
        actor: ActorDep,
        replays: ReplayerDep,
        idempotency_key: IdempotencyKey = None,
    ) -> ActorResult:
        """Revise the previous output; human reflections are binding and come first."""
        journal = journal_for(replays.store, idempotency_key, replays.owner, actor.provider)
        return await replays.run(
            idempotency_key, body_digest(body), lambda: actor.revise(body, journal), ActorResult
        )

    return app

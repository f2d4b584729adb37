"""The Research service's FastAPI app: ``create_app(settings)``; backend, cache and
provider are built in ``lifespan``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated

import httpx
import httpx2
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from research.backends import build_backend
from research.cache import Clock, RedisCache, ResultCache, SqliteCache
from research.distill import Distiller
from research.service import ResearchMetrics, ResearchService
from research.settings import ResearchSettings
from shared.auth import require_service_token
from shared.contracts import ResearchRequest, ResearchResult, ServiceInfo
from shared.errors import ConfigurationError
from shared.logging import get_logger
from shared.providers import build_provider
from shared.providers.defaults import model_for
from shared.service import build_service_app

log = get_logger("crosscheck.research")


def get_research(request: Request) -> ResearchService:
    service = getattr(request.app.state, "research", None)
    if not isinstance(service, ResearchService):
        raise ConfigurationError("the research service is not started")
    return service


ResearchDep = Annotated[ResearchService, Depends(get_research)]


def create_app(
    settings: ResearchSettings,
    *,
    http_client: httpx2.AsyncClient | None = None,
    search_client: httpx.AsyncClient | None = None,
    clock: Clock = time.time,
) -> FastAPI:
    """Build the service. ``http_client`` routes the model SDK and ``search_client`` the web
    backends to in-process fakes in tests; ``clock`` drives the cache's lifetimes."""
    model = (
        model_for(settings.provider, settings.model, demo=settings.demo)
        if settings.distill
        else None
    )
    metrics = ResearchMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            backend = build_backend(settings, http_client=search_client)
            stack.push_async_callback(backend.aclose)
            cache: ResultCache | None = None
            if settings.cache:
                cache = (
                    RedisCache(settings.redis_url.get_secret_value(), clock)
                    if settings.redis_url is not None
                    else SqliteCache(settings.cache_db, clock)
                )
                stack.push_async_callback(cache.aclose)
            distiller = None
            if model is not None:
                provider = build_provider(settings.provider, settings, http_client=http_client)
                stack.push_async_callback(provider.aclose)
                distiller = Distiller(provider, model=model, max_tokens=settings.distill_max_tokens)
            app.state.research = ResearchService(
                settings, backend, cache, distiller, clock=clock, metrics=metrics
            )
            log.info(
                "research ready",
                backend=backend.name,
                cache=("redis" if settings.redis_url else "sqlite") if cache else "off",
                distill=model or "off",
            )
            yield

    def info() -> ServiceInfo:
        return ServiceInfo(
            service="research",
            role="research",
            version="0.1.0",
            provider=settings.provider.value if model else None,
            models={"distill": model} if model else {},
            demo=settings.demo,
        )

    async def ready() -> str | None:
        service = getattr(app.state, "research", None)
        if not isinstance(service, ResearchService):
            return "the research service is not started"
        problem = await service.backend.ready()
        if problem is None and service.cache is not None:
            problem = await service.cache.ready()
        return problem

    app = build_service_app(title="Crosscheck Research", info=info, lifespan=lifespan, ready=ready)
    auth = [Depends(require_service_token(settings.service_token.get_secret_value()))]

    @app.post(
        "/v1/research",
        response_model=ResearchResult,
        dependencies=auth,
        tags=["research"],
        responses={422: {"description": "no query passed the quality gate"}},
    )
    async def research(body: ResearchRequest, service: ResearchDep) -> ResearchResult:
        """Evidence for the queries: numbered sources with their URL, snippet and distilled
        claims; refused and failed queries with their reason (``status: degraded`` when a
        backend failed or ran over its budget)."""
        return await service.research(body)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def prometheus_metrics() -> Response:
        """Prometheus exposition: cache hits and misses, failed queries, request duration."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

"""The Research service's FastAPI app: ``create_app(settings)``; backend, cache and
provider are built in ``lifespan``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated

import httpx
import httpx2
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from research.backends import CorpusBackend, build_backend
from research.cache import Clock, RedisCache, ResultCache, SqliteCache
from research.distill import Distiller
from research.library import MAX_FILENAME_CHARS, MAX_URL_CHARS, Library
from research.service import ResearchMetrics, ResearchService
from research.settings import ResearchSettings
from shared.auth import require_service_token
from shared.contracts import MAX_BODY_BYTES, ResearchRequest, ResearchResult, ServiceInfo
from shared.errors import ConfigurationError, Conflict
from shared.logging import get_logger
from shared.providers import build_provider
from shared.providers.defaults import model_for
from shared.research_client import CorpusListing, CorpusSummary, DocumentAdded
from shared.service import build_service_app

log = get_logger("crosscheck.research")


def get_research(request: Request) -> ResearchService:
    service = getattr(request.app.state, "research", None)
    if not isinstance(service, ResearchService):
        raise ConfigurationError("the research service is not started")
    return service


ResearchDep = Annotated[ResearchService, Depends(get_research)]


def get_library(request: Request) -> Library:
    research = get_research(request)
    library = getattr(request.app.state, "library", None)
    if not isinstance(library, Library):
        raise Conflict(
            f"this Research service searches {research.backend.name}, not a local corpus "
            "(RESEARCH_BACKEND): there is no corpus to manage"
        )
    return library


LibraryDep = Annotated[Library, Depends(get_library)]
DocumentUrl = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_URL_CHARS,
        description="The document's stable URL: where it was fetched from, or file://PATH.",
    ),
]


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
            app.state.library = (
                Library(backend.index, max_bytes=settings.corpus_max_bytes)
                if isinstance(backend, CorpusBackend)
                else None
            )
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

    app = build_service_app(
        title="Crosscheck Research",
        info=info,
        lifespan=lifespan,
        ready=ready,
        body_limit=max(MAX_BODY_BYTES, settings.corpus_max_bytes),  # an upload is the file
        settings=settings,
    )
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

    @app.get("/v1/corpus", response_model=CorpusSummary, dependencies=auth, tags=["corpus"])
    async def corpus_summary(library: LibraryDep) -> CorpusSummary:
        """Where the corpus lives, how many documents it holds, the formats it reads."""
        return await library.summary()

    @app.get(
        "/v1/corpus/documents", response_model=CorpusListing, dependencies=auth, tags=["corpus"]
    )
    async def corpus_documents(library: LibraryDep) -> CorpusListing:
        """Every document of the corpus: URL, title, format, size, passages."""
        return await library.listing()

    @app.post(
        "/v1/corpus/documents",
        response_model=DocumentAdded,
        status_code=201,
        dependencies=auth,
        tags=["corpus"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/octet-stream": {"schema": {"format": "binary"}}},
            }
        },
        responses={
            400: {"description": "a format the corpus does not read, or no text in the file"},
            413: {"description": "the file is over RESEARCH_CORPUS_MAX_BYTES"},
        },
    )
    async def add_document(
        request: Request,
        library: LibraryDep,
        url: DocumentUrl,
        filename: Annotated[
            str,
            Query(
                min_length=1,
                max_length=MAX_FILENAME_CHARS,
                description="The file's name: its suffix says the format (.md, .pdf ...).",
            ),
        ],
    ) -> DocumentAdded:
        """Index one file (the request body), replacing the document with the same URL."""
        return await library.add(await request.body(), filename=filename, url=url)

    @app.delete(
        "/v1/corpus/documents",
        status_code=204,
        dependencies=auth,
        tags=["corpus"],
        responses={404: {"description": "no document with this URL"}},
    )
    async def remove_document(library: LibraryDep, url: DocumentUrl) -> Response:
        """Remove the document with this URL and its passages."""
        await library.remove(url)
        return Response(status_code=204)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def prometheus_metrics() -> Response:
        """Prometheus exposition: cache hits and misses, failed queries, request duration."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

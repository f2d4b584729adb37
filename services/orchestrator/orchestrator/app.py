"""The Orchestrator's FastAPI app: ``create_app(settings)``; DBOS is launched in ``lifespan``."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from dbos import DBOS, DBOSConfig
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.auth.router import accounts_router
from orchestrator.auth.router import router as tokens_router
from orchestrator.auth.service import TOKENS_CHANNEL, PrincipalCache, TokenService
from orchestrator.auth.throttle import LoginThrottle, TooManyRequests
from orchestrator.cluster.replicas import Cluster, connection_kwargs
from orchestrator.cluster.router import router as cluster_router
from orchestrator.datasets.router import router as datasets_router
from orchestrator.db import (
    Database,
    create_db_engine,
    lock_startup,
    migrate,
    private_sqlite_file,
    session_scope,
    system_database_url,
)
from orchestrator.deps import authenticate
from orchestrator.engine import runtime, settled
from orchestrator.engine.launch import start_orphans
from orchestrator.engine.research import BudgetedResearch
from orchestrator.evaluations.router import router as evaluations_router
from orchestrator.evaluations.service import latest_intercept_rate
from orchestrator.evaluators.base import Evaluator, JsonSchemaEvaluator, PythonTestsEvaluator
from orchestrator.evaluators.pool import SchemaPool
from orchestrator.events.hub import EventHub
from orchestrator.events.listener import EventListener
from orchestrator.events.router import router as events_router
from orchestrator.knowledge.profiles import ProfileCatalog
from orchestrator.knowledge.router import router as knowledge_router
from orchestrator.knowledge.service import knowledge_from_settings
from orchestrator.metrics import Metrics
from orchestrator.peers.http import (
    HttpActor,
    HttpCritic,
    Peer,
    peer_clients,
    tls_context,
)
from orchestrator.reviews.expiry import ExpirySweeper
from orchestrator.reviews.router import lessons_router
from orchestrator.reviews.router import router as reviews_router
from orchestrator.runs.router import router as runs_router
from orchestrator.settings import OrchestratorSettings
from orchestrator.stats.router import router as stats_router
from orchestrator.tables import utcnow
from orchestrator.webhooks import outbox
from orchestrator.webhooks.router import router as webhooks_router
from orchestrator.webhooks.secrets import SecretBox
from orchestrator.webhooks.targets import Resolver, SystemResolver, TargetGuard
from orchestrator.webhooks.worker import DeliveryWorker
from shared.contracts import ServiceInfo
from shared.errors import AppError, error_body
from shared.logging import get_logger
from shared.research_client import ResearchClient
from shared.sandbox.client import SandboxClient
from shared.service import build_service_app

log = get_logger("crosscheck.orchestrator")


class TokenGate:
    """Pure ASGI middleware: the given paths (and what is below them) need a valid bearer
    token of any role; everything else passes untouched."""

    def __init__(self, app: ASGIApp, *, paths: tuple[str, ...], db: Database) -> None:
        self.app = app
        self.paths = paths
        self.db = db

    def _gated(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._gated(scope["path"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            await self.db.read(lambda session: authenticate(request, session))
        except AppError as exc:
            response = JSONResponse(
                error_body(type(exc).__name__, exc.detail), status_code=exc.status_code
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def tokens_revoked(principals: PrincipalCache, hub: EventHub) -> None:
    """Another replica (or this one) revoked tokens: forget cached principals and make every
    open websocket check its token."""
    principals.clear()
    hub.tokens_changed()


def create_app(
    settings: OrchestratorSettings,
    *,
    peer_transports: dict[str, httpx.AsyncBaseTransport] | None = None,
    webhook_resolver: Resolver | None = None,
    webhook_transport: httpx.AsyncBaseTransport | None = None,
) -> FastAPI:
    """Build the Orchestrator. ``peer_transports`` lets tests reach peers in-process;
    ``webhook_resolver`` replaces the system resolver webhook targets are checked with, and
    ``webhook_transport`` the network deliveries are sent over."""
    metrics = Metrics()
    knowledge = knowledge_from_settings(settings)
    hub = EventHub(safety_poll_s=settings.events_safety_poll_s)
    engine = create_db_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
    )
    db = Database(engine)
    metrics.read_intercept_rate(lambda: latest_intercept_rate(engine))
    webhook_box = SecretBox.from_settings(settings)
    webhook_guard = TargetGuard(
        settings.webhook_allow_list,
        webhook_resolver or SystemResolver(),
        timeout_s=settings.webhook_resolve_timeout_s,
    )
    # SQLite: one process, as always. Postgres: replicas with heartbeats, a leader, failover,
    # and LISTEN/NOTIFY so every replica's websockets see every replica's events at once.
    cluster = None if engine.dialect.name == "sqlite" else Cluster(settings)
    # Postgres: the cache is trusted only while this replica hears revocations (LISTEN).
    principals = PrincipalCache(trusted=None if cluster is None else (lambda: hub.listening))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        hub.bind(asyncio.get_running_loop())
        if settings.run_migrations:
            migrate(engine)
        if settings.admin_token is not None:
            with session_scope(engine) as session:
                lock_startup(session)
                TokenService().bootstrap_admin(session, settings.admin_token.get_secret_value())
        if settings.knowledge_dir is not None:
            with session_scope(engine) as session:
                lock_startup(session)
                loaded = knowledge.load_packs(session, settings.knowledge_dir)
            log.info("knowledge packs loaded", entries=loaded)
        if cluster is not None:
            # First, and before DBOS launches and recovers this executor id's pending
            # workflows: claim the id, so no other live process uses it and the leader leaves
            # this replica's work alone.
            await cluster.join()
        token = settings.service_token.get_secret_value()
        schema_pool = SchemaPool(settings.schema_pool())
        app.state.schema_pool = schema_pool
        peers: dict[str, Peer] = {}
        for name, url in (
            ("actor", settings.actor_url),
            ("critic", settings.critic_url),
            ("sandbox", settings.sandbox_url),
        ):
            transport = (peer_transports or {}).get(name)
            peers[name] = Peer(name, peer_clients(url, token, settings.peer_timeout_s, transport))
        app.state.profiles = ProfileCatalog(peers["critic"].clients[0])
        # research: one client, its requests bounded by the step's own budget
        research_http: httpx.AsyncClient | None = None
        research_peer: BudgetedResearch | None = None
        if settings.research_url:
            research_http = httpx.AsyncClient(
                transport=(peer_transports or {}).get("research"),
                verify=tls_context(),
                timeout=httpx.Timeout(settings.research_budget_s, connect=5.0),
            )
            research_peer = BudgetedResearch(
                ResearchClient(settings.research_url, token, client=research_http),
                settings.research_budget_s,
            )
        evaluators: dict[str, Evaluator] = {
            "python_tests": PythonTestsEvaluator(SandboxClient(peers["sandbox"])),
            "json_schema": JsonSchemaEvaluator(schema_pool),
        }
        runtime.install(
            runtime.Runtime(
                settings=settings,
                db=db,
                actor=HttpActor(peers["actor"]),
                critic=HttpCritic(peers["critic"]),
                evaluators=evaluators,
                hub=hub,
                metrics=metrics,
                knowledge=knowledge,
                research=research_peer,
            )
        )
        # Webhooks: the outbox wakes this process's delivery worker after each commit that
        # queued deliveries; the worker polls for the rest (other replicas, retries).
        worker = DeliveryWorker(
            settings, db, webhook_box, webhook_guard, transport=webhook_transport
        )
        outbox.install(
            engine,
            callbacks=settings.webhook_secret is not None,
            wake=worker.wake,
            channels=len(settings.notify_channel_urls),
            notify_events=settings.notify_event_set,
        )
        settled.install(engine, metrics)
        listener: asyncio.Task[None] | None = None
        if cluster is not None:
            conninfo, connect_kwargs = connection_kwargs(
                settings.database_url, settings.replica_timeout_s
            )
            events = EventListener(
                conninfo,
                hub,
                connect_kwargs={**connect_kwargs, "application_name": "crosscheck-events"},
                channels={TOKENS_CHANNEL: lambda: tokens_revoked(principals, hub)},
            )
            listener = asyncio.create_task(events.run_forever(), name="event-listener")
            try:
                await asyncio.wait_for(events.connected.wait(), timeout=settings.replica_timeout_s)
            except TimeoutError:
                log.warning("event listener not connected yet; websockets poll meanwhile")
        config: DBOSConfig = {
            "name": "crosscheck",
            "system_database_url": system_database_url(settings.database_url),
            "application_version": settings.application_version,
            "executor_id": settings.executor_id,
            "log_level": "WARNING",
            "max_executor_threads": settings.executor_threads,
            "notification_listener_polling_interval_sec": settings.dbos_poll_s,
        }
        if cluster is not None:
            config["sys_db_pool_size"] = settings.system_db_pool_size
        else:  # SQLite: a file connection cannot go stale; DBOS's pre-ping is a wasted query
            config["db_engine_kwargs"] = {"pool_pre_ping": False}
        private_sqlite_file(config["system_database_url"] or "")
        # DBOS is one instance per process. One left behind by an app whose shutdown never
        # ran (an interrupted lifespan) would otherwise be reused, with its own database.
        DBOS.destroy(workflow_completion_timeout_sec=0)
        DBOS(config=config)
        DBOS.launch()
        if cluster is not None:
            cluster.start()
        started = await start_orphans(engine)
        sweep = ExpirySweeper(
            db,
            hub,
            settings.review_sweep_s,
            active=None if cluster is None else (lambda: cluster.is_leader),
        )
        sweeper = asyncio.create_task(sweep.run_forever())
        deliveries = asyncio.create_task(worker.run_forever(), name="webhook-deliveries")
        log.info(
            "orchestrator ready",
            database=engine.dialect.name,
            executor_id=settings.executor_id,
            orphans_started=started,
        )
        try:
            yield
        finally:
            deliveries.cancel()
            await asyncio.gather(deliveries, return_exceptions=True)
            await worker.aclose()
            outbox.uninstall(engine)
            settled.uninstall(engine)
            sweeper.cancel()
            if listener is not None:
                listener.cancel()
            DBOS.destroy(workflow_completion_timeout_sec=0)
            if cluster is not None:
                await cluster.leave()
            runtime.install(None)
            for peer in peers.values():
                await peer.aclose()
            if research_http is not None:
                await research_http.aclose()
            schema_pool.close()
            await knowledge.aclose()
            db.close()

    async def ready() -> str | None:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            return f"database unreachable: {type(exc).__name__}"
        return None

    def info() -> ServiceInfo:
        return ServiceInfo(
            service="orchestrator",
            role="orchestrator",
            version="0.1.0",
            demo=settings.models == "demo",
            model_mode=settings.models,
        )

    app = build_service_app(
        title="Crosscheck Orchestrator",
        info=info,
        lifespan=lifespan,
        ready=ready,
        honours_deadline=False,  # it sets the deadlines: one per step, not per API call
        settings=settings,
    )
    app.state.engine = engine

    async def too_many(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, TooManyRequests)
        return JSONResponse(
            error_body(type(exc).__name__, exc.detail),
            status_code=exc.status_code,
            headers={"Retry-After": str(exc.retry_after)},
        )

    app.add_exception_handler(TooManyRequests, too_many)
    app.state.settings = settings
    app.state.started_at = utcnow()
    app.state.hostname = socket.gethostname()
    app.state.pid = os.getpid()
    app.state.db = db
    app.state.principals = principals
    app.state.login_throttle = LoginThrottle()
    app.state.knowledge = knowledge
    app.state.hub = hub
    app.state.metrics = metrics
    app.state.webhook_box = webhook_box
    app.state.webhook_guard = webhook_guard
    app.include_router(runs_router)
    app.include_router(reviews_router)
    app.include_router(lessons_router)
    app.include_router(events_router)
    app.include_router(tokens_router)
    app.include_router(accounts_router)
    app.include_router(stats_router)
    app.include_router(datasets_router)
    app.include_router(cluster_router)
    app.include_router(webhooks_router)
    app.include_router(knowledge_router)
    app.include_router(evaluations_router)

    protected = (("/metrics",) if settings.metrics_auth else ()) + (
        ("/docs", "/redoc", "/openapi.json") if settings.docs_auth else ()
    )
    if protected:
        app.add_middleware(TokenGate, paths=protected, db=db)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def prometheus_metrics() -> Response:
        """Prometheus exposition of runs, rounds, calls, tokens, cost, latency, adoption."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app

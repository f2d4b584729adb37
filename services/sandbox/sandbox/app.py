"""The sandbox's FastAPI app: ``create_app(settings)``; ``lifespan`` owns the warm pool.

Start-up plans the isolation, starts the sandboxes and runs the self-test; any failure
there raises, so the service never serves without the isolation it reports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from sandbox.executor import CodeExecutor
from sandbox.router import router
from sandbox.service import SandboxService
from sandbox.settings import SandboxSettings
from shared.auth import require_service_token
from shared.contracts import ServiceInfo
from shared.service import build_service_app

VERSION = "0.1.0"


def create_app(settings: SandboxSettings, *, executor: CodeExecutor | None = None) -> FastAPI:
    """Build the sandbox. ``executor`` replaces the real pool (e.g. a ``FakeExecutor``)."""
    service: SandboxService | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal service
        if executor is not None:
            app.state.executor = executor
            yield
            return
        service = await SandboxService.start(settings)
        app.state.executor = service
        try:
            yield
        finally:
            app.state.executor = None
            await service.close()
            service = None

    async def ready() -> str | None:
        if executor is not None:
            return None
        if service is None:
            return "the sandbox is not started"
        return service.problem()

    def info() -> ServiceInfo:
        return ServiceInfo(service="sandbox", role="evaluator", version=VERSION)

    app = build_service_app(
        title="Crosscheck Sandbox",
        info=info,
        lifespan=lifespan,
        ready=ready,
        body_limit=settings.max_body_bytes,
        version=VERSION,
        settings=settings,
    )
    auth = [Depends(require_service_token(settings.service_token.get_secret_value()))]
    app.include_router(router, dependencies=auth)
    return app

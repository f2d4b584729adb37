"""Run an ASGI app in-process with its lifespan, and talk to it over httpx."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
from fastapi import FastAPI
from starlette.types import ASGIApp

SHUTDOWN_S = 60.0  # an app's shutdown takes well under a second; past this it is stuck


def pending_tasks() -> str:
    """Every task of the running loop with where it waits: what a stuck shutdown awaits."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            task.print_stack(limit=8, file=out)
    return out.getvalue()


@asynccontextmanager
async def serving(app: FastAPI, token: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    stack = AsyncExitStack()
    await stack.enter_async_context(app.router.lifespan_context(app))
    try:
        transport = httpx.ASGITransport(app=app)
        client = await stack.enter_async_context(
            httpx.AsyncClient(
                transport=transport, base_url="http://service", headers=headers, timeout=30
            )
        )
        yield client
    finally:
        # A shutdown that hangs would otherwise hold the test until pytest-timeout and
        # leave no trace of what it waited for: say which tasks were pending.
        closing = asyncio.ensure_future(stack.aclose())
        done, _ = await asyncio.wait({closing}, timeout=SHUTDOWN_S)
        if not done:
            stuck = pending_tasks()
            closing.cancel()
            raise AssertionError(f"the app did not shut down in {SHUTDOWN_S:g} s:\n{stuck}")
        closing.result()


@asynccontextmanager
async def uvicorn_serving(app: FastAPI | ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port, on the test's own event loop."""
    import asyncio

    import uvicorn

    from tests.support.servers import free_port

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task

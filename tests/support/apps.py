"""Run an ASGI app in-process with its lifespan, and talk to it over httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI


@asynccontextmanager
async def serving(app: FastAPI, token: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://service", headers=headers, timeout=30
        ) as client:
            yield client


@asynccontextmanager
async def uvicorn_serving(app: FastAPI) -> AsyncIterator[str]:
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

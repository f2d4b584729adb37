"""Wire-compatible fakes of the web search APIs, served over real HTTP by uvicorn.

* Tavily: ``POST /search`` with ``Authorization: Bearer <key>``, JSON ``{query,
  max_results}`` -> ``{"results": [{title, url, content, score}]}``;
* Brave: ``GET /res/v1/web/search?q=&count=`` with ``X-Subscription-Token`` ->
  ``{"web": {"results": [{title, url, description}]}}``;
* SearXNG: ``GET /search?q=&format=json`` -> ``{"results": [{title, url, content}]}``.

Each result is built from the query, so a test can see which query found what. ``down``
makes every call answer 503, ``delay_s`` holds each answer, ``requests`` logs what came in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

TAVILY_KEY = "tvly-TESTKEY-abcdefghijklmnop"
BRAVE_KEY = "BSA-TESTKEY-abcdefghijklmnop"


@dataclass
class FakeSearchState:
    down: bool = False
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)


def results(query: str, n: int) -> list[dict[str, str]]:
    slug = "-".join(query.lower().split())
    return [
        {
            "title": f"Result {i} for {query}",
            "url": f"https://example.org/{slug}/{i}",
            "text": f"{query} is described on page {i}. Unrelated filler sentence.",
        }
        for i in range(1, n + 1)
    ]


def create_fake_search() -> tuple[FastAPI, FakeSearchState]:
    app = FastAPI()
    state = FakeSearchState()

    async def gate(request: Request) -> JSONResponse | None:
        state.requests.append(
            {"path": request.url.path, "headers": dict(request.headers), "query": request.url.query}
        )
        if state.delay_s:
            await asyncio.sleep(state.delay_s)
        if state.down:
            return JSONResponse({"error": "unavailable"}, status_code=503)
        return None

    @app.post("/search")
    async def tavily(request: Request) -> Any:
        refused = await gate(request)
        if refused is not None:
            return refused
        if request.headers.get("authorization") != f"Bearer {TAVILY_KEY}":
            return JSONResponse({"detail": {"error": "Unauthorized"}}, status_code=401)
        body = await request.json()
        found = results(body["query"], int(body.get("max_results", 5)))
        return {
            "query": body["query"],
            "results": [
                {"title": r["title"], "url": r["url"], "content": r["text"], "score": 0.9}
                for r in found
            ],
        }

    @app.get("/res/v1/web/search")
    async def brave(request: Request, q: str, count: int = 20) -> Any:
        refused = await gate(request)
        if refused is not None:
            return refused
        if request.headers.get("x-subscription-token") != BRAVE_KEY:
            return JSONResponse({"type": "ErrorResponse"}, status_code=401)
        found = results(q, count)
        return {
            "type": "search",
            "web": {
                "type": "search",
                "results": [
                    {"title": r["title"], "url": r["url"], "description": r["text"]} for r in found
                ],
            },
        }

    @app.get("/search")
    async def searxng(request: Request, q: str, format: str = "html") -> Any:
        refused = await gate(request)
        if refused is not None:
            return refused
        if format != "json":
            return JSONResponse({"error": "format"}, status_code=403)
        found = results(q, 8)
        return {
            "query": q,
            "number_of_results": len(found),
            "results": [
                {"title": r["title"], "url": r["url"], "content": r["text"], "engine": "fake"}
                for r in found
            ],
        }

    return app, state

"""Search backends behind one Protocol: the local corpus, Tavily, Brave Search, SearXNG.

A backend returns hits or raises :class:`BackendFailed` with a reason a caller can read
(never a key: keys travel in headers only and error texts are built here, not echoed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from research.corpora import open_corpus
from research.corpus import CorpusStore, CorpusUnavailable
from research.settings import ResearchSettings


class BackendFailed(Exception):
    """The backend could not answer this query; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Hit:
    url: str
    title: str
    snippet: str
    span: tuple[int, int] | None = None


class SearchBackend(Protocol):
    name: str

    async def search(self, query: str, limit: int) -> list[Hit]: ...

    async def ready(self) -> str | None:
        """``None`` when it can serve, else what is missing."""
        ...

    async def aclose(self) -> None: ...


class CorpusBackend:
    """The default: the local corpus (BM25 over a SQLite FTS5 file, or Postgres full-text
    search when RESEARCH_CORPUS_URL is set)."""

    name = "corpus"

    def __init__(self, index: CorpusStore) -> None:
        self.index = index

    async def search(self, query: str, limit: int) -> list[Hit]:
        try:
            found = await asyncio.to_thread(self.index.search, query, limit)
        except Exception as exc:  # a locked or broken index file, Postgres down
            raise BackendFailed(f"the corpus index failed: {type(exc).__name__}: {exc}") from exc
        return [Hit(h.url, h.title, h.snippet, (h.start, h.end)) for h in found]

    async def ready(self) -> str | None:
        try:
            count = await asyncio.to_thread(self.index.count)
        except CorpusUnavailable as exc:
            return str(exc)
        except Exception as exc:
            return f"the corpus index at {self.index.location} cannot be read: {exc}"
        if count == 0:
            return (
                f"the corpus at {self.index.location} is empty: add documents with "
                "`crosscheck corpus add PATH`"
            )
        return None

    async def aclose(self) -> None:
        self.index.close()


class _WebBackend:
    """What the web APIs share: one HTTP client, errors turned into reasons."""

    name = "web"

    def __init__(self, base_url: str, client: httpx.AsyncClient) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client

    async def _json(self, request: httpx.Request) -> Any:
        try:
            response = await self.client.send(request)
        except httpx.TimeoutException:
            raise BackendFailed(f"{self.name} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise BackendFailed(f"{self.name} is unreachable: {type(exc).__name__}") from None
        if response.status_code in (401, 403):
            raise BackendFailed(f"{self.name} refused the API key (HTTP {response.status_code})")
        if response.status_code == 429:
            raise BackendFailed(f"{self.name} is rate limiting this key (HTTP 429)")
        if response.status_code >= 400:
            raise BackendFailed(f"{self.name} answered HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise BackendFailed(f"{self.name} answered something that is not JSON") from None

    @staticmethod
    def _results(payload: Any, *path: str) -> list[dict[str, Any]]:
        node = payload
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return [r for r in node if isinstance(r, dict)] if isinstance(node, list) else []

    @staticmethod
    def _hits(results: list[dict[str, Any]], snippet_key: str, limit: int) -> list[Hit]:
        hits = []
        for r in results:
            url = r.get("url")
            if isinstance(url, str) and url:
                hits.append(
                    Hit(url, str(r.get("title") or ""), str(r.get(snippet_key) or "")[:1000])
                )
        return hits[:limit]

    async def ready(self) -> str | None:
        return None

    async def aclose(self) -> None:
        await self.client.aclose()


class TavilyBackend(_WebBackend):
    """``POST /search`` with a bearer key (https://docs.tavily.com)."""

    name = "tavily"

    def __init__(self, base_url: str, api_key: str, client: httpx.AsyncClient) -> None:
        super().__init__(base_url, client)
        self._key = api_key

    async def search(self, query: str, limit: int) -> list[Hit]:
        request = self.client.build_request(
            "POST",
            f"{self.base_url}/search",
            json={"query": query, "max_results": limit, "search_depth": "basic"},
            headers={"Authorization": f"Bearer {self._key}"},
        )
        return self._hits(self._results(await self._json(request), "results"), "content", limit)


class BraveBackend(_WebBackend):
    """``GET /res/v1/web/search`` with ``X-Subscription-Token`` (Brave Search API)."""

    name = "brave"

    def __init__(self, base_url: str, api_key: str, client: httpx.AsyncClient) -> None:
        super().__init__(base_url, client)
        self._key = api_key

    async def search(self, query: str, limit: int) -> list[Hit]:
        request = self.client.build_request(
            "GET",
            f"{self.base_url}/res/v1/web/search",
            params={"q": query, "count": limit},
            headers={"X-Subscription-Token": self._key, "Accept": "application/json"},
        )
        payload = await self._json(request)
        return self._hits(self._results(payload, "web", "results"), "description", limit)


class SearxngBackend(_WebBackend):
    """``GET /search?format=json`` of a SearXNG instance (JSON output must be enabled)."""

    name = "searxng"

    async def search(self, query: str, limit: int) -> list[Hit]:
        request = self.client.build_request(
            "GET", f"{self.base_url}/search", params={"q": query, "format": "json"}
        )
        return self._hits(self._results(await self._json(request), "results"), "content", limit)


def build_backend(
    settings: ResearchSettings, *, http_client: httpx.AsyncClient | None = None
) -> SearchBackend:
    """The configured backend. ``http_client`` lets tests route web calls to a fake."""
    if settings.backend == "corpus":
        return CorpusBackend(open_corpus(settings.corpus_target))
    client = http_client or httpx.AsyncClient(
        timeout=httpx.Timeout(settings.budget_s), follow_redirects=True
    )
    if settings.backend == "tavily":
        assert settings.tavily_api_key is not None  # the settings' validator checked it
        return TavilyBackend(
            settings.tavily_url, settings.tavily_api_key.get_secret_value(), client
        )
    if settings.backend == "brave":
        assert settings.brave_api_key is not None
        return BraveBackend(settings.brave_url, settings.brave_api_key.get_secret_value(), client)
    assert settings.searxng_url is not None
    return SearxngBackend(settings.searxng_url, client)

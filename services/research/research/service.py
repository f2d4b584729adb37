"""The research step: gate the queries, search each (cached), distil the hits, number them.

Nothing is silently dropped: a query the gate refuses, a backend that fails or runs over its
budget, each comes back in ``failed_queries``; a backend failure makes the answer
``degraded``, never an error. Failed queries are not cached; a query about a moving figure
(research.freshness) is cached for the short lifetime, the others for the request's.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from research.backends import BackendFailed, Hit, SearchBackend
from research.cache import Clock, ResultCache, cache_key
from research.distill import Distiller
from research.freshness import sensitivity
from research.gate import gate, normalise
from research.settings import ResearchSettings
from shared.contracts import (
    Evidence,
    FailedQuery,
    ResearchRequest,
    ResearchResult,
    ResearchStatus,
)
from shared.errors import AppError
from shared.logging import get_logger

log = get_logger("crosscheck.research")


class NoUsableQuery(AppError):
    """Every query of the request was refused by the quality gate."""

    status_code = 422


class ResearchMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.cache_hits = Counter(
            "research_cache_hits", "Queries answered from the cache.", registry=self.registry
        )
        self.cache_misses = Counter(
            "research_cache_misses", "Queries sent to the backend.", registry=self.registry
        )
        self.failed = Counter(
            "research_failed_queries",
            "Queries reported as failed, by reason kind.",
            ["kind"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "research_request_seconds",
            "Duration of one research request.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )


@dataclass(frozen=True)
class _Found:
    query: str
    items: list[dict[str, Any]]


class ResearchService:
    def __init__(
        self,
        settings: ResearchSettings,
        backend: SearchBackend,
        cache: ResultCache | None,
        distiller: Distiller | None,
        *,
        clock: Clock = time.time,
        metrics: ResearchMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.cache = cache
        self.distiller = distiller
        self.clock = clock
        self.metrics = metrics or ResearchMetrics()
        self.label = backend.name + ("+distill" if distiller is not None else "")

    async def research(self, request: ResearchRequest) -> ResearchResult:
        started = time.perf_counter()
        accepted, rejected = gate(
            request.queries,
            max_queries=self.settings.max_queries,
            max_words=self.settings.max_query_words,
        )
        for _ in rejected:
            self.metrics.failed.labels(kind="gate").inc()
        if not accepted:
            raise NoUsableQuery(
                "no query passed the quality gate (non-empty, distinct, at most "
                f"{self.settings.max_query_words} words)",
                detail={
                    "message": "no query passed the quality gate",
                    "failed_queries": [f.model_dump() for f in rejected],
                },
            )
        outcomes = await asyncio.gather(
            *(self._one(request, query) for query in accepted), return_exceptions=False
        )
        failed = list(rejected)
        evidence: list[Evidence] = []
        urls: set[str] = set()
        degraded = False
        for outcome in outcomes:
            if isinstance(outcome, FailedQuery):
                failed.append(outcome)
                degraded = True
                continue
            for item in outcome.items:
                if item["url"] in urls:  # one number per source, the first query's
                    continue
                urls.add(item["url"])
                evidence.append(Evidence(n=len(evidence) + 1, query=outcome.query, **item))
        self.metrics.seconds.observe(time.perf_counter() - started)
        return ResearchResult(
            status=ResearchStatus.degraded if degraded else ResearchStatus.ok,
            evidence=evidence,
            failed_queries=failed,
        )

    async def _one(self, request: ResearchRequest, query: str) -> _Found | FailedQuery:
        key = cache_key(self.label, normalise(query))
        if self.cache is not None:
            cached = await self._cached(key)
            if cached is not None:
                self.metrics.cache_hits.inc()
                return _Found(query, cached)
            self.metrics.cache_misses.inc()
        budget = self.settings.budget_s
        try:
            async with asyncio.timeout(budget):
                hits = await self.backend.search(query, self.settings.hits_per_query)
                items, complete = await self._items(request.task, query, hits)
        except TimeoutError:
            self.metrics.failed.labels(kind="timeout").inc()
            log.warning("research query over its budget", backend=self.backend.name)
            return FailedQuery(
                query=query, reason=f"{self.backend.name} took longer than its {budget:g} s budget"
            )
        except BackendFailed as exc:
            self.metrics.failed.labels(kind="backend").inc()
            log.warning("research query failed", backend=self.backend.name, reason=exc.reason)
            return FailedQuery(query=query, reason=exc.reason)
        if self.cache is not None and complete:
            ttl = self.settings.ttl_s(sensitivity(query, request.time_sensitivity))
            try:
                await self.cache.put(key, items, ttl)
            except Exception as exc:  # a cache that fails costs speed, never the answer
                log.warning("research cache write failed", error=type(exc).__name__)
        return _Found(query, items)

    async def _cached(self, key: str) -> list[dict[str, Any]] | None:
        assert self.cache is not None
        try:
            return await self.cache.get(key)
        except Exception as exc:  # read as a miss: the backend is asked instead
            log.warning("research cache read failed", error=type(exc).__name__)
            return None

    async def _items(
        self, task: str, query: str, hits: list[Hit]
    ) -> tuple[list[dict[str, Any]], bool]:
        """The hits as evidence fields; ``complete`` is False when a distillation failed
        (the hit keeps its snippet, and the result is not cached)."""
        now = datetime.fromtimestamp(self.clock(), UTC).isoformat()
        distilled: list[str | None] = [None] * len(hits)
        complete = True
        if self.distiller is not None and hits:
            distiller = self.distiller
            results = await asyncio.gather(
                *(distiller.distill(task, query, hit.snippet) for hit in hits),
                return_exceptions=True,
            )
            for i, result in enumerate(results):
                if isinstance(result, BaseException):
                    if not isinstance(result, Exception):
                        raise result
                    complete = False
                    log.warning("distillation failed", error=type(result).__name__)
                else:
                    distilled[i] = result[0]
        items = [
            {
                "url": hit.url,
                "title": hit.title,
                "snippet": hit.snippet,
                "distilled": distilled[i],
                "retrieved_at": now,
                "source": self.backend.name,
                "span": list(hit.span) if hit.span is not None else None,
            }
            for i, hit in enumerate(hits)
        ]
        return items, complete

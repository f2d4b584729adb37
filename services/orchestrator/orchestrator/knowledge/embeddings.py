"""Optional embeddings for knowledge retrieval (``ORCHESTRATOR_KNOWLEDGE_EMBEDDINGS``).

Entries and queries are embedded through an OpenAI-compatible ``/v1/embeddings`` endpoint with
the official ``openai`` SDK (``shared.providers.embeddings``, installed with the `embeddings`
extra: without it the orchestrator carries no model SDK). An entry's vector is stored with
it, beside a key made of the model and the text it was computed from; an entry whose text (or
the model) changed is embedded again before the next retrieval. When the provider cannot
answer, retrieval falls back to the text index and says so in a log line; a run never fails
for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

from sqlmodel import Session, col, func, select

from orchestrator.db import Database
from orchestrator.tables import KnowledgeEntry
from shared.errors import EmbeddingUnavailable
from shared.logging import get_logger

log = get_logger("crosscheck.orchestrator.knowledge")

QUERY_CACHE = 256  # query vectors kept in memory (a run's critiques ask with the same task)
MAX_TEXT_CHARS = 8000


def entry_text(title: str, body: str, source_task: str) -> str:
    text = f"{title}\n{body}"
    if source_task:
        text += f"\n{source_task}"
    return text[:MAX_TEXT_CHARS]


def embedding_key(model: str, text: str) -> str:
    return hashlib.sha256(f"{model}\0{text}".encode()).hexdigest()


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class EmbeddingClient(Protocol):
    """What retrieval needs of an embeddings client (``shared.providers.embeddings``)."""

    model: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def aclose(self) -> None: ...


class Vectors:
    """Keeps the entries' vectors fresh and embeds queries; ``None`` means: use the text index."""

    def __init__(self, embedder: EmbeddingClient) -> None:
        self.embedder = embedder
        self._lock = asyncio.Lock()
        self._fresh: tuple[Any, ...] | None = None  # entries' signature when last refreshed
        self._queries: OrderedDict[str, list[float]] = OrderedDict()

    async def query(self, db: Database, text: str) -> list[float] | None:
        key = embedding_key(self.embedder.model, text)
        try:
            await self._refresh(db)
            vector = self._queries.get(key)
            if vector is None:
                [vector] = await self.embedder.embed([text])
                self._queries[key] = vector
                if len(self._queries) > QUERY_CACHE:
                    self._queries.popitem(last=False)
        except EmbeddingUnavailable as exc:
            log.warning(
                "knowledge embeddings unavailable: ranking by the text index alone",
                model=self.embedder.model,
                error=str(exc),
            )
            return None
        return vector

    async def _refresh(self, db: Database) -> None:
        """Embed every active entry whose stored vector is missing or was made from another
        text or model."""
        model = self.embedder.model
        async with self._lock:
            signature = await db.read(_signature)
            if signature == self._fresh:
                return

            def stale(session: Session) -> list[tuple[str, str, str]]:
                rows = session.exec(
                    select(KnowledgeEntry).where(col(KnowledgeEntry.retired).is_(False))
                )
                out = []
                for entry in rows:
                    text = entry_text(entry.title, entry.body, entry.source_task)
                    wanted = embedding_key(model, text)
                    if entry.embedding_key != wanted:
                        out.append((entry.id, text, wanted))
                return out

            todo = await db.read(stale)
            if todo:
                vectors = await self.embedder.embed([text for _, text, _ in todo])

                def store(session: Session) -> None:
                    for (entry_id, _, key), vector in zip(todo, vectors, strict=True):
                        entry = session.get(KnowledgeEntry, entry_id)
                        if entry is None:
                            continue
                        text = entry_text(entry.title, entry.body, entry.source_task)
                        if embedding_key(model, text) != key:
                            continue  # edited meanwhile: the next retrieval embeds it again
                        entry.embedding = vector
                        entry.embedding_key = key
                        session.add(entry)  # ``updated_at`` stays: the text did not change

                await db.run(store)
                log.info("knowledge entries embedded", entries=len(todo), model=model)
            self._fresh = signature

    async def aclose(self) -> None:
        await self.embedder.aclose()


def _signature(session: Session) -> tuple[Any, ...]:
    return tuple(
        session.exec(
            select(func.count(), func.max(KnowledgeEntry.updated_at)).where(
                col(KnowledgeEntry.retired).is_(False)
            )
        ).one()
    )

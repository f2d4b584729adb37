"""The corpus in Postgres: passages in a table with a generated ``tsvector`` column under a GIN
index, ranked by ``ts_rank_cd`` (cover density).

The same documents, passages, spans and stable URLs as the SQLite FTS5 store (both split text
with :func:`research.corpus.split_passages`), so a platform that runs on Postgres keeps its
corpus there too. A query matches a passage holding any of its words (each word through
``plainto_tsquery``, OR-ed), as the SQLite store does: requiring every word would miss the
passages that answer a query in other words. The title weighs twice the body in the ranking,
as in the SQLite store's BM25.

Connections are opened on first use (a service starts while Postgres is still down and says
so in ``/readyz``) and again after one broke; the tables are created with the first, under an
advisory lock so that two processes starting at once do not race.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from research.corpus import (
    CorpusHit,
    CorpusUnavailable,
    Document,
    DocumentInfo,
    best_per_document,
    query_words,
    split_passages,
)

TEXT_CONFIG = "english"  # Snowball English stemming, as the SQLite store's porter tokenizer
RANK_WEIGHTS = "{0.1, 0.2, 0.5, 1.0}"  # D, C, B (body), A (title): the title weighs twice
RANK_NORMALIZATION = 1  # divide by 1 + log(length): a long passage does not win by length
SCHEMA_LOCK = 0x636F72707573  # pg_advisory_xact_lock key ("corpus")
CONNECT_TIMEOUT_S = 5
POOL_SIZE = 4  # connections per store: the research step searches up to 3 queries at once

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS corpus_documents (
    url TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    kind TEXT NOT NULL,
    chars INTEGER NOT NULL,
    passages INTEGER NOT NULL,
    added_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS corpus_passages (
    id BIGSERIAL PRIMARY KEY,
    url TEXT NOT NULL REFERENCES corpus_documents (url) ON DELETE CASCADE,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    span_start INTEGER NOT NULL,
    span_end INTEGER NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('{TEXT_CONFIG}'::regconfig, title), 'A')
        || setweight(to_tsvector('{TEXT_CONFIG}'::regconfig, body), 'B')
    ) STORED
);
CREATE INDEX IF NOT EXISTS corpus_passages_tsv ON corpus_passages USING GIN (tsv);
CREATE INDEX IF NOT EXISTS corpus_passages_url ON corpus_passages (url);
"""


def redacted(url: str) -> str:
    """The URL without its password and query string (which may hold one), for messages."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user = parts.username or ""
        host = netloc.rsplit("@", 1)[1]
        netloc = f"{user}:***@{host}"
    return urlunsplit(parts._replace(netloc=netloc, query=""))


def _clean(text: str) -> str:
    """Postgres text cannot hold NUL: a space keeps every offset (and so every span)."""
    return text.replace("\x00", " ")


class PostgresCorpusIndex:
    """The corpus in the database at ``url`` (``postgresql://``). Up to ``POOL_SIZE``
    connections, one per thread at a time: the research step's queries, searched at once, run
    side by side on the server."""

    def __init__(self, url: str, pool_size: int = POOL_SIZE) -> None:
        scheme, rest = url.split("://", 1)
        self._url = "postgresql://" + rest if "+" in scheme else url
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(pool_size)
        self._schema_ready = False

    @property
    def location(self) -> str:
        return redacted(self._url)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.OperationalError as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise CorpusUnavailable(
                f"the corpus database at {self.location} cannot be reached: {reason}"
            ) from None
        if not self._schema_ready:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                conn.execute(_SCHEMA)
            self._schema_ready = True
        return conn

    @contextmanager
    def _use(self) -> Iterator[psycopg.Connection[Any]]:
        """An idle connection (a broken one, after a restart of the server say, is dropped
        and replaced), given back afterwards."""
        with self._slots:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed or conn.broken:
                if conn is not None:
                    conn.close()
                conn = self._connect()
            try:
                yield conn
            finally:
                if conn.closed or conn.broken:
                    conn.close()
                else:
                    with self._lock:
                        self._idle.append(conn)

    def add(self, document: Document) -> int:
        """Index ``document``, replacing any earlier version with the same URL; returns how
        many passages it has."""
        return self.add_many([document])

    def add_many(self, documents: list[Document]) -> int:
        """Index several documents in one transaction, passages by ``COPY`` (a document given
        twice keeps its last version)."""
        latest = {d.url: d for d in documents}
        split = {url: split_passages(d.text) for url, d in latest.items()}
        now = time.time()
        with self._use() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("DELETE FROM corpus_documents WHERE url = ANY(%s)", (list(latest),))
            with cur.copy(
                "COPY corpus_documents (url, title, kind, chars, passages, added_at) FROM STDIN"
            ) as copy:
                for url, d in latest.items():
                    copy.write_row(
                        (url, _clean(d.title), d.kind, len(d.text), len(split[url]), now)
                    )
            with cur.copy(
                "COPY corpus_passages (url, title, body, span_start, span_end) FROM STDIN"
            ) as copy:
                for url, d in latest.items():
                    title = _clean(d.title)
                    for p in split[url]:
                        copy.write_row((url, title, _clean(p.text), p.start, p.end))
        return sum(len(p) for p in split.values())

    def remove(self, url: str) -> bool:
        """Drop the document with this URL (its passages go with it); whether it was there."""
        with self._use() as conn:
            row = conn.execute(
                "DELETE FROM corpus_documents WHERE url = %s RETURNING url", (url,)
            ).fetchone()
        return row is not None

    def documents(self) -> list[DocumentInfo]:
        with self._use() as conn:
            rows = conn.execute(
                "SELECT url, title, kind, chars, passages, added_at FROM corpus_documents "
                'ORDER BY url COLLATE "C"'
            ).fetchall()
        return [DocumentInfo(*row) for row in rows]

    def count(self) -> int:
        with self._use() as conn:
            row = conn.execute("SELECT count(*) FROM corpus_documents").fetchone()
        return int(row[0]) if row else 0

    def search(self, query: str, limit: int) -> list[CorpusHit]:
        """The best ``limit`` passages for ``query`` by ``ts_rank_cd``, at most one per
        document."""
        words = query_words(query)
        if not words:
            return []
        tsquery = " || ".join(f"plainto_tsquery('{TEXT_CONFIG}', %s)" for _ in words)
        sql = (
            "SELECT url, title, body, span_start, span_end, "
            f"ts_rank_cd('{RANK_WEIGHTS}', tsv, q, {RANK_NORMALIZATION}) AS score "
            f"FROM corpus_passages, (SELECT {tsquery} AS q) AS query "
            "WHERE tsv @@ q ORDER BY score DESC, id LIMIT %s"
        )
        with self._use() as conn:
            rows = conn.execute(sql, (*words, limit * 4)).fetchall()
        return best_per_document(
            [(u, t, b, int(s), int(e), float(score)) for u, t, b, s, e, score in rows], limit
        )

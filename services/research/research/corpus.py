"""The local corpus: documents split into passages in a full-text index, ranked by relevance.

Two stores behind one Protocol (:class:`CorpusStore`): a SQLite FTS5 file ranked by BM25 (the
default, here) and a Postgres table with a tsvector column ranked by ``ts_rank_cd``
(:mod:`research.pgcorpus`), chosen by :func:`research.corpora.open_corpus` from where the
corpus lives.

Each document has a stable URL (``file://`` and its absolute path, or the URL it was fetched
from); adding it again replaces it. A passage keeps its span: the character offsets
``[start, end)`` of its text in the document's extracted text.
"""

from __future__ import annotations

import io
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Protocol

from shared.errors import BadRequest

PASSAGE_CHARS = 800  # a passage is at most about this long (a paragraph is never cut mid-word)
SNIPPET_CHARS = 500
TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
PDF_SUFFIXES = frozenset({".pdf"})
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    url TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    kind TEXT NOT NULL,
    chars INTEGER NOT NULL,
    passages INTEGER NOT NULL,
    added_at REAL NOT NULL,
    first_rowid INTEGER NOT NULL  -- its passages are rowids first_rowid .. + passages - 1
);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
    url UNINDEXED, title, body, span_start UNINDEXED, span_end UNINDEXED,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
"""
_WORD = re.compile(r"\w+", re.UNICODE)
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n\s*")


class UnsupportedDocument(BadRequest):
    """A file whose format the corpus cannot read, or with no text in it."""


class CorpusUnavailable(Exception):
    """The corpus's database could not be reached or refused the connection (the message
    names the server, never the password)."""


@dataclass(frozen=True)
class Passage:
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Document:
    url: str
    title: str
    kind: str
    text: str


@dataclass(frozen=True)
class DocumentInfo:
    url: str
    title: str
    kind: str
    chars: int
    passages: int
    added_at: float


@dataclass(frozen=True)
class CorpusHit:
    url: str
    title: str
    snippet: str
    start: int
    end: int
    score: float


def split_passages(text: str, limit: int = PASSAGE_CHARS) -> list[Passage]:
    """Paragraphs packed into passages of at most ``limit`` characters (a longer paragraph
    is cut at white space); each keeps its offsets in ``text``, so
    ``text[p.start:p.end] == p.text``."""
    pieces: list[tuple[int, int]] = []
    bounds = [0, *(i for m in _BLANK_LINE.finditer(text) for i in m.span()), len(text)]
    for start, end in zip(bounds[::2], bounds[1::2], strict=True):
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        while end - start > limit:
            cut = text.rfind(" ", start, start + limit)
            cut = cut if cut > start else start + limit
            pieces.append((start, cut))
            start = cut
            while start < end and text[start].isspace():
                start += 1
        if end > start:
            pieces.append((start, end))
    passages: list[Passage] = []
    current: tuple[int, int] | None = None
    for start, end in pieces:
        if current is not None and end - current[0] <= limit:
            current = (current[0], end)
            continue
        if current is not None:
            passages.append(Passage(text[current[0] : current[1]], *current))
        current = (start, end)
    if current is not None:
        passages.append(Passage(text[current[0] : current[1]], *current))
    return passages


def query_words(query: str) -> list[str]:
    """The distinct words of a free-text query, case-folded, in their order."""
    return list(dict.fromkeys(w.casefold() for w in _WORD.findall(query)))


def fts_query(query: str) -> str | None:
    """A free-text query as an FTS5 expression: every word quoted (no operator injection),
    any of them may match, BM25 ranks documents with more and rarer ones first."""
    words = query_words(query)
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


# ------------------------------------------------------------------ reading files


def _title_from_markdown(text: str, fallback: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip() or fallback
        if stripped:
            break
    return fallback


def read_html(html: str, fallback_title: str) -> tuple[str, str]:
    """The readable text of an HTML page (trafilatura) and its title."""
    import trafilatura

    text = trafilatura.extract(html, output_format="txt", include_comments=False) or ""
    meta = trafilatura.extract_metadata(html)
    title = (meta.title if meta is not None and meta.title else None) or fallback_title
    return text, title


def read_pdf(content: bytes) -> str:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(content))
        return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except Exception as exc:  # any parser failure on the bytes given is a file it cannot read
        raise UnsupportedDocument(f"not a readable PDF ({exc})") from exc


def check_format(name: str) -> str:
    """The suffix of the file ``name``, when the corpus reads that format."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise UnsupportedDocument(
            f"unsupported format {suffix or '(none)'}; the corpus reads "
            + ", ".join(sorted(SUPPORTED_SUFFIXES))
        )
    return suffix


def parse_document(content: bytes, name: str, url: str) -> Document:
    """One file's bytes as a document: its name ``name`` says the format and gives the title
    when the text has none; ``url`` is its stable URL. A refusal says why (not which file:
    the caller knows)."""
    suffix = check_format(name)
    stem = PurePath(name).stem
    if suffix in PDF_SUFFIXES:
        text, title, kind = read_pdf(content), stem, "pdf"
    elif suffix in HTML_SUFFIXES:
        text, title = read_html(content.decode("utf-8", errors="replace"), stem)
        kind = "html"
    else:
        text = content.decode("utf-8", errors="replace")
        kind = "markdown" if suffix in {".md", ".markdown"} else "text"
        title = _title_from_markdown(text, stem) if kind == "markdown" else stem
    if not text.strip():
        raise UnsupportedDocument("no text found in it")
    return Document(url=url, title=title, kind=kind, text=text)


def read_document(path: Path, url: str | None = None) -> Document:
    """Read one file into a document; ``url`` (the URL it was fetched from) or its
    ``file://`` absolute path is its stable URL."""
    path = path.resolve()
    try:
        check_format(path.name)
        return parse_document(path.read_bytes(), path.name, url or path.as_uri())
    except UnsupportedDocument as exc:
        raise UnsupportedDocument(f"{path}: {exc.message}") from exc


# ------------------------------------------------------------------ the index


class CorpusStore(Protocol):
    """A corpus index: what ``crosscheck corpus`` and the corpus backend use. A store is used
    by one thread at a time (the backend calls it through ``asyncio.to_thread``)."""

    @property
    def location(self) -> str:
        """Where it lives, for messages: a file path, or a URL without its password."""
        ...

    def add(self, document: Document) -> int: ...

    def add_many(self, documents: list[Document]) -> int: ...

    def remove(self, url: str) -> bool: ...

    def documents(self) -> list[DocumentInfo]: ...

    def count(self) -> int: ...

    def search(self, query: str, limit: int) -> list[CorpusHit]: ...

    def close(self) -> None: ...


POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.lower().startswith(POSTGRES_SCHEMES)


def private_db(path: Path) -> Path:
    """Create the SQLite file (and its folder) readable and writable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600))
    return path


class CorpusIndex:
    """The FTS5 index at ``path``. One connection, used by one thread at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(private_db(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return str(self.path)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add(self, document: Document) -> int:
        """Index ``document``, replacing any earlier version with the same URL; returns how
        many passages it has."""
        return self.add_many([document])

    def add_many(self, documents: list[Document]) -> int:
        """Index several documents in one transaction (much faster for a large corpus)."""
        total = 0
        with self._write() as db:
            row = db.execute("SELECT rowid FROM passages ORDER BY rowid DESC LIMIT 1").fetchone()
            next_rowid = (row[0] if row else 0) + 1
            for document in documents:
                passages = split_passages(document.text)
                self._drop(db, document.url)
                db.executemany(
                    "INSERT INTO passages (rowid, url, title, body, span_start, span_end) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (next_rowid + i, document.url, document.title, p.text, p.start, p.end)
                        for i, p in enumerate(passages)
                    ],
                )
                db.execute(
                    "INSERT INTO documents (url, title, kind, chars, passages, added_at, "
                    "first_rowid) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        document.url,
                        document.title,
                        document.kind,
                        len(document.text),
                        len(passages),
                        time.time(),
                        next_rowid,
                    ),
                )
                next_rowid += len(passages)
                total += len(passages)
        return total

    @staticmethod
    def _drop(db: sqlite3.Connection, url: str) -> bool:
        """Delete a document and its passages by their rowid range (an FTS5 table has no
        index on ``url``: deleting by it would scan every passage)."""
        row = db.execute(
            "SELECT first_rowid, passages FROM documents WHERE url = ?", (url,)
        ).fetchone()
        if row is None:
            return False
        first, count = row
        db.execute("DELETE FROM passages WHERE rowid BETWEEN ? AND ?", (first, first + count - 1))
        db.execute("DELETE FROM documents WHERE url = ?", (url,))
        return True

    def remove(self, url: str) -> bool:
        """Drop the document with this URL (or ``file://`` path); whether it was there."""
        with self._write() as db:
            return self._drop(db, url)

    def documents(self) -> list[DocumentInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT url, title, kind, chars, passages, added_at FROM documents ORDER BY url"
            ).fetchall()
        return [DocumentInfo(*row) for row in rows]

    def count(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT count(*) FROM documents").fetchone()
        return int(row[0])

    def search(self, query: str, limit: int) -> list[CorpusHit]:
        """The best ``limit`` passages for ``query`` by BM25, at most one per document."""
        expression = fts_query(query)
        if expression is None:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT url, title, body, span_start, span_end, bm25(passages, 0, 2.0, 1.0) AS s "
                "FROM passages WHERE passages MATCH ? ORDER BY s LIMIT ?",
                (expression, limit * 4),
            ).fetchall()
        return best_per_document(
            [(url, title, body, start, end, -float(s)) for url, title, body, start, end, s in rows],
            limit,
        )


def best_per_document(
    rows: list[tuple[str, str, str, int, int, float]], limit: int
) -> list[CorpusHit]:
    """The first ``limit`` rows (best first, ``(url, title, body, start, end, score)``), at
    most one per document, as hits: a document's second-best passage would only repeat it."""
    hits: list[CorpusHit] = []
    seen: set[str] = set()
    for url, title, body, start, end, score in rows:
        if url in seen:
            continue
        seen.add(url)
        hits.append(CorpusHit(url, title, body[:SNIPPET_CHARS], int(start), int(end), score))
        if len(hits) == limit:
            break
    return hits

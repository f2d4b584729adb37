"""Ranking knowledge entries against a task with a real text index.

SQLite: an FTS5 table ranked by BM25, kept in memory beside the database and rebuilt from
the entries table whenever they changed (one count-and-timestamp query tells). Postgres:
full-text search (``to_tsvector`` / ``ts_rank_cd``, the title weighted above the body, a
lesson's source task below both). Common English words are left out of the query on both
(Postgres's ``english`` configuration drops them anyway), so a task shares no entry just
by saying "the"."""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.tables import KnowledgeEntry, table_of

_WORD = re.compile(r"[^\W_]{2,}", re.UNICODE)
MAX_TERMS = 64
STOP_WORDS = frozenset(
    "a about after all also an and any are as at be because been but by can could did do "
    "does for from had has have he her his how if in into is it its me my no not of on or "
    "our she so such than that the their them then there these they this those to too us "
    "was we were what when where which who why will with would you your".split()
)


def terms(text: str) -> list[str]:
    """The distinct words of a text, lower-cased, in order (at most ``MAX_TERMS``)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.casefold()):
        if word in STOP_WORDS:
            continue
        seen.setdefault(word, None)
        if len(seen) == MAX_TERMS:
            break
    return list(seen)


@dataclass(frozen=True)
class Hit:
    id: str
    score: float


_ENTRIES = table_of(KnowledgeEntry)
# Built once: asked on every critique, and building the statement cost more than running it.
_SIGNATURE = sa.select(sa.func.count(), sa.func.max(_ENTRIES.c.updated_at)).where(
    _ENTRIES.c.retired.is_(False)
)


class _SqliteIndex:
    """FTS5 over the active entries of one database, rebuilt when they change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute(
            "CREATE VIRTUAL TABLE entries USING fts5(id UNINDEXED, title, body, source)"
        )
        self.signature: tuple[Any, ...] | None = None

    def search(self, session: Session, words: list[str], limit: int) -> list[Hit]:
        signature = tuple(session.connection().execute(_SIGNATURE).one())
        if not signature[0]:
            return []  # no active entry: nothing to rank (every critique of a run asks)
        with self.lock:
            if signature != self.signature:
                rows = session.exec(
                    select(
                        KnowledgeEntry.id,
                        KnowledgeEntry.title,
                        KnowledgeEntry.body,
                        KnowledgeEntry.source_task,
                    ).where(col(KnowledgeEntry.retired).is_(False))
                ).all()
                self.db.execute("DELETE FROM entries")
                self.db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?)", rows)
                self.signature = signature
            query = " OR ".join(f'"{word}"' for word in words)
            found = self.db.execute(
                "SELECT id, -bm25(entries, 0.0, 4.0, 1.0, 0.5) AS score FROM entries "
                "WHERE entries MATCH ? ORDER BY score DESC LIMIT ?",
                (query, limit),
            ).fetchall()
        return [Hit(str(i), float(s)) for i, s in found]


_sqlite: dict[str, _SqliteIndex] = {}
_sqlite_lock = threading.Lock()


def _postgres(session: Session, words: list[str], limit: int) -> list[Hit]:
    title = sa.func.setweight(
        sa.func.to_tsvector("english", col(KnowledgeEntry.title)), sa.literal_column("'A'")
    )
    body = sa.func.setweight(
        sa.func.to_tsvector("english", col(KnowledgeEntry.body)), sa.literal_column("'B'")
    )
    source = sa.func.setweight(
        sa.func.to_tsvector("english", col(KnowledgeEntry.source_task)), sa.literal_column("'C'")
    )
    document = title.op("||")(body).op("||")(source)
    query = sa.func.to_tsquery("english", " | ".join(words))
    score = sa.func.ts_rank_cd(document, query).label("score")
    rows = session.exec(
        select(KnowledgeEntry.id, score)
        .where(col(KnowledgeEntry.retired).is_(False), document.op("@@")(query))
        .order_by(score.desc(), col(KnowledgeEntry.id))
        .limit(limit)
    ).all()
    return [Hit(str(i), float(s)) for i, s in rows]


def search(session: Session, text: str, limit: int) -> list[Hit]:
    """The active entries closest to ``text``, best first; none when it has no words."""
    words = terms(text)
    if not words:
        return []
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        return _postgres(session, words, limit)
    key = str(bind.engine.url)
    with _sqlite_lock:
        index = _sqlite.get(key)
        if index is None:  # built once per database (``setdefault`` built one every call)
            index = _sqlite[key] = _SqliteIndex()
    return index.search(session, words, limit)

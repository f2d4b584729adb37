"""The corpus store for where a corpus lives: SQLite (:mod:`research.corpus`) or Postgres
(:mod:`research.pgcorpus`). Apart from both, so neither store module imports the other."""

from __future__ import annotations

from pathlib import Path

from research.corpus import CorpusIndex, CorpusStore, is_postgres_url


def open_corpus(target: str | Path) -> CorpusStore:
    """The corpus at ``target``: a ``postgresql://`` URL opens the Postgres store (tables
    created on first use), anything else is the path of a SQLite file."""
    if is_postgres_url(target):
        from research.pgcorpus import PostgresCorpusIndex  # psycopg only when it is used

        return PostgresCorpusIndex(str(target))
    return CorpusIndex(Path(target))

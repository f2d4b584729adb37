"""Research step latency over a 10,000-document local corpus (no distillation).

Generates a corpus of synthetic documents (a vocabulary of topic words, each document a few
paragraphs, so a long one is split into several passages), ingests it into a fresh SQLite
FTS5 index the way ``crosscheck corpus add`` does, then sends ``POST /v1/research`` with
three queries each to the Research app in-process (cache off, distillation off) and reports
the ingest time and the p50 / p99 of one research step. Target: p50 <= 50 ms.

With ``--postgres-url`` the same corpus and the same requests also run against the Postgres
store, in a fresh schema of that database (dropped afterwards), and the table has a row for
each store. The load average is printed beside the figures: on a shared machine it says how
much they are worth.

  uv run python -m bench.research
  uv run python -m bench.research --docs 20000 --requests 500
  uv run python -m bench.research --postgres-url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
from rich.console import Console
from rich.table import Table

from research.app import create_app
from research.corpora import open_corpus
from research.corpus import Document
from research.settings import ResearchSettings

console = Console(width=120)  # the table stays readable when piped to a file
TARGET_P50_MS = 50.0
BATCH = 500


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(4, 10))) for _ in range(size)}
    return sorted(words)


def documents(n: int, rng: random.Random, words: list[str]) -> list[Document]:
    out = []
    for i in range(n):
        paragraphs = []
        for _ in range(rng.randint(2, 6)):
            sentences = [
                " ".join(rng.choices(words, k=rng.randint(6, 16))).capitalize() + "."
                for _ in range(rng.randint(2, 6))
            ]
            paragraphs.append(" ".join(sentences))
        title = " ".join(rng.choices(words, k=3)).title()
        text = f"# {title}\n\n" + "\n\n".join(paragraphs)
        out.append(Document(f"https://bench.example/doc/{i}", title, "markdown", text))
    return out


@dataclass
class Result:
    store: str
    passages: int
    ingest_s: float
    size_mb: float
    timings: list[float]


async def measure(settings: ResearchSettings, queries: list[list[str]]) -> list[float]:
    app = create_app(settings)
    token = settings.service_token.get_secret_value()
    timings: list[float] = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://research",
            headers={"Authorization": f"Bearer {token}"},
        ) as client:
            for batch in queries:
                body = {"task": "bench", "queries": batch, "time_sensitivity": "normal"}
                started = time.perf_counter()
                response = await client.post("/v1/research", json=body)
                timings.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                if response.json()["status"] != "ok":
                    raise RuntimeError(response.text)
    return timings


def ingest(target: str, corpus: list[Document]) -> tuple[int, float]:
    """Index ``corpus`` in batches the way a bulk ``crosscheck corpus add`` would; passages
    and seconds."""
    index = open_corpus(target)
    started = time.perf_counter()
    passages = 0
    try:
        for i in range(0, len(corpus), BATCH):
            passages += index.add_many(corpus[i : i + BATCH])
    finally:
        index.close()
    return passages, time.perf_counter() - started


def run_store(
    store: str, target: str, size_mb: Any, corpus: list[Document], queries: list[list[str]]
) -> Result:
    passages, ingest_s = ingest(target, corpus)
    values: dict[str, Any] = {
        "service_token": secrets.token_urlsafe(32),
        "cache": False,
        "distill": False,
        "log_level": "WARNING",
    }
    if store == "postgres":
        values["corpus_url"] = target
    else:
        values["corpus_db"] = Path(target)
    timings = asyncio.run(measure(ResearchSettings(**values), queries))
    return Result(store, passages, ingest_s, size_mb(), timings)


@contextmanager
def postgres_schema(url: str) -> Iterator[tuple[str, Any]]:
    """A fresh schema in the database at ``url`` (dropped afterwards): the URL that puts the
    corpus's tables in it, and a function that measures their size in MB."""
    import psycopg

    schema = f"bench_corpus_{secrets.token_hex(4)}"
    parts = urlsplit(url)
    query = "&".join(
        q for q in (parts.query, urlencode({"options": f"-csearch_path={schema}"})) if q
    )
    scoped = urlunsplit(parts._replace(query=query))
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:

            def size_mb() -> float:
                row = admin.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relkind = 'r'",
                    (schema,),
                ).fetchone()
                return float(row[0] or 0) / 1e6 if row else 0.0

            yield scoped, size_mb
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=10_000, help="documents in the corpus")
    parser.add_argument("--requests", type=int, default=300, help="research requests sent")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--postgres-url",
        help="also measure the Postgres store, in a fresh schema of this database "
        "(postgresql://...; dropped afterwards)",
    )
    parser.add_argument(
        "--only-postgres", action="store_true", help="with --postgres-url: skip SQLite"
    )
    args = parser.parse_args()
    if args.only_postgres and not args.postgres_url:
        parser.error("--only-postgres needs --postgres-url")
    from shared.logging import configure_logging

    configure_logging("bench", level="WARNING", json=False)
    rng = random.Random(args.seed)
    words = vocabulary(rng)
    corpus = documents(args.docs, rng, words)
    queries = [
        [" ".join(rng.choices(words, k=rng.randint(2, 5))) for _ in range(3)]
        for _ in range(args.requests)
    ]
    console.print(f"load average before (1 / 5 / 15 min): {load()} on {os.cpu_count()} CPUs")
    results: list[Result] = []
    if not args.only_postgres:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "corpus.sqlite"
            results.append(
                run_store("sqlite", str(db), lambda: db.stat().st_size / 1e6, corpus, queries)
            )
    if args.postgres_url:
        with postgres_schema(args.postgres_url) as (scoped, size_mb):
            results.append(run_store("postgres", scoped, size_mb, corpus, queries))
    table = Table(title=f"research step over {args.docs:,} documents (3 queries, no distillation)")
    for column in (
        "store",
        "passages",
        "ingest s",
        "docs/s",
        "index MB",
        "requests",
        "p50 ms",
        "p99 ms",
        "mean ms",
    ):
        table.add_column(column, justify="right")
    met = True
    for r in results:
        p50, p99 = percentile(r.timings, 0.5), percentile(r.timings, 0.99)
        met = met and p50 <= TARGET_P50_MS
        figures = {
            "bench": "research",
            "store": r.store,
            "documents": args.docs,
            "passages": r.passages,
            "ingest_s": round(r.ingest_s, 2),
            "index_mb": round(r.size_mb, 1),
            "requests": len(r.timings),
            "p50_ms": round(p50, 1),
            "p99_ms": round(p99, 1),
        }
        print(json.dumps(figures), flush=True)  # noqa: T201 (kept by `make bench`'s report)
        table.add_row(
            r.store,
            f"{r.passages:,}",
            f"{r.ingest_s:.1f}",
            f"{args.docs / r.ingest_s:,.0f}",
            f"{r.size_mb:.1f}",
            str(len(r.timings)),
            f"{p50:.1f}",
            f"{p99:.1f}",
            f"{statistics.fmean(r.timings):.1f}",
        )
    console.print(table)
    console.print(f"load average after (1 / 5 / 15 min): {load()}")
    console.print(f"target p50 <= {TARGET_P50_MS:g} ms: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The local corpus: each format ingested, ranking, spans, re-adding replaces; every store
test runs on the SQLite FTS5 file and on the test Postgres server (a fresh database). The CLI
that manages it is tested in tests/crosscheck/test_corpus_cli.py."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from research.corpora import open_corpus
from research.corpus import (
    CorpusIndex,
    Document,
    UnsupportedDocument,
    fts_query,
    read_document,
    split_passages,
)
from tests.research.conftest import SEED


def make_pdf(path: Path, lines: list[str]) -> Path:
    """A minimal one-page PDF with a text layer (Helvetica), written byte by byte."""
    content = (
        "BT /F1 12 Tf 72 720 Td 14 TL "
        + " ".join(
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*"
            for line in lines
        )
        + " ET"
    )
    stream = zlib.compress(content.encode("latin-1"))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def write_sample_files(root: Path) -> Path:
    """One document of each format, and an image the corpus does not read, in ``root``."""
    root.mkdir()
    (root / "bridge.md").write_text("# The Golden Gate\n\nThe Golden Gate Bridge opened in 1937.\n")
    (root / "notes.txt").write_text("Tides follow the Moon.\n")
    (root / "page.html").write_text(
        "<html><head><title>Aqueducts of Rome</title></head><body><nav>Home | About</nav>"
        "<article><h1>Aqueducts</h1><p>The Aqua Appia, built in 312 BC, was the first "
        "Roman aqueduct. It carried water about 16 kilometres into the city of Rome, "
        "mostly underground, and fed the public fountains of the Forum Boarium.</p>"
        "</article></body></html>"
    )
    make_pdf(root / "report.pdf", ["The Hoover Dam was completed in 1936.", "It is in Nevada."])
    (root / "image.png").write_bytes(b"\x89PNG")
    return root


@pytest.fixture
def files(tmp_path) -> Path:
    return write_sample_files(tmp_path / "docs")


def test_each_format_is_read_with_a_stable_file_url_and_a_title(files):
    md = read_document(files / "bridge.md")
    assert (md.kind, md.title, md.url) == (
        "markdown",
        "The Golden Gate",
        (files / "bridge.md").as_uri(),
    )
    assert read_document(files / "notes.txt").kind == "text"
    html = read_document(files / "page.html")
    assert html.title.startswith("Aqueducts")
    assert "Aqua Appia" in html.text
    assert "Home | About" not in html.text  # the extractor keeps the article, not the menu
    pdf = read_document(files / "report.pdf")
    assert "Hoover Dam was completed in 1936" in pdf.text
    with pytest.raises(UnsupportedDocument, match="unsupported format .png"):
        read_document(files / "image.png")


def test_a_url_given_at_ingest_is_the_documents_url(files):
    doc = read_document(files / "bridge.md", "https://example.org/bridge")
    assert doc.url == "https://example.org/bridge"


def test_a_broken_pdf_is_refused_with_its_name(tmp_path):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 this is not a pdf")
    with pytest.raises(UnsupportedDocument, match="broken.pdf"):
        read_document(broken)


def test_passages_keep_their_span_and_stay_under_the_limit():
    text = "\n\n".join(f"Paragraph {i}. " + "word " * (40 + i * 30) for i in range(8))
    passages = split_passages(text, limit=300)
    assert len(passages) > 3
    for p in passages:
        assert text[p.start : p.end] == p.text
        assert len(p.text) <= 300
    assert "".join(text[p.start : p.end] for p in passages).replace(" ", "").replace(
        "\n", ""
    ) == text.replace(" ", "").replace("\n", "")


def test_query_words_cannot_inject_fts_operators():
    assert fts_query('bridge" OR NEAR(x') == '"bridge" OR "or" OR "near" OR "x"'
    assert fts_query("!!!") is None


def test_ranking_puts_the_document_about_the_query_first(corpus_target):
    index = open_corpus(corpus_target)
    index.add_many(list(SEED))
    hits = index.search("Golden Gate Bridge opened", 3)
    assert hits[0].url == "https://example.org/golden-gate"
    assert "1937" in hits[0].snippet
    assert index.search("Eiffel Tower height", 1)[0].url == "https://example.org/eiffel"
    assert index.search("zeppelin", 3) == []
    assert index.search("!!!", 3) == []
    index.close()


def test_query_operators_are_words_on_both_stores(corpus_target):
    index = open_corpus(corpus_target)
    index.add_many(list(SEED))
    for query in ('bridge" OR NEAR(x', "gate & !bridge | (x <-> y) :* 'or'", "tides:*A"):
        hits = index.search(query, 3)
        assert hits, query
    assert index.search("!bridge", 3)[0].url == "https://example.org/golden-gate"
    index.close()


def test_a_hit_carries_the_span_of_its_passage_in_the_document(corpus_target):
    intro = "An intro paragraph about nothing in particular. " * 20  # over one passage
    text = intro + "\n\nThe Hoover Dam is in Nevada."
    index = open_corpus(corpus_target)
    index.add(Document("https://example.org/dam", "Dam", "text", text))
    hit = index.search("Hoover Dam", 1)[0]
    assert text[hit.start : hit.end] == hit.snippet
    assert hit.snippet.endswith("The Hoover Dam is in Nevada.")
    assert hit.start > 0  # the second passage, not the document's start
    index.close()


def test_both_stores_find_the_same_passages_with_the_same_spans(tmp_path):
    from tests.support.databases import fresh_postgres_database

    long = "\n\n".join(
        f"Paragraph {i} about {topic} and rivers. " * 6
        for i, topic in enumerate(["bridges", "tides", "dams", "canals", "locks"])
    )
    documents = [*SEED, Document("https://example.org/long", "Waterways", "text", long)]
    queries = ["Golden Gate", "canals locks", "tides Moon", "rivers", "Eiffel 1889"]
    found: list[list[list[tuple[str, int, int, str]]]] = []
    with fresh_postgres_database("cc_corpus") as url:
        for target in (str(tmp_path / "same.sqlite"), url):
            index = open_corpus(target)
            index.add_many(documents)
            found.append(
                [[(h.url, h.start, h.end, h.snippet) for h in index.search(q, 4)] for q in queries]
            )
            index.close()
    sqlite, postgres = found
    for query, a, b in zip(queries, sqlite, postgres, strict=True):
        assert a[0] == b[0], query  # the best passage, and its span, are the same
        assert sorted(a) == sorted(b), query  # the same passages (the order may differ)


def test_the_index_file_is_private(tmp_path):
    CorpusIndex(tmp_path / "p.sqlite").close()
    assert (tmp_path / "p.sqlite").stat().st_mode & 0o777 == 0o600


def test_adding_a_changed_document_again_replaces_its_passages(corpus_target):
    index = open_corpus(corpus_target)
    index.add(Document("https://example.org/a", "A", "text", "Zeppelins fly slowly."))
    index.add(Document("https://example.org/b", "B", "text", "Zeppelins are airships."))
    index.add(Document("https://example.org/a", "A", "text", "Gliders have no engine."))
    assert [h.url for h in index.search("zeppelins", 5)] == ["https://example.org/b"]
    assert [h.url for h in index.search("gliders", 5)] == ["https://example.org/a"]
    assert index.count() == 2
    assert index.remove("https://example.org/b")
    assert not index.remove("https://example.org/b")
    assert index.search("zeppelins", 5) == []
    assert [h.url for h in index.search("gliders", 5)] == ["https://example.org/a"]
    index.close()


def test_the_postgres_store_reconnects_after_its_connection_is_killed():
    import contextlib

    import psycopg

    from tests.support.databases import fresh_postgres_database

    with fresh_postgres_database("cc_corpus") as url:
        index = open_corpus(url)
        index.add_many(list(SEED))
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with contextlib.suppress(psycopg.OperationalError):  # the one call on the dead link
            index.search("Golden Gate", 1)
        assert index.search("Golden Gate", 1)[0].url == "https://example.org/golden-gate"
        assert index.count() == 3
        index.close()

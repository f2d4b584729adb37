"""The corpus over the API (what `crosscheck corpus` calls): upload, list, remove, with the
service token; every refusal a 4xx that says why. The store tests run on SQLite and Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from research.app import create_app
from tests.research.conftest import corpus_settings
from tests.research.test_corpus import make_pdf
from tests.support.apps import serving

BRIDGE = b"# The Golden Gate\n\nThe Golden Gate Bridge opened in 1937.\n"


@pytest.fixture
async def api(service_token, corpus_target) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(corpus_settings(service_token, corpus_target))) as client:
        client.headers["Authorization"] = f"Bearer {service_token}"
        yield client


async def upload(
    client: httpx.AsyncClient,
    content: bytes,
    *,
    filename: str = "bridge.md",
    url: str = "https://example.org/bridge",
) -> httpx.Response:
    return await client.post(
        "/v1/corpus/documents",
        params={"url": url, "filename": filename},
        content=content,
        headers={"Content-Type": "application/octet-stream"},
    )


class TestManaging:
    async def test_an_uploaded_file_is_listed_and_searched(self, api, corpus_target):
        added = await upload(api, BRIDGE)
        assert added.status_code == 201, added.text
        assert added.json() == {
            "url": "https://example.org/bridge",
            "title": "The Golden Gate",
            "kind": "markdown",
            "chars": len(BRIDGE.decode()),
            "passages": 1,
        }
        summary = (await api.get("/v1/corpus")).json()
        assert summary["documents"] == 1
        assert ".pdf" in summary["formats"]
        assert "s3cr3t" not in summary["location"]
        listing = (await api.get("/v1/corpus/documents")).json()
        assert [(d["url"], d["passages"]) for d in listing["documents"]] == [
            ("https://example.org/bridge", 1)
        ]
        research = await api.post(
            "/v1/research", json={"task": "When?", "queries": ["Golden Gate Bridge opened"]}
        )
        assert research.json()["evidence"][0]["url"] == "https://example.org/bridge"

    async def test_uploading_the_same_url_again_replaces_the_document(self, api):
        await upload(api, BRIDGE)
        again = await upload(api, b"Tides follow the Moon.", filename="bridge.txt")
        assert again.status_code == 201
        listing = (await api.get("/v1/corpus/documents")).json()["documents"]
        assert [(d["url"], d["kind"]) for d in listing] == [("https://example.org/bridge", "text")]

    async def test_each_format_is_read_from_its_bytes(self, api, tmp_path):
        pdf = make_pdf(tmp_path / "dam.pdf", ["The Hoover Dam was completed in 1936."])
        page = (
            b"<html><head><title>Aqueducts</title></head><body><article><p>"
            + (b"The Aqua Appia, built in 312 BC, was the first Roman aqueduct. " * 3)
            + b"</p></article></body></html>"
        )
        kinds = {}
        for name, content in (("dam.pdf", pdf.read_bytes()), ("page.html", page)):
            response = await upload(api, content, filename=name, url=f"https://example.org/{name}")
            assert response.status_code == 201, response.text
            kinds[name] = response.json()["kind"]
        assert kinds == {"dam.pdf": "pdf", "page.html": "html"}

    async def test_a_removed_document_is_gone_and_removing_it_again_is_a_404(self, api):
        await upload(api, BRIDGE)
        removed = await api.delete(
            "/v1/corpus/documents", params={"url": "https://example.org/bridge"}
        )
        assert removed.status_code == 204
        again = await api.delete(
            "/v1/corpus/documents", params={"url": "https://example.org/bridge"}
        )
        assert again.status_code == 404
        assert again.json()["detail"].startswith("no document https://example.org/bridge in ")
        assert (await api.get("/v1/corpus")).json()["documents"] == 0


class TestRefusals:
    @pytest.mark.parametrize(
        ("filename", "content", "says"),
        [
            ("image.png", b"\x89PNG", "unsupported format .png"),
            ("README", b"text", "unsupported format (none)"),
            ("blank.md", b"  \n\n ", "no text found"),
            ("broken.pdf", b"%PDF-1.4 this is not a pdf", "not a readable PDF"),
            ("garbage.pdf", bytes(range(256)) * 4, "not a readable PDF"),
        ],
    )
    async def test_a_file_the_corpus_cannot_read_is_a_400_saying_why(
        self, api, filename, content, says
    ):
        response = await upload(api, content, filename=filename)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "UnsupportedDocument"
        assert says in response.json()["detail"]
        assert (await api.get("/v1/corpus")).json()["documents"] == 0

    @pytest.mark.parametrize(
        "url",
        ["bridge.md", "/abs/path.md", "https://example.org/a b", "file:///x\x00y", "x" * 3000],
    )
    async def test_a_document_url_that_is_not_an_absolute_url_is_refused(self, api, url):
        response = await upload(api, BRIDGE, url=url)
        assert response.status_code in (400, 422), response.text
        assert response.status_code != 500
        if response.status_code == 400:
            assert "absolute URL" in response.json()["detail"]
        assert (await api.get("/v1/corpus")).json()["documents"] == 0

    async def test_a_missing_url_or_filename_is_a_422_naming_it(self, api):
        response = await api.post("/v1/corpus/documents", params={"url": "https://e.org/a"})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "filename"]

    async def test_a_file_over_the_limit_is_a_413(self, service_token, corpus_target):
        settings = corpus_settings(service_token, corpus_target, corpus_max_bytes=1024 * 1024)
        async with serving(create_app(settings), service_token) as client:
            response = await upload(client, b"word " * (1024 * 1024 // 5 + 1), filename="big.txt")
            summary = (await client.get("/v1/corpus")).json()
        assert response.status_code == 413
        assert summary["max_bytes"] == 1024 * 1024
        assert summary["documents"] == 0

    async def test_every_corpus_route_needs_the_service_token(self, api, service_token):
        api.headers["Authorization"] = "Bearer not-the-token-0123456789"
        for method, path in (
            ("GET", "/v1/corpus"),
            ("GET", "/v1/corpus/documents"),
            ("POST", "/v1/corpus/documents?url=https://e.org/a&filename=a.md"),
            ("DELETE", "/v1/corpus/documents?url=https://e.org/a"),
        ):
            response = await api.request(method, path, content=BRIDGE)
            assert response.status_code == 401, (method, path)
            assert response.json()["error"] == "Unauthorized"
        api.headers["Authorization"] = f"Bearer {service_token}"
        assert (await api.get("/v1/corpus")).json()["documents"] == 0  # nothing was added


async def test_a_service_searching_the_web_has_no_corpus_to_manage(service_token, tmp_path):
    settings = corpus_settings(
        service_token, tmp_path / "corpus.sqlite", backend="searxng", searxng_url="http://x"
    )
    async with serving(create_app(settings), service_token) as client:
        response = await client.get("/v1/corpus")
    assert response.status_code == 409
    assert "searches searxng, not a local corpus" in response.json()["detail"]
    assert not (tmp_path / "corpus.sqlite").exists()


async def test_an_unreachable_postgres_corpus_is_a_503_without_the_password(service_token):
    from tests.support.servers import free_port

    url = f"postgresql://corpus:s3cr3t-pw@127.0.0.1:{free_port()}/corpus"
    async with serving(create_app(corpus_settings(service_token, url)), service_token) as client:
        response = await client.get("/v1/corpus/documents")
    assert response.status_code == 503
    assert "cannot be reached" in response.json()["detail"]
    assert "corpus:***@127.0.0.1" in response.json()["detail"]
    assert "s3cr3t-pw" not in response.text

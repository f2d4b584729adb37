"""POST /v1/research end to end: the corpus, distillation through the fake model's SDK call,
the cache with an injected clock, the web backends against their fakes, and degrading."""

from __future__ import annotations

import pytest

from tests.research.fakesearch import BRAVE_KEY, TAVILY_KEY


def body(*queries: str, sensitivity: str = "normal") -> dict:
    return {
        "task": "When did the Golden Gate Bridge open?",
        "queries": list(queries),
        "time_sensitivity": sensitivity,
    }


def metric(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


async def test_the_corpus_answers_with_numbered_evidence_and_distilled_claims(research, fake_model):
    response = await research.post("/v1/research", json=body("Golden Gate Bridge opened"))
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "ok"
    assert result["failed_queries"] == []
    first = result["evidence"][0]
    assert first["n"] == 1
    assert first["url"] == "https://example.org/golden-gate"
    assert first["source"] == "corpus"
    assert "1937" in first["snippet"]
    # the fake model keeps the passage's sentences that share a word with the query
    assert "The Golden Gate Bridge opened to traffic on May 27, 1937." in first["distilled"]
    assert "1,280 metres" not in first["distilled"]
    start, end = first["span"]
    assert end > start
    assert [e["n"] for e in result["evidence"]] == list(range(1, len(result["evidence"]) + 1))
    calls = [c for c in fake_model.requests() if c["stage"] == "distill"]
    assert len(calls) == len(result["evidence"])


async def test_distillation_off_makes_no_model_call(research_with, fake_model):
    async with research_with(distill=False) as client:
        result = (await client.post("/v1/research", json=body("Golden Gate Bridge"))).json()
        info = (await client.get("/v1/info")).json()
    assert result["evidence"][0]["distilled"] is None
    assert fake_model.requests() == []
    assert info["models"] == {}


async def test_gate_refusals_are_reported_beside_the_evidence(research):
    result = (
        await research.post(
            "/v1/research",
            json=body(
                "Golden Gate Bridge", "golden gate  bridge", "", "Eiffel Tower", "Tides", "Moon"
            ),
        )
    ).json()
    assert result["status"] == "ok"
    reasons = {f["query"]: f["reason"] for f in result["failed_queries"]}
    assert reasons == {
        "golden gate  bridge": "duplicate of an earlier query",
        "": "empty query",
        "Moon": "over the cap of 3 queries per request",
    }
    assert {e["query"] for e in result["evidence"]} == {
        "Golden Gate Bridge",
        "Eiffel Tower",
        "Tides",
    }


async def test_a_request_with_no_usable_query_is_a_422_that_names_each(research):
    response = await research.post("/v1/research", json=body("", "   "))
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [f["reason"] for f in detail["failed_queries"]] == ["empty query", "empty query"]
    assert (await research.post("/v1/research", json=body())).status_code == 422  # no queries


async def test_the_service_token_is_required(research):
    response = await research.post(
        "/v1/research", json=body("Golden Gate"), headers={"Authorization": "Bearer wrong-token"}
    )
    assert response.status_code == 401


async def test_ready_once_the_corpus_has_documents(research_with, tmp_path):
    async with research_with() as client:
        assert (await client.get("/readyz")).status_code == 200
    async with research_with(corpus_db=tmp_path / "empty.sqlite") as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert "crosscheck corpus add" in response.json()["detail"]


@pytest.mark.parametrize(
    ("sensitivity", "ttl_s"), [("high", 3600), ("normal", 24 * 3600), ("static", 7 * 24 * 3600)]
)
async def test_a_repeat_within_the_ttl_is_a_hit_and_after_it_a_miss(
    research_with, clock, fake_model, sensitivity, ttl_s
):
    async with research_with() as client:
        query = body("Golden Gate Bridge", sensitivity=sensitivity)
        first = (await client.post("/v1/research", json=query)).json()
        distills = len(fake_model.requests())
        clock.now += ttl_s - 1
        again = (
            await client.post("/v1/research", json={**query, "queries": [" GOLDEN gate bridge? "]})
        ).json()
        assert len(fake_model.requests()) == distills  # served from the cache
        assert again["evidence"][0]["retrieved_at"] == first["evidence"][0]["retrieved_at"]
        clock.now += 1
        await client.post("/v1/research", json=query)
        assert len(fake_model.requests()) == 2 * distills  # expired: searched again
        metrics = (await client.get("/metrics")).text
    assert metric(metrics, "research_cache_hits_total") == 1
    assert metric(metrics, "research_cache_misses_total") == 2


async def test_the_cache_can_be_turned_off(research_with, fake_model):
    async with research_with(cache=False) as client:
        await client.post("/v1/research", json=body("Golden Gate Bridge"))
        calls = len(fake_model.requests())
        await client.post("/v1/research", json=body("Golden Gate Bridge"))
        assert len(fake_model.requests()) == 2 * calls
        metrics = (await client.get("/metrics")).text
    assert metric(metrics, "research_cache_hits_total") == 0


async def test_a_failed_distillation_keeps_the_snippet_and_is_not_cached(research_with, fake_model):
    fake_model.faults({"stage": "distill", "status": 400})
    async with research_with(hits_per_query=1) as client:
        first = (await client.post("/v1/research", json=body("Eiffel Tower"))).json()
        assert first["status"] == "ok"
        assert first["evidence"][0]["distilled"] is None
        assert "1889" in first["evidence"][0]["snippet"]
        second = (await client.post("/v1/research", json=body("Eiffel Tower"))).json()
    assert "1889" in second["evidence"][0]["distilled"]


# ------------------------------------------------------------------ web backends


@pytest.mark.parametrize(
    ("backend", "settings"),
    [
        ("tavily", {"tavily_api_key": TAVILY_KEY}),
        ("brave", {"brave_api_key": BRAVE_KEY}),
        ("searxng", {}),
    ],
)
async def test_each_web_backend_answers_through_its_wire_format(
    research_with, fake_search, backend, settings
):
    url, state = fake_search
    urls = {"tavily_url": url, "brave_url": url, "searxng_url": url}
    async with research_with(
        backend=backend, distill=False, hits_per_query=2, **urls, **settings
    ) as client:
        response = await client.post("/v1/research", json=body("golden gate bridge"))
        info = await client.get("/v1/info")
    result = response.json()
    assert result["status"] == "ok", result
    assert [e["url"] for e in result["evidence"]] == [
        "https://example.org/golden-gate-bridge/1",
        "https://example.org/golden-gate-bridge/2",
    ]
    assert result["evidence"][0]["source"] == backend
    assert result["evidence"][0]["snippet"].startswith("golden gate bridge is described")
    assert result["evidence"][0]["span"] is None
    key = settings.get("tavily_api_key") or settings.get("brave_api_key")
    if key:
        assert key not in response.text + info.text
        assert any(key in str(r["headers"].values()) for r in state.requests)


async def test_a_wrong_key_is_reported_as_a_failed_query(research_with, fake_search):
    url, _ = fake_search
    async with research_with(
        backend="tavily", tavily_url=url, tavily_api_key="tvly-wrong-0123456789", distill=False
    ) as client:
        result = (await client.post("/v1/research", json=body("golden gate bridge"))).json()
    assert result["status"] == "degraded"
    assert result["failed_queries"] == [
        {"query": "golden gate bridge", "reason": "tavily refused the API key (HTTP 401)"}
    ]
    assert "tvly-wrong" not in str(result)


async def test_a_backend_down_degrades_and_a_failed_query_is_not_cached(research_with, fake_search):
    url, state = fake_search
    state.down = True
    async with research_with(backend="searxng", searxng_url=url, distill=False) as client:
        down = await client.post("/v1/research", json=body("golden gate bridge", "eiffel tower"))
        assert down.status_code == 200
        assert down.json()["status"] == "degraded"
        assert down.json()["evidence"] == []
        assert {f["reason"] for f in down.json()["failed_queries"]} == {"searxng answered HTTP 503"}
        state.down = False
        back = (await client.post("/v1/research", json=body("golden gate bridge"))).json()
        metrics = (await client.get("/metrics")).text
    assert back["status"] == "ok"
    assert back["evidence"]
    assert metric(metrics, "research_cache_hits_total") == 0
    assert 'research_failed_queries_total{kind="backend"} 2.0' in metrics


async def test_a_backend_over_its_budget_degrades_instead_of_stalling(research_with, fake_search):
    url, state = fake_search
    state.delay_s = 5
    async with research_with(
        backend="searxng", searxng_url=url, distill=False, budget_s=0.2
    ) as client:
        result = (await client.post("/v1/research", json=body("golden gate bridge"))).json()
    assert result["status"] == "degraded"
    assert result["failed_queries"] == [
        {"query": "golden gate bridge", "reason": "searxng took longer than its 0.2 s budget"}
    ]


async def test_an_unreachable_backend_degrades(research_with):
    from tests.support.servers import free_port

    async with research_with(
        backend="searxng", searxng_url=f"http://127.0.0.1:{free_port()}", distill=False
    ) as client:
        result = (await client.post("/v1/research", json=body("golden gate bridge"))).json()
    assert result["status"] == "degraded"
    assert result["failed_queries"][0]["reason"].startswith("searxng is unreachable")


def test_a_web_backend_without_its_key_is_refused_at_start(fake_model, service_token, tmp_path):
    from pydantic import ValidationError

    from tests.research.conftest import research_settings

    with pytest.raises(ValidationError, match="RESEARCH_BACKEND=brave needs BRAVE_API_KEY"):
        research_settings(fake_model, service_token, tmp_path, backend="brave")


async def test_the_client_turns_an_unreachable_service_into_degraded(service_token):
    from research.client import ResearchClient
    from shared.contracts import ResearchRequest
    from tests.support.servers import free_port

    client = ResearchClient(f"http://127.0.0.1:{free_port()}", service_token, timeout_s=2)
    try:
        result = await client.research(
            ResearchRequest(task="t", queries=["golden gate bridge", "eiffel"])
        )
    finally:
        await client.aclose()
    assert result.status == "degraded"
    assert [f.query for f in result.failed_queries] == ["golden gate bridge", "eiffel"]


async def test_the_client_reads_evidence_and_gate_refusals(research, service_token):
    from research.client import ResearchClient
    from shared.contracts import ResearchRequest

    client = ResearchClient("http://service", service_token, client=research)
    found = await client.research(ResearchRequest(task="t", queries=["Eiffel Tower"]))
    assert found.status == "ok"
    assert found.evidence[0].url == "https://example.org/eiffel"
    refused = await client.research(ResearchRequest(task="t", queries=["  "]))
    assert refused.status == "degraded"
    assert refused.failed_queries[0].reason == "empty query"


async def test_with_redis_url_the_cache_lives_in_redis(research_with, clock, fake_model, tmp_path):
    import secrets

    import redis.asyncio as redis

    from tests.support.databases import require_redis

    url = require_redis()  # fails, with what to do, when the test Redis is not there
    probe = redis.Redis.from_url(url)
    query = body(f"Golden Gate Bridge {secrets.token_hex(4)}", sensitivity="high")
    try:
        async with research_with(redis_url=url) as client:
            await client.post("/v1/research", json=query)
            calls = len(fake_model.requests())
            await client.post("/v1/research", json=query)
            assert len(fake_model.requests()) == calls  # a hit
            clock.now += 3600
            await client.post("/v1/research", json=query)
            assert len(fake_model.requests()) == 2 * calls  # expired by the injected clock
        assert not (tmp_path / "research-cache.sqlite").exists()
        assert await probe.keys("research:corpus+distill:*")
    finally:
        await probe.aclose()


async def test_the_corpus_can_live_in_postgres(research_with, tmp_path):
    from research.corpora import open_corpus
    from tests.research.conftest import SEED
    from tests.support.databases import fresh_postgres_database

    with fresh_postgres_database("cc_corpus") as url:
        async with research_with(
            corpus_url=url, corpus_db=tmp_path / "unused.sqlite", distill=False
        ) as client:
            empty = await client.get("/readyz")
            index = open_corpus(url)
            index.add_many(list(SEED))
            index.close()
            ready = await client.get("/readyz")
            result = (await client.post("/v1/research", json=body("Golden Gate Bridge"))).json()
    assert empty.status_code == 503
    assert "crosscheck corpus add" in empty.json()["detail"]
    assert ready.status_code == 200
    assert result["status"] == "ok"
    first = result["evidence"][0]
    assert (first["url"], first["source"]) == ("https://example.org/golden-gate", "corpus")
    start, end = first["span"]
    assert "1937" in first["snippet"]
    assert end > start
    assert not (tmp_path / "unused.sqlite").exists()  # the SQLite file is not touched


async def test_an_unreachable_postgres_corpus_degrades_and_never_shows_its_password(
    research_with, fake_model, service_token, tmp_path
):
    import io
    import logging

    from shared.logging import configure_logging
    from tests.research.conftest import research_settings
    from tests.support.servers import free_port

    url = f"postgresql://corpus:pw-s3cr3t@127.0.0.1:{free_port()}/corpus"
    logs = io.StringIO()
    settings = research_settings(fake_model, service_token, tmp_path, corpus_url=url)
    configure_logging("research", level="DEBUG", json=True, secrets=settings.secrets(), stream=logs)
    try:
        async with research_with(corpus_url=url, distill=False) as client:
            ready = await client.get("/readyz")
            result = (await client.post("/v1/research", json=body("golden gate bridge"))).json()
    finally:
        logging.getLogger().handlers = []
    assert ready.status_code == 503
    assert "cannot be reached" in ready.json()["detail"]
    assert "corpus:***@127.0.0.1" in ready.json()["detail"]  # the server is named
    assert result["status"] == "degraded"
    assert "cannot be reached" in result["failed_queries"][0]["reason"]
    assert "research query failed" in logs.getvalue()
    assert "pw-s3cr3t" not in ready.text + str(result) + logs.getvalue()


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("postgresql://u:pw-9f2k@db:5432/corpus", True),
        ("postgres://db/corpus", True),
        ("   ", True),  # blank is unset: the SQLite file
        ("sqlite:///var/corpus.sqlite", False),
        ("var/research/corpus.sqlite", False),
    ],
)
def test_the_corpus_url_must_be_postgres(fake_model, service_token, tmp_path, value, accepted):
    from pydantic import ValidationError

    from tests.research.conftest import research_settings

    if not accepted:
        with pytest.raises(ValidationError, match="RESEARCH_CORPUS_URL must be a postgresql"):
            research_settings(fake_model, service_token, tmp_path, corpus_url=value)
        return
    settings = research_settings(fake_model, service_token, tmp_path, corpus_url=value)
    if value.strip():
        assert settings.corpus_target == value
        assert ("pw-9f2k" in settings.secrets()) == ("pw-9f2k" in value)  # redacted in logs
    else:
        assert settings.corpus_target == tmp_path / "corpus.sqlite"

"""A query about a moving figure (a price, a rate, today, the latest...) is cached for the
short lifetime whatever the request's sensitivity; the others for the request's."""

from __future__ import annotations

import pytest

from research.freshness import moving_figure, sensitivity
from shared.contracts import TimeSensitivity
from tests.research.test_api import body, metric

HIGH_S = 3600  # RESEARCH_TTL_HIGH_S by default
NORMAL_S = 24 * 3600


async def cache_counts(client) -> tuple[float, float]:
    text = (await client.get("/metrics")).text
    return metric(text, "research_cache_hits_total"), metric(text, "research_cache_misses_total")


@pytest.mark.parametrize("requested", ["normal", "static"])
async def test_a_moving_figure_lives_as_long_as_the_high_ttl(research_with, clock, requested):
    moving = "Golden Gate Bridge toll price today"
    plain = "Golden Gate Bridge opening year"
    async with research_with(distill=False) as client:
        for query in (moving, plain):
            await client.post("/v1/research", json=body(query, sensitivity=requested))
        assert await cache_counts(client) == (0, 2)

        clock.now += HIGH_S - 1
        for query in (moving, plain):
            await client.post("/v1/research", json=body(query, sensitivity=requested))
        assert await cache_counts(client) == (2, 2)  # both still cached

        clock.now += 1  # the high TTL is over: the moving figure is searched again
        await client.post("/v1/research", json=body(moving, sensitivity=requested))
        assert await cache_counts(client) == (2, 3)
        await client.post("/v1/research", json=body(plain, sensitivity=requested))
        assert await cache_counts(client) == (3, 3)  # the plain one keeps its own TTL

        clock.now += NORMAL_S - HIGH_S  # a day after the first search
        await client.post("/v1/research", json=body(plain, sensitivity=requested))
        hits, misses = await cache_counts(client)
    assert (hits, misses) == ((3, 4) if requested == "normal" else (4, 3))


async def test_a_plain_query_keeps_the_normal_ttl(research_with, clock):
    async with research_with(distill=False) as client:
        query = body("Eiffel Tower height")
        await client.post("/v1/research", json=query)
        clock.now += NORMAL_S - 1
        await client.post("/v1/research", json=query)
        assert await cache_counts(client) == (1, 1)
        clock.now += 1
        await client.post("/v1/research", json=query)
        assert await cache_counts(client) == (1, 2)


@pytest.mark.parametrize(
    "query",
    [
        "Bitcoin price",
        "EUR to USD exchange RATE",
        "current CEO of Acme",
        "who is president now",
        "weather today in Paris",
        "latest Python release",
        "Acme stock",
        "final score Arsenal Chelsea",
        "inflation this   month",
        "box office this week",
        "GDP growth this year",
        "mortgage rates",
        "Acme shares",
        "news tonight",
    ],
)
def test_moving_figures(query):
    assert moving_figure(query)
    assert sensitivity(query, TimeSensitivity.static) is TimeSensitivity.high


@pytest.mark.parametrize(
    "query",
    [
        "Golden Gate Bridge opening year",
        "accurate history of Rome",  # 'rate' inside a word
        "Nowhere Man lyrics",  # 'now' inside a word
        "stocky horse breeds",
        "priceless art theft",
        "this weekend's origin",  # 'this week' must be whole words
        "",
    ],
)
def test_plain_queries_keep_the_requested_sensitivity(query):
    assert not moving_figure(query)
    for requested in TimeSensitivity:
        assert sensitivity(query, requested) is requested

"""The orchestrator's copy of the Critic's profile list: the depth a run's critiques default
to, and what happens when the list is missing, slow or malformed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from orchestrator.knowledge.profiles import ProfileCatalog
from shared.contracts import Depth, TaskKind
from shared.orchestration import Policy

LISTED = [
    {"name": "general", "kinds": ["text"], "risk": "low", "default_depth": "L1"},
    {"name": "code", "kinds": ["code"], "risk": "medium", "default_depth": "L1"},
    {"name": "legal", "kinds": ["text"], "risk": "high", "default_depth": "L2"},
    {"name": "medical", "kinds": ["text"], "risk": "high", "default_depth": "L3"},
    {"name": "support", "kinds": ["text"], "risk": "medium", "default_depth": "L1"},
]


class FakeCritic:
    """An in-memory ``ProfileSource``: answers ``body`` with ``status``, counting the asks."""

    def __init__(self, body: Any = LISTED, status: int = 200) -> None:
        self.body = body
        self.status = status
        self.asked = 0
        self.timeouts: list[float] = []

    async def get(self, url: str, *, timeout: float) -> httpx.Response:
        self.asked += 1
        self.timeouts.append(timeout)
        request = httpx.Request("GET", f"http://critic.test{url}")
        if isinstance(self.body, Exception):
            raise self.body
        return httpx.Response(self.status, json=self.body, request=request)


@pytest.mark.parametrize(
    ("policy", "kind", "expected"),
    [
        ({"profile": "legal"}, "text", Depth.L2),
        ({"profile": "medical"}, "text", Depth.L3),
        ({"profile": "general"}, "text", Depth.L1),
        ({}, "text", Depth.L1),  # text's default: general
        ({}, "code", Depth.L1),  # code's default: code
        ({"profile": "legal", "depth": "auto"}, "text", Depth.L3),  # high risk
        ({"profile": "support", "depth": "auto"}, "text", Depth.L2),  # medium risk
        ({"profile": "general", "depth": "auto"}, "text", Depth.L1),  # low risk
        ({"profile": "general", "depth": "L3"}, "text", Depth.L3),  # the run's own wins
    ],
)
async def test_the_effective_depth(policy, kind, expected):
    catalog = ProfileCatalog(FakeCritic())
    assert await catalog.effective_depth(Policy(**policy), TaskKind(kind)) is expected


async def test_a_concrete_depth_needs_no_list():
    critic = FakeCritic(status=503)
    catalog = ProfileCatalog(critic)
    assert await catalog.effective_depth(Policy(depth=Depth.L2), TaskKind.text) is Depth.L2
    assert critic.asked == 0


@pytest.mark.parametrize(
    "critic",
    [
        FakeCritic(status=503),
        FakeCritic(body=httpx.ConnectTimeout("slow")),
        FakeCritic(body={"not": "a list"}),
        FakeCritic(body=[{"kinds": ["text"]}]),  # no name
        FakeCritic(body="<html>oops</html>"),
    ],
)
async def test_an_unavailable_or_broken_list_leaves_the_depth_unknown(critic):
    catalog = ProfileCatalog(critic)
    assert await catalog.effective_depth(Policy(profile="legal"), TaskKind.text) is None
    await catalog.require("anything", TaskKind.text)  # not checked, as before
    assert critic.asked == 1  # failed a moment ago: not asked again at once
    assert critic.timeouts == [5.0]


async def test_a_profile_with_an_unknown_risk_or_depth_is_unknown_alone():
    odd = [
        {"name": "general", "kinds": ["text"], "risk": "low", "default_depth": "L9"},
        {"name": "legal", "kinds": ["text"], "default_depth": "auto"},  # no risk
        {"name": "medical", "kinds": ["text"], "risk": "high", "default_depth": "L3"},
    ]
    catalog = ProfileCatalog(FakeCritic(body=odd))
    assert await catalog.effective_depth(Policy(), TaskKind.text) is None
    assert await catalog.effective_depth(Policy(profile="legal"), TaskKind.text) is None
    assert await catalog.effective_depth(Policy(profile="medical"), TaskKind.text) is Depth.L3
    assert await catalog.effective_depth(Policy(profile="nope"), TaskKind.text) is None


async def test_the_list_is_asked_again_after_a_failure_once_the_pause_is_over():
    now = [1000.0]
    critic = FakeCritic(status=503)
    catalog = ProfileCatalog(critic, clock=lambda: now[0])
    assert await catalog.effective_depth(Policy(profile="legal"), TaskKind.text) is None
    critic.status = 200
    now[0] += 4.9
    assert await catalog.effective_depth(Policy(profile="legal"), TaskKind.text) is None
    now[0] += 0.2
    assert await catalog.effective_depth(Policy(profile="legal"), TaskKind.text) is Depth.L2
    assert critic.asked == 2

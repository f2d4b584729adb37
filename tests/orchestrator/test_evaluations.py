"""Evaluation summaries: `POST /v1/evaluations` keeps what `crosscheck eval` measured, readers
get them newest first and the latest one; bad summaries are 422s naming the field. On SQLite
and on Postgres (the `database_url` fixture)."""

import copy
import json
from pathlib import Path

import pytest
import yaml

from shared.evaluations import MAX_CONFIG_BYTES
from tests.orchestrator.conftest import mint
from tests.support import promql
from tests.support.servers import free_port

SINGLE = {
    "mode": "single",
    "items": 4,
    "passed": 1,
    "score": 0.25,
    "judge": None,
    "rounds": 1.0,
    "tokens": 120.5,
    "tokens_total": 482,
    "cost_usd": 0.0012,
    "latency_p50_s": 1.5,
    "latency_p95_s": 2.25,
    "escalations": None,
    "seen_by_person": None,
    "actor": ["openai/gpt-5-mini"],
    "critic": [],
}
CROSS = {
    **SINGLE,
    "mode": "cross",
    "passed": 2,
    "score": 0.5,
    "rounds": 2.0,
    "tokens": 410.0,
    "tokens_total": 1640,
    "cost_usd": 0.0051,
    "latency_p50_s": 6.0,
    "latency_p95_s": 9.5,
    "escalations": 1,
    "seen_by_person": 0.25,
    "critic": ["anthropic/claude-sonnet-4-6"],
}
SUMMARY = {
    "dataset": "text",
    "items": 4,
    "limit": 4,
    "seed": 1,
    # cross first: the orchestrator keeps them in the order single, self, cross
    "modes": [CROSS, SINGLE],
    "config": {"set_file": "shipped text set", "concurrency": 2, "max_rounds": None},
    "commit": "c90963e0123456789abcdef0123456789abcdef0",
    "started_at": "2026-11-30T10:00:00Z",
    "finished_at": "2026-11-30T10:12:30Z",
}


def summary(**changes) -> dict:
    body = copy.deepcopy(SUMMARY)
    body.update(changes)
    return body


def intercept_summary(rate: float, finished_at: str = "2026-11-30T10:12:30Z", **changes) -> dict:
    """What `crosscheck eval intercept` publishes: the Critic alone on 10 planted errors."""
    body = {
        "dataset": "intercept",
        "items": 10,
        "modes": [
            {
                "mode": "critic",
                "items": 10,
                "passed": round(rate * 10),
                "score": rate,
                "critic": ["anthropic/claude-sonnet-4-6"],
            }
        ],
        "config": {"set_file": "shipped intercept set", "target": 0.65},
        "finished_at": finished_at,
    }
    body.update(changes)
    return body


@pytest.fixture
def sandbox_url():
    """Nothing here runs a task: no sandbox is started (nothing listens here)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def peers():
    """Nor does anything call the Actor or the Critic."""
    return {}


class TestPublishAndRead:
    async def test_a_published_summary_is_the_latest_and_reads_back_whole(self, api):
        created = await api.post("/v1/evaluations", json=SUMMARY)
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["id"].startswith("eval_")
        assert body["published_by"] == "bootstrap admin"
        assert [m["mode"] for m in body["modes"]] == ["single", "cross"]
        latest = (await api.get("/v1/evaluations/latest")).json()
        assert latest == body
        assert latest["modes"][1] == {**CROSS, "config": None}
        assert (latest["limit"], latest["seed"], latest["commit"]) == (4, 1, SUMMARY["commit"])
        assert latest["finished_at"] == "2026-11-30T10:12:30Z"
        assert latest["config"] == SUMMARY["config"]

    async def test_newest_is_the_one_that_finished_last_whatever_the_order_sent(self, api):
        late = summary(finished_at="2026-11-30T12:00:00Z", seed=2)
        early = summary(finished_at="2026-11-29T12:00:00Z", started_at=None, seed=3)
        code = summary(dataset="humaneval", finished_at="2026-11-30T11:00:00Z", seed=4)
        for body in (late, early, code):
            assert (await api.post("/v1/evaluations", json=body)).status_code == 201
        listed = (await api.get("/v1/evaluations")).json()
        assert [e["seed"] for e in listed] == [2, 4, 3]
        only_text = (await api.get("/v1/evaluations", params={"dataset": "text"})).json()
        assert [e["seed"] for e in only_text] == [2, 3]
        one = (await api.get("/v1/evaluations", params={"limit": 1})).json()
        assert [e["seed"] for e in one] == [2]
        latest = await api.get("/v1/evaluations/latest", params={"dataset": "humaneval"})
        assert latest.json()["seed"] == 4

    async def test_a_large_seed_and_a_combined_reports_mode_config_are_kept(self, api):
        modes = [{**SINGLE, "config": {"source": "var/eval/a", "max_rounds": 3}}, CROSS]
        body = summary(seed=2**62 + 1, modes=modes, limit=None, commit=None)
        assert (await api.post("/v1/evaluations", json=body)).status_code == 201
        latest = (await api.get("/v1/evaluations/latest")).json()
        assert latest["seed"] == 2**62 + 1
        assert latest["modes"][0]["config"] == {"source": "var/eval/a", "max_rounds": 3}
        assert (latest["limit"], latest["commit"]) == (None, None)

    async def test_none_yet_is_a_404_that_says_how_to_make_one(self, api):
        response = await api.get("/v1/evaluations/latest")
        assert response.status_code == 404
        assert "crosscheck eval text --mode cross" in response.json()["detail"]
        assert (await api.get("/v1/evaluations")).json() == []
        await api.post("/v1/evaluations", json=SUMMARY)
        other = await api.get("/v1/evaluations/latest", params={"dataset": "humaneval"})
        assert other.status_code == 404
        assert "of the dataset humaneval" in other.json()["detail"]
        assert "crosscheck eval humaneval --mode cross" in other.json()["detail"]


def mode_with(**changes) -> list[dict]:
    return [{**SINGLE, **changes}]


BIG = "x" * (MAX_CONFIG_BYTES + 1)


# Each bad summary, and the field its 422 names (one app for them all: each start costs).
BAD = [
    (summary(modes=mode_with(mode="double")), "mode"),
    (summary(modes=[SINGLE, SINGLE]), "modes"),
    (summary(modes=[]), "modes"),
    (summary(modes=mode_with(score=-0.1)), "score"),
    (summary(modes=mode_with(score=1.5)), "score"),
    (summary(modes=mode_with(cost_usd=-1)), "cost_usd"),
    (summary(modes=mode_with(cost_usd=float("nan"))), "cost_usd"),
    (summary(modes=mode_with(latency_p95_s=float("inf"))), "latency_p95_s"),
    (summary(modes=mode_with(latency_p50_s=-0.5)), "latency_p50_s"),
    (summary(modes=mode_with(rounds=-1)), "rounds"),
    (summary(modes=mode_with(tokens_total=-5)), "tokens_total"),
    (summary(modes=mode_with(items=-1)), "items"),
    (summary(modes=mode_with(escalations=-1)), "escalations"),
    (summary(modes=mode_with(seen_by_person=2)), "seen_by_person"),
    (summary(modes=mode_with(passed=5)), "modes"),
    (summary(modes=mode_with(actor=["m"] * 21)), "actor"),
    (summary(modes=mode_with(config={"note": BIG})), "config"),
    (summary(items=-4), "items"),
    (summary(limit=0), "limit"),
    (summary(dataset="Text Set!"), "dataset"),
    (summary(commit="not-a-commit"), "commit"),
    (summary(config={"note": BIG}), "config"),
    (summary(started_at="2026-11-30T11:00:00Z"), "finished_at"),
    (summary(colour="red"), "colour"),
    (intercept_summary(0.7, modes=[SINGLE]), "body"),
    (intercept_summary(0.7, modes=[SINGLE, {**SINGLE, "mode": "critic"}]), "body"),
    ({k: v for k, v in SUMMARY.items() if k != "finished_at"}, "finished_at"),
]


class TestBadSummaries:
    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_each_is_a_422_naming_the_field(self, api):
        for body, field in BAD:
            # as text: json.dumps writes NaN and Infinity, which httpx would refuse to send
            response = await api.post(
                "/v1/evaluations",
                content=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code == 422, (field, response.text)
            error = response.json()["detail"][0]
            assert field in [str(p) for p in error["loc"]], (field, error)
        assert (await api.get("/v1/evaluations")).json() == []

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_the_messages_say_what_is_wrong(self, api):
        sent = await api.post("/v1/evaluations", json=summary(config={"note": BIG}))
        assert f"at most {MAX_CONFIG_BYTES} are kept" in sent.json()["detail"][0]["msg"]
        sent = await api.post("/v1/evaluations", json=summary(modes=[SINGLE, SINGLE]))
        assert "single is repeated" in sent.json()["detail"][0]["msg"]
        sent = await api.post("/v1/evaluations", json=summary(modes=mode_with(mode="double")))
        assert "'single', 'self', 'cross' or 'critic'" in sent.json()["detail"][0]["msg"]
        sent = await api.post("/v1/evaluations", json=summary(started_at="2026-12-01T00:00:00Z"))
        assert "started_at is after finished_at" in sent.json()["detail"][0]["msg"]

    async def test_a_configuration_of_exactly_the_limit_is_kept_one_byte_more_is_not(self, api):
        padding = MAX_CONFIG_BYTES - len(json.dumps({"note": ""}))
        at_limit = {"note": "x" * padding}
        assert len(json.dumps(at_limit).encode()) == MAX_CONFIG_BYTES
        kept = await api.post("/v1/evaluations", json=summary(config=at_limit))
        assert kept.status_code == 201, kept.text
        over = {"note": "x" * (padding + 1)}
        assert (await api.post("/v1/evaluations", json=summary(config=over))).status_code == 422

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_a_body_past_the_request_limit_is_a_413(self, api):
        body = json.dumps(summary(config={"note": "x" * 1_100_000}))
        response = await api.post(
            "/v1/evaluations", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 413

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_bad_queries_are_422(self, api):
        for params in ({"limit": 0}, {"limit": 101}, {"dataset": "../etc"}, {"limit": "many"}):
            response = await api.get("/v1/evaluations", params=params)
            assert response.status_code == 422, params

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_the_limit_edges_are_accepted(self, api):
        for limit in (1, 100):
            response = await api.get("/v1/evaluations", params={"limit": limit})
            assert response.status_code == 200


class TestRoles:
    async def test_services_publish_reviewers_read_and_nobody_else(self, api):
        service = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        reviewer = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        published = await api.post("/v1/evaluations", json=SUMMARY, headers=service)
        assert published.status_code == 201, published.text
        assert published.json()["published_by"] == "service for tests"
        refused = await api.post("/v1/evaluations", json=SUMMARY, headers=reviewer)
        assert refused.status_code == 403
        assert "service" in refused.json()["detail"]
        for headers in (reviewer, service):
            assert (await api.get("/v1/evaluations", headers=headers)).status_code == 200
            latest = await api.get("/v1/evaluations/latest", headers=headers)
            assert latest.json()["id"] == published.json()["id"]
        assert len((await api.get("/v1/evaluations")).json()) == 1

    async def test_a_service_reads_only_the_evaluations_it_published(self, api):
        alice = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        bob = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        published = await api.post("/v1/evaluations", json=SUMMARY, headers=alice)
        assert published.status_code == 201, published.text
        assert (await api.get("/v1/evaluations", headers=bob)).json() == []
        assert (await api.get("/v1/evaluations/latest", headers=bob)).status_code == 404
        mine = await api.get("/v1/evaluations", headers=alice)
        assert [e["id"] for e in mine.json()] == [published.json()["id"]]

    async def test_no_token_or_a_bad_one_is_401(self, api):
        for method, path in (
            ("POST", "/v1/evaluations"),
            ("GET", "/v1/evaluations"),
            ("GET", "/v1/evaluations/latest"),
        ):
            for headers in ({"Authorization": ""}, {"Authorization": "Bearer nope-nope-nope"}):
                response = await api.request(method, path, json=SUMMARY, headers=headers)
                assert response.status_code == 401, (method, path, headers)


ALERTS = Path(__file__).parents[2] / "infra" / "prometheus" / "crosscheck-alerts.yml"


def intercept_rule() -> promql.Node:
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    [expr] = [r["expr"] for r in rules if r["alert"] == "CrosscheckInterceptRateLow"]
    return promql.parse(expr)


async def gauge(api) -> dict:
    """crosscheck_intercept_rate as scraped (empty: not exposed)."""
    response = await api.get("/metrics")
    assert response.status_code == 200
    return promql.samples(response.text).get("crosscheck_intercept_rate", {})


class TestInterceptRate:
    """`crosscheck eval intercept` publishes as the dataset intercept, one mode (critic)
    whose score is the rate; /metrics exposes the latest as a gauge the alert reads."""

    async def test_its_history_reads_back_newest_first_and_the_latest_loop_one_stays(self, api):
        for rate, day in ((0.6, "28"), (0.8, "30"), (0.7, "29")):
            body = intercept_summary(rate, finished_at=f"2026-11-{day}T10:00:00Z")
            created = await api.post("/v1/evaluations", json=body)
            assert created.status_code == 201, created.text
        early = summary(started_at=None, finished_at="2026-11-01T00:00:00Z")
        loop = await api.post("/v1/evaluations", json=early)
        history = await api.get("/v1/evaluations", params={"dataset": "intercept"})
        assert [e["modes"][0]["score"] for e in history.json()] == [0.8, 0.7, 0.6]
        assert history.json()[0]["modes"][0]["mode"] == "critic"
        latest = await api.get("/v1/evaluations/latest")
        assert latest.json()["dataset"] == "intercept"
        # what the console's "Latest evaluation" reads: the loop's, however many came since
        latest = await api.get("/v1/evaluations/latest", params={"exclude": "intercept"})
        assert latest.json()["id"] == loop.json()["id"]

    async def test_none_of_another_set_says_so(self, api):
        await api.post("/v1/evaluations", json=intercept_summary(0.7))
        response = await api.get("/v1/evaluations/latest", params={"exclude": "intercept"})
        assert response.status_code == 404
        assert "other than intercept" in response.json()["detail"]
        response = await api.get("/v1/evaluations/latest", params={"dataset": "humaneval"})
        assert "crosscheck eval humaneval --mode cross" in response.json()["detail"]
        await api.post("/v1/evaluations", json=summary())
        none = await api.get("/v1/evaluations/latest", params={"exclude": "text"})
        assert none.json()["dataset"] == "intercept"
        bad = await api.get("/v1/evaluations/latest", params={"exclude": "../etc"})
        assert bad.status_code == 422

    async def test_the_intercept_set_takes_only_the_critic_mode(self, api):
        refused = await api.post("/v1/evaluations", json=intercept_summary(0.7, modes=[SINGLE]))
        assert refused.status_code == 422
        assert "the intercept dataset has one mode, critic" in refused.text
        assert await gauge(api) == {}

    async def test_the_gauge_is_the_latest_published_rate_and_the_alert_reads_it(self, api):
        rule = intercept_rule()
        assert await gauge(api) == {}  # nothing published: no gauge, so no alert either
        assert promql.evaluate(rule, {}) == {}
        await api.post("/v1/evaluations", json=summary(finished_at="2026-12-01T00:00:00Z"))
        assert await gauge(api) == {}  # a loop evaluation is not an intercept rate

        await api.post("/v1/evaluations", json=intercept_summary(0.5))
        scraped = await gauge(api)
        assert scraped == {frozenset(): 0.5}
        fired = promql.evaluate(rule, {"crosscheck_intercept_rate": scraped})
        assert fired == {frozenset(): 0.5}

        later = intercept_summary(0.65, finished_at="2026-11-30T11:00:00Z")
        await api.post("/v1/evaluations", json=later)
        scraped = await gauge(api)
        assert scraped == {frozenset(): 0.65}  # on the target: met, no alert
        assert promql.evaluate(rule, {"crosscheck_intercept_rate": scraped}) == {}

        # sent now, but finished before the one above: not the latest
        earlier = intercept_summary(0.1, finished_at="2026-11-29T00:00:00Z")
        await api.post("/v1/evaluations", json=earlier)
        assert await gauge(api) == {frozenset(): 0.65}

    async def test_the_gauge_survives_a_restart(self, orchestrator_settings, peers):
        from orchestrator.app import create_app
        from tests.orchestrator.conftest import ADMIN_TOKEN
        from tests.support.apps import serving

        async with serving(
            create_app(orchestrator_settings, peer_transports=peers), ADMIN_TOKEN
        ) as api:
            await api.post("/v1/evaluations", json=intercept_summary(0.4))
            assert await gauge(api) == {frozenset(): 0.4}
        async with serving(
            create_app(orchestrator_settings, peer_transports=peers), ADMIN_TOKEN
        ) as api:
            assert await gauge(api) == {frozenset(): 0.4}

    def test_a_database_it_cannot_read_leaves_out_the_gauge_not_the_metrics(self, tmp_path):
        import sqlalchemy as sa
        from prometheus_client import generate_latest

        from orchestrator.evaluations.service import latest_intercept_rate
        from orchestrator.metrics import Metrics

        metrics = Metrics()
        nowhere = sa.create_engine(f"sqlite:///{tmp_path}/missing/dir/crosscheck.sqlite")
        metrics.read_intercept_rate(lambda: latest_intercept_rate(nowhere))
        text = generate_latest(metrics.registry).decode()
        assert "crosscheck_versions_settled_total" in text
        assert "crosscheck_intercept_rate" not in text

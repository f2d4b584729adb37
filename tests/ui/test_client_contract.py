"""The console's client against the real Orchestrator API (SQLite, real Actor and Critic apps on
the fake model server, served on loopback), compared with the hand-written fake the console's
AppTests use: every field the fake hands the pages must come back from the API, with the same
JSON type, so the pages cannot be tested against shapes the API no longer has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from console.client import ApiError, ConsoleClient
from tests.orchestrator import conftest as orchestrator_fixtures
from tests.orchestrator.conftest import ADMIN_TOKEN, start, wait_for
from tests.support.apps import uvicorn_serving
from tests.support.servers import free_port
from tests.ui import fakes

# The Orchestrator's own fixtures; `database_url` and `sandbox_url` below narrow them.
peers = orchestrator_fixtures.peers
orchestrator_settings = orchestrator_fixtures.orchestrator_settings
orchestrator_app = orchestrator_fixtures.orchestrator_app
peer_overrides = orchestrator_fixtures.peer_overrides

PASSWORD = "correct horse battery staple"
PASSES = "Explain why the sky is blue."  # the fake critic passes round 2
ESCALATES = "Explain tides."  # with max_rounds 1: escalated, max_rounds


@pytest.fixture
def database_url(tmp_path):
    return f"sqlite:///{tmp_path}/crosscheck.sqlite"


@pytest.fixture
def sandbox_url():
    """These runs have no tests to execute: no sandbox is started (nothing listens here)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
async def url(orchestrator_app):
    async with uvicorn_serving(orchestrator_app) as served:
        yield served


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


# Objects keyed by data (a status, a stop reason, a role), not by field name: each of the
# fake's values is compared with one of the API's, whatever their keys.
MAPS = (
    ".runs_by_status",
    ".runs_by_stop_reason",
    ".usage",
    ".models",
    ".critiques_by_depth",
)


def drift(fake: Any, real: Any, where: str = "") -> list[str]:
    """Where the fake's answer has a field the real one lacks, or a different JSON type.

    ``None`` on either side matches anything (a field may be empty in one example and set in
    the other), and a field the fake sets to ``None`` may be absent (the pages read those with
    ``.get``); lists are compared element by element against the real list's elements.
    """
    if fake is None or real is None:
        return []
    if json_type(fake) != json_type(real):
        return [f"{where or '<body>'}: the fake has {json_type(fake)}, the API {json_type(real)}"]
    problems: list[str] = []
    if isinstance(fake, dict) and where.endswith(MAPS):
        if real:
            sample = next(iter(real.values()))
            for key, value in fake.items():
                problems += drift(value, real.get(key, sample), f"{where}[{key!r}]")
    elif isinstance(fake, dict):
        for key, value in fake.items():
            if key not in real:
                if value is not None:
                    problems.append(f"{where}.{key}: missing from the API's answer")
            else:
                problems += drift(value, real[key], f"{where}.{key}")
    elif isinstance(fake, list) and real:
        for index, value in enumerate(fake):
            problems += drift(value, real[min(index, len(real) - 1)], f"{where}[{index}]")
    return problems


def open_fields(fake: Any, real: Any) -> list[str]:
    """Fields of the fake that stay None in the API's answer (so ``drift`` could not compare
    them); returned so a test can check that none of the interesting ones are left out."""
    if not isinstance(fake, dict) or not isinstance(real, dict):
        return []
    return [k for k, v in fake.items() if v is not None and real.get(k) is None]


def logged_out(url: str, call: Callable[[ConsoleClient], Any]):
    """The console's client before logging in (no token), in a worker thread."""

    def work():
        client = ConsoleClient(url)
        try:
            return call(client)
        finally:
            client.close()

    return asyncio.to_thread(work)


class Console:
    """The console's client used from a worker thread, as Streamlit does, beside the server."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token

    async def __call__(self, call: Callable[[ConsoleClient], Any], token: str | None = None):
        def work():
            client = ConsoleClient(self.url, token or self.token)
            try:
                return call(client)
            finally:
                client.close()

        return await asyncio.to_thread(work)


@pytest.fixture
async def api(url):
    """The admin's view of the same server (starts the runs the console then looks at)."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        yield http


async def add_account(api, username: str) -> None:
    response = await api.post("/v1/accounts", json={"username": username, "password": PASSWORD})
    assert response.status_code == 201, response.text


@pytest.fixture
async def console(url, api):
    """The console's client holding a reviewer's session token, as after logging in."""
    await add_account(api, "ana")
    login = await logged_out(url, lambda c: c.login("ana", PASSWORD))
    return Console(url, login["token"])


class TestAuth:
    async def test_login_answers_what_the_console_keeps(self, url, api):
        await add_account(api, "bo")
        real = await logged_out(url, lambda c: c.login("bo", PASSWORD))
        fake = fakes.FakeClient().login("bo", "secret")
        assert drift(fake, real) == []
        assert (real["name"], real["role"]) == ("bo", "reviewer")

    async def test_a_bad_password_is_the_401_the_fake_raises(self, url, api):
        await add_account(api, "bo")

        def bad_login(client):
            try:
                client.login("bo", "wrong")
            except ApiError as exc:
                return exc
            raise AssertionError("no error")

        real = await logged_out(url, bad_login)
        with pytest.raises(ApiError) as fake:
            fakes.FakeClient().login("bo", "wrong")
        assert (real.status, real.error) == (fake.value.status, fake.value.error)

    async def test_info_names_the_model_mode_before_anyone_logs_in(self, url):
        real = await logged_out(url, lambda c: c.info())
        assert drift(fakes.FakeClient().info(), real) == []
        assert real["model_mode"] == "providers"  # a standalone orchestrator's default

    async def test_who_am_i_names_the_session_and_refuses_an_unknown_token(self, console):
        me = await console(lambda c: c.who_am_i())
        assert drift(fakes.FakeClient().who_am_i(), me) == []
        assert (me["name"], me["role"]) == ("ana", "reviewer")

        def refused(client):
            try:
                client.who_am_i()
            except ApiError as exc:
                return exc
            raise AssertionError("no error")

        real = await console(refused, token="cc_unknown-token-0123")
        assert real.status == 401


class TestReviews:
    async def test_queue_item_detail_claim_release_and_decision(self, console, api, fake_model):
        run_id = await start(api, task=PASSES, policy={"review": "first_round"})
        await wait_for(api, run_id)
        page = await console(lambda c: c.list_reviews(status="pending"))
        fake_page = fakes.FakeClient().list_reviews(status="pending")
        assert drift(fake_page, page) == []
        [item] = page["items"]
        assert (item["run_id"], item["kind"]) == (run_id, "pre_critique")

        detail = await console(lambda c: c.get_review(item["id"]))
        fake_detail = fakes.review_detail(fakes.review_item(kind="pre_critique"))
        assert drift(fake_detail, detail) == []

        claimed = await console(lambda c: c.claim(item["id"]))
        fake_claimed = fakes.FakeClient([fakes.review_item(item["id"])]).claim(item["id"])
        assert drift(fake_claimed, claimed) == []
        assert (claimed["status"], claimed["claimed_by_name"]) == ("claimed", "ana")
        released = await console(lambda c: c.release(item["id"]))
        assert drift(fakes.review_item(), released) == []
        assert released["status"] == "pending"

        await console(lambda c: c.claim(item["id"]))
        decided = await console(
            lambda c: c.decide(
                item["id"],
                action="comment",
                idempotency_key="k-1",
                comment="Name Rayleigh scattering.",
                lesson=True,
                lesson_scope="physics",
            )
        )
        fake_decided = fakes.FakeClient([fakes.review_item(item["id"])]).decide(
            item["id"], action="comment"
        )
        assert drift(fake_decided, decided) == []
        assert (decided["review_id"], decided["run_id"], decided["action"]) == (
            item["id"],
            run_id,
            "comment",
        )

    async def test_an_escalation_detail(self, console, api, fake_model):
        run_id = await start(
            api, task=ESCALATES, policy={"max_rounds": 1, "review": "on_escalation"}
        )
        await wait_for(api, run_id)
        [item] = (await console(lambda c: c.list_reviews(kind="escalation")))["items"]
        detail = await console(lambda c: c.get_review(item["id"]))
        fake_detail = fakes.review_detail(fakes.review_item(kind="escalation"))
        assert drift(fake_detail, detail) == []
        assert detail["context"]["stop_reason"] == "max_rounds"
        assert [r["number"] for r in detail["context"]["rounds"]] == [1]

    async def test_an_unknown_review_is_the_404_the_fake_raises(self, console):
        def missing(client):
            try:
                client.get_review("rev_nope")
            except ApiError as exc:
                return exc
            raise AssertionError("no error")

        real = await console(missing)
        with pytest.raises(ApiError) as fake:
            fakes.FakeClient().get_review("rev_nope")
        assert (real.status, real.error) == (fake.value.status, fake.value.error)


class TestRunsEventsStatsLessons:
    async def test_runs_and_a_run(self, console, api, fake_model):
        run_id = await start(api, task=PASSES)
        await wait_for(api, run_id)
        # a reviewer lists the runs that were in review; an admin (the console's token login
        # with the admin token) lists them all
        assert (await console(lambda c: c.list_runs(q="sky")))["items"] == []
        page = await console(lambda c: c.list_runs(q="sky"), token=ADMIN_TOKEN)
        assert drift(fakes.FakeClient().list_runs(), page) == []
        assert [r["id"] for r in page["items"]] == [run_id]

        run = await console(lambda c: c.get_run(run_id), token=ADMIN_TOKEN)
        assert drift(fakes.FakeClient().get_run("run-1"), run) == []
        assert drift(fakes.run_detail(), run) == []
        assert [r["number"] for r in run["rounds"]] == [1, 2]
        # the fields the fake fills in that a text run left empty, and why that is fine
        assert open_fields(fakes.run_detail()["rounds"][0], run["rounds"][0]) == ["evaluation"]

    async def test_events(self, console, api, fake_model):
        # a reviewer's feed: the events of runs in review, not of the others
        plain = await start(api, task=PASSES)
        await wait_for(api, plain)
        run_id = await start(api, task=PASSES, policy={"review": "before_critique"})
        await wait_for(api, run_id, statuses={"awaiting_review"})
        events = await console(lambda c: c.events(since=0))
        assert drift(fakes.FakeClient().events(since=0), events) == []
        assert {e["run_id"] for e in events} == {run_id}
        later = await console(lambda c: c.events(since=events[-1]["seq"]))
        assert later == []
        # one run's events, as the Runs page reads them, in the fake's shape
        of_run = await console(lambda c: c.events(since=0, limit=2, run_id=run_id))
        assert len(of_run) == 2
        assert {e["run_id"] for e in of_run} == {run_id}
        assert (
            drift(fakes.event(1, "run.created", {"kind": "text"}, run_id=run_id), of_run[0]) == []
        )
        rest = await console(lambda c: c.events(since=of_run[-1]["seq"], run_id=run_id))
        assert [e["seq"] for e in rest] == [
            e["seq"] for e in events if e["seq"] > of_run[-1]["seq"]
        ]

    async def test_stats(self, console, api, fake_model):
        await wait_for(api, await start(api, task=PASSES))
        await wait_for(api, await start(api, task=ESCALATES, policy={"max_rounds": 1}))
        body = await console(lambda c: c.stats())
        assert drift(fakes.stats_body(), body) == []
        assert drift(fakes.EMPTY_STATS, body) == []
        since = datetime.now(UTC) + timedelta(days=1)
        assert (await console(lambda c: c.stats(since=since)))["runs_total"] == 0

    async def test_lessons_and_retiring_one(self, console, api, fake_model):
        run_id = await start(api, task=PASSES, policy={"review": "first_round"})
        await wait_for(api, run_id)
        [item] = (await console(lambda c: c.list_reviews(status="pending")))["items"]
        await console(lambda c: c.claim(item["id"]))
        await console(
            lambda c: c.decide(
                item["id"],
                action="comment",
                idempotency_key="k-2",
                comment="Name Rayleigh scattering.",
                lesson=True,
                lesson_scope="physics",
            )
        )
        lessons = await console(lambda c: c.list_lessons(scope="physics"))
        assert drift([fakes.lesson()], lessons) == []
        [lesson] = lessons
        assert (lesson["scope"], lesson["author"], lesson["retired"]) == ("physics", "ana", False)

        retired = await console(lambda c: c.retire_lesson(lesson["id"]))
        assert drift(fakes.lesson(), retired) == []
        assert retired["retired"] is True
        assert await console(lambda c: c.list_lessons(scope="physics")) == []
        with_retired = await console(lambda c: c.list_lessons(include_retired=True))
        assert [(x["id"], x["retired"]) for x in with_retired] == [(lesson["id"], True)]


def refused(call: Callable[[ConsoleClient], Any]) -> Callable[[ConsoleClient], ApiError]:
    """``call`` expected to fail: its ApiError."""

    def work(client: ConsoleClient) -> ApiError:
        try:
            call(client)
        except ApiError as exc:
            return exc
        raise AssertionError("no error")

    return work


def fake_refusal(call: Callable[[fakes.FakeClient], Any]) -> ApiError:
    fake = fakes.FakeClient(knowledge=[fakes.knowledge_entry()])
    with pytest.raises(ApiError) as raised:
        call(fake)
    return raised.value


class TestKnowledge:
    async def test_an_admin_writes_entries_and_a_reviewer_reads_them(self, console):
        admin = lambda call: console(call, token=ADMIN_TOKEN)  # noqa: E731
        created = await admin(
            lambda c: c.create_knowledge(
                kind="rule_anchor",
                title="Statutes: cite the jurisdiction",
                body="Every statute named must say which jurisdiction it belongs to.",
                profiles=["legal"],
                weight=0.9,
            )
        )
        fake = fakes.FakeClient()
        fake_created = fake.create_knowledge(
            kind="rule_anchor", title="t", body="b", profiles=["legal"], weight=0.9
        )
        assert drift(fake_created, created) == []
        assert drift(fakes.knowledge_entry(), created) == []
        assert (created["profiles"], created["weight"]) == (["legal"], 0.9)
        assert created["retired"] is False
        other = await admin(
            lambda c: c.create_knowledge(
                kind="logic_pitfall", title="Dosage units", body="mg and mcg differ."
            )
        )

        # a reviewer reads, filters and searches
        listed = await console(lambda c: c.list_knowledge())
        assert drift([fakes.knowledge_entry()], listed) == []
        assert [e["id"] for e in listed] == [other["id"], created["id"]]  # newest first
        legal = await console(lambda c: c.list_knowledge(profile="legal"))
        assert {e["id"] for e in legal} == {created["id"], other["id"]}  # other: every profile
        medical = await console(lambda c: c.list_knowledge(profile="medical", kind="rule_anchor"))
        assert medical == []
        pitfalls = await console(lambda c: c.list_knowledge(kind="logic_pitfall"))
        assert [e["id"] for e in pitfalls] == [other["id"]]
        found = await console(
            lambda c: c.search_knowledge("Which jurisdiction does this statute belong to?")
        )
        fake_found = fakes.FakeClient(knowledge=[fakes.knowledge_entry()]).search_knowledge(
            "statute jurisdiction"
        )
        assert drift(fake_found, found) == []
        assert found[0]["entry"]["id"] == created["id"]
        one = await console(lambda c: c.get_knowledge(created["id"]))
        assert drift(fakes.knowledge_entry(), one) == []

        # the reviewer's writes are refused (the page does not offer them)
        denied = await console(
            refused(lambda c: c.create_knowledge(kind="lesson", title="t", body="b"))
        )
        assert denied.status == 403
        denied = await console(refused(lambda c: c.retire_knowledge(created["id"])))
        assert denied.status == 403

        # an edit, a retire and bringing it back
        edited = await admin(lambda c: c.update_knowledge(created["id"], title="Cite it"))
        assert drift(fake.update_knowledge(fake_created["id"], title="Cite it"), edited) == []
        assert (edited["title"], edited["body"]) == ("Cite it", created["body"])
        retired = await admin(lambda c: c.retire_knowledge(created["id"]))
        assert drift(fake.retire_knowledge(fake_created["id"]), retired) == []
        assert retired["retired"] is True
        assert [e["id"] for e in await console(lambda c: c.list_knowledge())] == [other["id"]]
        every = await console(lambda c: c.list_knowledge(include_retired=True))
        assert {e["id"] for e in every} == {created["id"], other["id"]}
        back = await admin(lambda c: c.update_knowledge(created["id"], retired=False))
        assert back["retired"] is False

    async def test_refusals_are_the_ones_the_fake_raises(self, console):
        admin = lambda call: console(call, token=ADMIN_TOKEN)  # noqa: E731
        cases: list[Callable[[Any], Any]] = [
            lambda c: c.create_knowledge(kind="rule_anchor", title="   ", body="b"),
            lambda c: c.create_knowledge(kind="rule_anchor", title="t", body=""),
            lambda c: c.create_knowledge(kind="rule_anchor", title="t", body="b", weight=1.5),
            lambda c: c.create_knowledge(kind="rule_anchor", title="t", body="b", weight=-0.1),
            lambda c: c.create_knowledge(kind="rumour", title="t", body="b"),
            lambda c: c.get_knowledge("kn_nope"),
            lambda c: c.retire_knowledge("kn_nope"),
        ]
        for call in cases:
            real = await admin(refused(call))
            fake = fake_refusal(call)
            assert (real.status, real.error, real.detail) == (
                fake.status,
                fake.error,
                fake.detail,
            )
        entry = await admin(lambda c: c.create_knowledge(kind="lesson", title="t", body="b"))
        edits: list[dict[str, Any]] = [{"title": " "}, {"weight": 2.0}, {}]
        for fields in edits:

            def edit(client: Any, entry_id: str, f: dict[str, Any] = fields) -> Any:
                return client.update_knowledge(entry_id, **f)

            real = await admin(refused(lambda c: edit(c, entry["id"])))
            fake = fake_refusal(lambda c: edit(c, "kn_rule1"))
            assert (real.status, real.error, real.detail) == (
                fake.status,
                fake.error,
                fake.detail,
            )


class TestEvaluations:
    async def test_the_latest_evaluation_has_the_shape_the_fake_hands_the_page(self, console, api):
        from tests.orchestrator.test_evaluations import SUMMARY

        assert await console(lambda c: c.latest_evaluation()) is None
        response = await api.post("/v1/evaluations", json=SUMMARY)
        assert response.status_code == 201, response.text
        real = await console(lambda c: c.latest_evaluation())
        assert real["id"] == response.json()["id"]
        assert drift(fakes.evaluation_body(), real) == []
        assert fakes.FakeClient().latest_evaluation() is None  # as the API before any

    async def test_the_intercept_history_has_the_shape_the_fake_hands_the_page(self, console, api):
        from tests.orchestrator.test_evaluations import SUMMARY, intercept_summary

        assert await console(lambda c: c.intercept_history()) == []
        for rate in (0.5, 0.7):
            body = intercept_summary(rate, finished_at=f"2026-11-30T11:0{int(rate * 10)}:00Z")
            assert (await api.post("/v1/evaluations", json=body)).status_code == 201
        loop = await api.post("/v1/evaluations", json=SUMMARY)  # finished before both
        real = await console(lambda c: c.intercept_history())
        assert [e["modes"][0]["score"] for e in real] == [0.7, 0.5]
        for fake in fakes.FakeClient(
            intercepts=[fakes.intercept_body(0.7, "x")]
        ).intercept_history():
            assert drift(fake, real[0]) == []
        # the loop's latest evaluation is still the one the other tab shows
        assert (await console(lambda c: c.latest_evaluation()))["id"] == loop.json()["id"]


class TestDriftIsCaught:
    """The comparison itself: a renamed field or a changed type is reported."""

    def test_a_missing_field_and_a_changed_type(self):
        fake = {"items": [{"id": "a", "round": 2}], "next_cursor": None}
        real = {"items": [{"ident": "a", "round": "2"}], "next_cursor": "c"}
        assert drift(fake, real) == [
            ".items[0].id: missing from the API's answer",
            ".items[0].round: the fake has number, the API string",
        ]

    def test_none_matches_either_way(self):
        assert drift({"a": None, "b": 1, "c": None}, {"a": 3, "b": None}) == []

    def test_maps_compare_values_not_keys(self):
        fake = {"runs_by_status": {"revising": 1}, "usage": {"actor": {"input_tokens": 1}}}
        assert drift(fake, {"runs_by_status": {"succeeded": 2}, "usage": {}}) == []
        assert drift(fake, {"runs_by_status": {"succeeded": "2"}, "usage": {"critic": {}}}) == [
            ".runs_by_status['revising']: the fake has number, the API string",
            ".usage['actor'].input_tokens: missing from the API's answer",
        ]

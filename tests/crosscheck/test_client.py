"""The public Python client, sync and async, against a real Orchestrator on SQLite with real
Actor and Critic apps on the fake model server: outcomes, a person's turn, typed errors."""

import asyncio
import traceback

import httpx
import pytest

import crosscheck
from crosscheck import (
    AsyncCrosscheck,
    Conflict,
    Crosscheck,
    CrosscheckError,
    NeedHumanIntervention,
    NotFound,
    RunFailed,
    RunTimeout,
    Unauthorized,
    ValidationFailed,
)
from crosscheck import client as client_module
from crosscheck.client import (
    ApiError,
    InvalidModelOutput,
    ServerError,
    UpstreamUnavailable,
    error_class,
)
from tests.orchestrator.conftest import ADMIN_TOKEN, start
from tests.support.servers import free_port

SKY = "Explain why the sky is blue."
TIDES = "Explain tides."
BAD_TOKEN = "cc_not-a-real-token-but-secret-0123456789"


def in_thread(url: str, call, token: str = ADMIN_TOKEN, **options):
    """The sync client beside the server on this test's event loop."""

    def work():
        with Crosscheck(url, token, **options) as cc:
            return call(cc)

    return asyncio.to_thread(work)


def raised(call):
    """The exception ``call`` raises, so a thread can hand it back."""
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no exception")


def text_of(exc: BaseException) -> str:
    return str(exc) + repr(exc) + "".join(traceback.format_exception(exc))


def assert_escalated(exc, console: str = "http://127.0.0.1:8501") -> None:
    assert isinstance(exc, NeedHumanIntervention), exc
    assert isinstance(exc, CrosscheckError)
    assert exc.run_id.startswith("run_")
    assert exc.status == "escalated"
    assert exc.stop_reason == "max_rounds"
    assert exc.review_id
    assert exc.review_id.startswith("rev_")
    assert exc.console_url == f"{console}/review?review={exc.review_id}"
    assert exc.context["task"] == TIDES
    assert exc.context["stop_reason"] == "max_rounds"
    assert [r["number"] for r in exc.context["rounds"]] == [1]
    assert exc.run.final_output
    assert exc.review_id in str(exc)
    assert "max_rounds" in str(exc)


class TestSync:
    async def test_a_passing_run_returns_its_output(self, url, api):
        run = await in_thread(url, lambda cc: cc.run(SKY, timeout=60))
        assert run.status == "succeeded"
        assert run.stop_reason == "critic_pass"
        assert run.final_output
        stored = (await api.get(f"/v1/runs/{run.id}")).json()
        assert stored["final_output"] == run.final_output

    async def test_an_escalating_run_needs_a_person(self, url, api):
        exc = await in_thread(
            url, lambda cc: raised(lambda: cc.run(TIDES, policy={"max_rounds": 1}, timeout=60))
        )
        assert_escalated(exc)
        item = (await api.get(f"/v1/reviews/{exc.review_id}")).json()
        assert (item["run_id"], item["kind"], item["status"]) == (
            exc.run_id,
            "escalation",
            "pending",
        )
        assert item["context"] == exc.context

    async def test_a_run_paused_for_review_needs_a_person(self, url, api):
        exc = await in_thread(
            url,
            lambda cc: raised(lambda: cc.run(TIDES, policy={"review": "first_round"}, timeout=60)),
        )
        assert isinstance(exc, NeedHumanIntervention)
        assert exc.status == "awaiting_review"
        assert exc.stop_reason is None
        item = (await api.get(f"/v1/reviews/{exc.review_id}")).json()
        assert (item["run_id"], item["kind"], item["status"]) == (
            exc.run_id,
            "pre_critique",
            "pending",
        )
        assert exc.context == item["context"]
        assert exc.console_url == f"http://127.0.0.1:8501/review?review={exc.review_id}"

    async def test_no_wait_then_wait(self, url):
        def both(cc: Crosscheck):
            created = cc.run(SKY, wait=False)
            return created, cc.wait(created.id, timeout=60)

        created, run = await in_thread(url, both)
        assert set(created.model_dump()) == {"id", "status"}
        assert run.id == created.id
        assert run.status == "succeeded"

    async def test_wait_polls_without_a_websocket(self, url, api, monkeypatch):
        def refused(*args, **kwargs):
            raise ConnectionRefusedError("no websocket here")

        monkeypatch.setattr(client_module, "ws_connect", refused)
        run_id = await start(api, task=TIDES, policy={"max_rounds": 1})
        exc = await in_thread(url, lambda cc: raised(lambda: cc.wait(run_id, timeout=60)))
        assert_escalated(exc)
        assert exc.run_id == run_id

    async def test_a_cancelled_run_fails_and_a_slow_one_times_out(self, url, api, fake_model):
        fake_model.latency(2500)
        exc = await in_thread(url, lambda cc: raised(lambda: cc.run(SKY, timeout=1.5)))
        assert isinstance(exc, RunTimeout)
        assert isinstance(exc, TimeoutError)
        assert exc.last_status in {"queued", "drafting"}
        run_id = exc.run_id
        fake_model.latency(None)

        def cancel_and_wait(cc: Crosscheck):
            cc.cancel(run_id)
            return raised(lambda: cc.wait(run_id, timeout=60))

        failed = await in_thread(url, cancel_and_wait)
        assert isinstance(failed, RunFailed)
        assert (failed.run_id, failed.status, failed.stop_reason) == (
            run_id,
            "cancelled",
            "cancelled",
        )
        again = await in_thread(url, lambda cc: raised(lambda: cc.cancel(run_id)))
        assert isinstance(again, Conflict)
        assert again.status_code == 409

    async def test_an_idempotency_key_runs_once(self, url):
        def twice(cc: Crosscheck):
            first = cc.run(SKY, idempotency_key="same-run", timeout=60)
            return first, cc.run(SKY, idempotency_key="same-run", timeout=60)

        first, second = await in_thread(url, twice)
        assert first.id == second.id
        assert second.status == "succeeded"


class TestAsync:
    async def test_a_passing_run_returns_its_output(self, url):
        async with AsyncCrosscheck(url, ADMIN_TOKEN) as cc:
            run = await cc.run(SKY, timeout=60)
            assert run.status == "succeeded"
            assert run.final_output
            assert (await cc.get(run.id)).final_output == run.final_output

    async def test_an_escalating_run_needs_a_person(self, url, monkeypatch):
        monkeypatch.setenv("CROSSCHECK_CONSOLE_URL", "http://console.example:9000/")
        async with AsyncCrosscheck(url, ADMIN_TOKEN) as cc:
            with pytest.raises(NeedHumanIntervention) as info:
                await cc.run(TIDES, policy={"max_rounds": 1}, timeout=60)
            assert_escalated(info.value, console="http://console.example:9000")
            items = await cc.reviews(run_id=info.value.run_id)
            assert [i.id for i in items] == [info.value.review_id]

    async def test_a_paused_run_and_wait(self, url):
        async with AsyncCrosscheck(url, ADMIN_TOKEN) as cc:
            created = await cc.run(TIDES, policy={"review": "first_round"}, wait=False)
            with pytest.raises(NeedHumanIntervention) as info:
                await cc.wait(created.id, timeout=60)
            assert info.value.status == "awaiting_review"
            assert info.value.review_id
            assert (await cc.review(info.value.review_id)).kind == "pre_critique"

    async def test_errors_are_typed(self, url):
        async with AsyncCrosscheck(url, ADMIN_TOKEN) as cc:
            with pytest.raises(NotFound):
                await cc.get("run_missing")
            with pytest.raises(ValidationFailed) as info:
                await cc.run("", timeout=5)
            assert info.value.status_code == 422
        async with AsyncCrosscheck(url, BAD_TOKEN) as cc:
            with pytest.raises(Unauthorized) as unauthorized:
                await cc.run(SKY)
        assert BAD_TOKEN not in text_of(unauthorized.value)
        assert BAD_TOKEN not in repr(cc)


class TestErrors:
    async def test_an_unknown_run_is_not_found(self, url):
        exc = await in_thread(url, lambda cc: raised(lambda: cc.get("run_missing")))
        assert isinstance(exc, NotFound)
        assert isinstance(exc, ApiError)
        assert (exc.status_code, exc.error) == (404, "NotFound")
        assert "run run_missing does not exist" in str(exc)

    async def test_a_bad_task_is_a_validation_failure_with_the_servers_detail(self, url):
        exc = await in_thread(url, lambda cc: raised(lambda: cc.run("", timeout=5)))
        assert isinstance(exc, ValidationFailed)
        assert exc.status_code == 422
        assert exc.error == "ValidationError"
        assert any(item["loc"][-1] == "task" for item in exc.detail)
        assert str(exc).startswith("ValidationError (HTTP 422): task:")

    async def test_a_bad_token_is_unauthorized_and_never_shown(self, url):
        def attempt(cc: Crosscheck):
            return cc, raised(lambda: cc.get("run_x")), raised(lambda: cc.run(SKY))

        cc, on_get, on_run = await in_thread(url, attempt, token=BAD_TOKEN)
        for exc in (on_get, on_run):
            assert isinstance(exc, Unauthorized)
            assert exc.status_code == 401
            assert "invalid or revoked token" in str(exc)
            assert "the token came from the token argument" in str(exc)
            assert BAD_TOKEN not in text_of(exc)
        assert BAD_TOKEN not in repr(cc)
        assert BAD_TOKEN not in repr(cc.settings)

    async def test_an_unreachable_server_is_a_crosscheck_error(self):
        url = f"http://127.0.0.1:{free_port()}"
        exc = await in_thread(url, lambda cc: raised(lambda: cc.get("run_x")), token=BAD_TOKEN)
        assert type(exc) is CrosscheckError
        assert f"cannot reach the orchestrator at {url}" in str(exc)
        assert BAD_TOKEN not in text_of(exc)

    def test_a_token_a_server_echoes_is_scrubbed(self):
        settings = client_module.Settings("http://x", BAD_TOKEN, "CROSSCHECK_TOKEN")
        response = httpx.Response(
            401, json={"error": "Unauthorized", "detail": f"bad token {BAD_TOKEN}"}
        )
        exc = client_module.api_error(response, settings)
        assert isinstance(exc, Unauthorized)
        assert BAD_TOKEN not in text_of(exc)
        assert BAD_TOKEN not in str(exc.detail)

    @pytest.mark.parametrize(
        ("status", "name", "expected"),
        [
            (404, "NotFound", NotFound),
            (422, "ValidationError", ValidationFailed),
            (422, "InvalidModelOutput", InvalidModelOutput),
            (422, "WebhookRefused", ValidationFailed),  # unknown name: by status
            (409, "Conflict", Conflict),
            (503, "UpstreamUnavailable", UpstreamUnavailable),
            (503, "SandboxNotReady", UpstreamUnavailable),
            (599, "Whatever", ServerError),
            (418, "Teapot", ApiError),
        ],
    )
    def test_errors_map_by_name_then_status(self, status, name, expected):
        assert error_class(status, name) is expected

    def test_the_public_names(self):
        for name in ("Crosscheck", "AsyncCrosscheck", "NeedHumanIntervention", "RunTimeout"):
            assert name in crosscheck.__all__
        assert issubclass(NeedHumanIntervention, CrosscheckError)
        assert issubclass(RunTimeout, TimeoutError)

"""Signed webhooks through the API, to real receivers on loopback (SQLite and Postgres):
escalations arrive signed as they commit, not at the next poll; a receiver that was down
gets each message once per webhook-id; a delivery cut off by kill -9 is sent again after the
restart; dead letters are listed and redelivered; a run's callback_url hears that run; bad
input is a 422 naming the field; no secret is ever shown or logged."""

import asyncio
import base64
import io
import json
import logging
import os
import secrets
import signal
import time
from contextlib import ExitStack
from datetime import datetime

import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from standardwebhooks import Webhook

from orchestrator.app import create_app
from orchestrator.settings import OrchestratorSettings
from orchestrator.webhooks.secrets import SecretBox, derived_key
from orchestrator.webhooks.targets import StaticResolver
from shared.logging import configure_logging
from tests.orchestrator.conftest import ADMIN_TOKEN, mint, start, wait_for
from tests.orchestrator.test_crash_recovery import start_orchestrator, wait_until
from tests.orchestrator.test_decisions import claimed_by_reviewer, decide
from tests.orchestrator.webhook_receiver import Receiver
from tests.support.servers import free_port

SUB_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
PLATFORM_SECRET = "platform-signing-secret-" + secrets.token_hex(16)  # a plain string
FERNET_KEY = Fernet.generate_key().decode()
FINAL = {"succeeded", "escalated", "failed", "cancelled"}


@pytest.fixture
def webhook_overrides():
    return {}


@pytest.fixture
def orchestrator_settings(orchestrator_settings, webhook_overrides):
    values = {
        "webhook_secret": PLATFORM_SECRET,
        "webhook_key": FERNET_KEY,
        "webhook_retry_initial_s": 0.2,
        "webhook_retry_max_s": 0.5,
        "webhook_max_attempts": 30,
        "webhook_timeout_s": 2.0,
        "webhook_allow_hosts": "127.0.0.1",  # the receivers listen there
        **webhook_overrides,
    }
    return type(orchestrator_settings).model_validate(
        {**orchestrator_settings.model_dump(), **values}
    )


@pytest.fixture
def resolver():
    # No test looks a name up in real DNS; example.com is registered (never delivered to).
    return StaticResolver({"example.com": ["93.184.215.14"]})


@pytest.fixture
async def orchestrator_app(orchestrator_settings, peers, resolver):
    return create_app(orchestrator_settings, peer_transports=peers, webhook_resolver=resolver)


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


async def subscribe(api, url: str, events: list[str], secret: str = SUB_SECRET) -> dict:
    response = await api.post("/v1/webhooks", json={"url": url, "events": events, "secret": secret})
    assert response.status_code == 201, response.text
    return response.json()


async def deliveries(api, **params) -> list[dict]:
    response = await api.get("/v1/webhooks/deliveries", params=params)
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def until(predicate, timeout: float = 15.0, what: str = "a condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def verified(received, secret: str | bytes) -> dict:
    """The body, after the standard's own library checked the signature."""
    payload: dict = Webhook(secret).verify(received.body, received.headers)
    return payload


@pytest.mark.parametrize("webhook_overrides", [{"webhook_poll_s": 60.0}])
async def test_an_escalation_is_delivered_signed_without_waiting_for_a_poll(api, receiver):
    """The commit that escalates wakes the delivery worker: with its safety poll at 60 s the
    message still arrives at once (a worker that only polled would hold it for a minute)."""
    sub = await subscribe(api, receiver.url, ["run.escalated"])
    assert set(sub) == {"id", "url", "events", "created_at"}
    assert sub["events"] == ["run.escalated"]
    run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
    run = await wait_for(api, run_id, statuses=FINAL)
    assert (run["status"], run["stop_reason"]) == ("escalated", "max_rounds")
    [got] = await receiver.wait_for("run.escalated", timeout=60)
    escalated_at = datetime.fromisoformat(run["finished_at"]).timestamp()
    assert got.at - escalated_at < 30.0, f"took {got.at - escalated_at:.2f} s"

    payload = verified(got, SUB_SECRET)
    assert payload["type"] == "run.escalated"
    data = payload["data"]
    assert data["error"] == "NeedHumanIntervention"
    assert (data["run_id"], data["stop_reason"]) == (run_id, "max_rounds")
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    assert (data["review_id"], item["kind"]) == (item["id"], "escalation")
    context = data["context"]
    assert context["task"] == "Explain tides."
    assert context["stop_reason"] == "max_rounds"
    assert [r["number"] for r in context["rounds"]] == [1]
    assert got.headers["webhook-id"].startswith("msg_")
    assert got.headers["content-type"] == "application/json"

    # a subscription gets only what it names: no run.finished, no review.created
    await asyncio.sleep(0.5)
    assert [json.loads(r.body)["type"] for r in receiver.received] == ["run.escalated"]
    [row] = await deliveries(api, subscription_id=sub["id"])
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("delivered", 1, 200)
    assert row["id"] == got.headers["webhook-id"]


async def test_a_receiver_down_for_a_while_gets_each_message_once(api):
    down = Receiver()  # nothing listens on its port yet
    sub = await subscribe(api, down.url, ["run.escalated", "run.finished"])
    run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
    run = await wait_for(api, run_id, statuses=FINAL)
    queued_at = datetime.fromisoformat(run["finished_at"]).timestamp()

    async def retried():
        rows = await deliveries(api, subscription_id=sub["id"])
        return len(rows) == 2 and all(r["attempts"] >= 2 for r in rows)

    await until(retried, what="two failed attempts each")
    await asyncio.sleep(max(0.0, queued_at + 10.0 - time.time()))  # down for 10 s
    rows = await deliveries(api, subscription_id=sub["id"])
    assert all(r["status"] == "pending" and r["last_error"] for r in rows), rows
    down.start()
    try:
        await down.wait_for("run.escalated", timeout=60)
        await down.wait_for("run.finished", timeout=60)
        await asyncio.sleep(1.0)  # time for any duplicate to show up
    finally:
        down.stop()
    ids = [r.headers["webhook-id"] for r in down.received]
    assert len(ids) == len(set(ids)) == 2, ids
    rows = await deliveries(api, subscription_id=sub["id"])
    assert {r["id"] for r in rows} == set(ids)
    assert all(r["status"] == "delivered" and r["attempts"] > 2 for r in rows), rows
    finished = next(r for r in down.received if r.headers["webhook-id"] in ids)
    assert verified(finished, SUB_SECRET)["data"]["run_id"] == run_id


SLOW_TIMEOUT_S = 8.0


@pytest.mark.parametrize(
    "webhook_overrides",
    [
        {
            "webhook_concurrency": 2,
            "webhook_host_concurrency": 1,
            "webhook_timeout_s": SLOW_TIMEOUT_S,
        }
    ],
)
async def test_a_slow_receiver_holds_up_neither_runs_nor_other_receivers(
    api, receiver, webhook_overrides
):
    slow = Receiver().start()
    slow.holding = True  # accepts the connection, never answers (until the delivery times out)
    try:
        await subscribe(api, slow.url, ["run.escalated", "run.finished"])
        await subscribe(api, receiver.url, ["run.escalated"])
        runs = [await start(api, task="Explain tides.", policy={"max_rounds": 1}) for _ in range(3)]
        finished = {}
        for run_id in runs:
            run = await wait_for(api, run_id, statuses=FINAL, timeout=60)
            assert run["status"] == "escalated"
            finished[run_id] = datetime.fromisoformat(run["finished_at"]).timestamp()
        got = await receiver.wait_for("run.escalated", count=3, timeout=SLOW_TIMEOUT_S)
        for item in got:
            # waiting behind the slow receiver would mean waiting out its delivery timeout
            run_id = json.loads(item.body)["data"]["run_id"]
            late = item.at - finished[run_id]
            assert late < SLOW_TIMEOUT_S, f"{late:.2f} s late: it waited for the slow receiver"
        assert slow.peak == 1  # never more than one slot for the slow receiver
        assert len(slow.received) < 6  # and it is still holding deliveries back
    finally:
        slow.stop()


@pytest.mark.parametrize("webhook_overrides", [{"webhook_max_attempts": 2}])
async def test_a_dead_letter_is_listed_as_failed_and_redelivered(api, webhook_overrides):
    broken = Receiver(status=500).start()
    try:
        sub = await subscribe(api, broken.url, ["run.finished"])
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        await wait_for(api, run_id, statuses=FINAL)

        async def failed():
            return await deliveries(api, status="failed")

        [row] = await until(failed, what="the delivery to fail")
        assert (row["subscription_id"], row["run_id"]) == (sub["id"], run_id)
        assert (row["attempts"], row["last_status_code"], row["last_error"]) == (2, 500, "HTTP 500")
        assert row["next_attempt_at"] is None
        assert await deliveries(api, status="pending") == []
        first_ids = {r.headers["webhook-id"] for r in broken.received}
        assert first_ids == {row["id"]}
        assert len(broken.received) == 2

        broken.status = 204
        response = await api.post(f"/v1/webhooks/deliveries/{row['id']}/redeliver")
        assert response.status_code == 202, response.text
        assert (response.json()["status"], response.json()["attempts"]) == ("pending", 0)
        await broken.wait_for("run.finished", count=3, timeout=60)
        again = broken.received[-1]
        assert again.headers["webhook-id"] == row["id"]  # the same message: receivers dedupe
        assert again.body == broken.received[0].body
        assert verified(again, SUB_SECRET)["data"]["status"] == "escalated"

        async def delivered():
            return await deliveries(api, status="delivered")

        [done] = await until(delivered, what="the redelivery to be recorded")
        assert (done["id"], done["attempts"], done["last_status_code"]) == (row["id"], 1, 204)
    finally:
        broken.stop()
    assert (await api.post("/v1/webhooks/deliveries/msg_nope/redeliver")).status_code == 404


async def test_a_callback_url_hears_that_run_and_a_subscription_only_its_events(
    api, receiver, fake_model
):
    other = Receiver().start()
    try:
        await subscribe(api, other.url, ["review.decided"])
        run_id = await start(
            api,
            task="Explain tides.",
            policy={"review": "first_round"},
            callback_url=receiver.url,
        )
        await wait_for(api, run_id, statuses={"awaiting_review"})
        [created] = await receiver.wait_for("review.created", timeout=60)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        # the platform secret is a plain string: its UTF-8 bytes sign (bytes to the library)
        data = verified(created, PLATFORM_SECRET.encode())["data"]
        assert data == {
            "review_id": item["id"],
            "kind": "pre_critique",
            "run_id": run_id,
            "round": 1,
            "reason": "before_critique",
            "deadline": data["deadline"],
        }
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="approve")
        assert response.status_code == 200, response.text
        [decided] = await receiver.wait_for("review.decided", timeout=60)
        data = verified(decided, PLATFORM_SECRET.encode())["data"]
        assert (data["review_id"], data["run_id"], data["round"]) == (item["id"], run_id, 1)
        assert (data["kind"], data["action"]) == ("pre_critique", "approve")
        assert data["author"] == "reviewer for tests"
        [finished] = await receiver.wait_for("run.finished", timeout=60)
        data = verified(finished, PLATFORM_SECRET.encode())["data"]
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (data["status"], data["stop_reason"]) == ("succeeded", "review_approved")
        assert (data["final_output"], data["final_round"]) == (run["final_output"], 1)
        assert data["cost_usd"] == run["cost_usd"]
        # the subscriber of review.decided got that one event, not the rest
        [got] = await other.wait_for("review.decided", timeout=60)
        assert verified(got, SUB_SECRET)["data"]["review_id"] == item["id"]
        assert got.headers["webhook-id"] != decided.headers["webhook-id"]

        # another run without a callback_url sends nothing to this one's receiver
        before = len(receiver.received)
        quiet = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        await wait_for(api, quiet, statuses=FINAL)
        await asyncio.sleep(0.5)
        assert len(receiver.received) == before
        assert {json.loads(r.body)["type"] for r in receiver.received} == {
            "review.created",
            "review.decided",
            "run.finished",
        }
        assert len(other.received) == 1
    finally:
        other.stop()


@pytest.mark.sqlite_only  # a validation: the database plays no part
async def test_bad_input_is_a_422_naming_the_field_and_non_admins_get_403(api):
    async def refused(path: str, body: dict, field: str) -> dict:
        response = await api.post(path, json=body)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert any(field in d["loc"] for d in detail), detail
        return response.json()

    good = {"url": "https://example.com/hooks", "events": ["run.finished"], "secret": "x" * 24}
    for url in ("ftp://example.com/x", "https:///nohost", "not a url", "http://u:p@example.com/"):
        await refused("/v1/webhooks", {**good, "url": url}, "url")
    short = await refused("/v1/webhooks", {**good, "secret": "x" * 23}, "secret")
    assert "x" * 23 not in json.dumps(short)
    await refused("/v1/webhooks", {**good, "secret": "whsec_" + "A" * 30}, "secret")  # 22 bytes
    await refused("/v1/webhooks", {**good, "secret": "whsec_not*base64!" + "a" * 30}, "secret")
    unknown = await refused("/v1/webhooks", {**good, "events": ["run.exploded"]}, "events")
    assert "run.escalated" in json.dumps(unknown)  # the known ones are listed
    await refused("/v1/webhooks", {**good, "events": []}, "events")
    for url in ("ftp://example.com/cb", "javascript:alert(1)", "http://"):
        await refused("/v1/runs", {"task": "Explain tides.", "callback_url": url}, "callback_url")

    assert (await api.post("/v1/webhooks", json=good)).status_code == 201
    for role in ("service", "reviewer"):
        headers = {"Authorization": f"Bearer {await mint(api, role)}"}
        assert (await api.post("/v1/webhooks", json=good, headers=headers)).status_code == 403
        assert (await api.get("/v1/webhooks", headers=headers)).status_code == 403
        assert (await api.get("/v1/webhooks/deliveries", headers=headers)).status_code == 403
    [sub] = (await api.get("/v1/webhooks")).json()["items"]
    assert (await api.delete(f"/v1/webhooks/{sub['id']}")).status_code == 204
    assert (await api.delete(f"/v1/webhooks/{sub['id']}")).status_code == 404
    assert (await api.get("/v1/webhooks")).json()["items"] == []
    assert (await api.get("/v1/webhooks/deliveries", params={"status": "lost"})).status_code == 422


@pytest.mark.parametrize("webhook_overrides", [{"webhook_secret": None}])
async def test_a_callback_url_needs_the_platform_secret(api, webhook_overrides):
    response = await api.post(
        "/v1/runs", json={"task": "Explain tides.", "callback_url": "https://example.com/cb"}
    )
    assert response.status_code == 422, response.text
    [detail] = response.json()["detail"]
    assert detail["loc"] == ["body", "callback_url"]
    assert "ORCHESTRATOR_WEBHOOK_SECRET" in detail["msg"]


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("webhook_key", "not-a-fernet-key-but-secret", "ORCHESTRATOR_WEBHOOK_KEY must be"),
        ("webhook_secret", "too-short-but-secret", "ORCHESTRATOR_WEBHOOK_SECRET must be"),
        ("webhook_secret", "whsec_***secret***", "ORCHESTRATOR_WEBHOOK_SECRET a secret"),
    ],
)
def test_bad_webhook_settings_are_refused_without_echoing_them(service_token, setting, value, says):
    with pytest.raises(ValueError, match="validation error") as caught:
        OrchestratorSettings(service_token=service_token, **{setting: value})
    assert says in str(caught.value)
    assert value not in str(caught.value)


def test_secrets_at_rest_survive_a_move_to_an_explicit_key(service_token):
    derived = OrchestratorSettings(service_token=service_token, admin_token=ADMIN_TOKEN)
    sealed = SecretBox.from_settings(derived).seal(b"k" * 32)  # type: ignore[union-attr]
    assert b"k" * 32 not in sealed.encode()
    # the explicit key encrypts from now on; the derived one still decrypts what was sealed
    explicit = OrchestratorSettings(
        service_token=service_token, admin_token=ADMIN_TOKEN, webhook_key=SecretStr(FERNET_KEY)
    )
    box = SecretBox.from_settings(explicit)
    assert box is not None
    assert box.open(sealed) == b"k" * 32
    assert Fernet(FERNET_KEY.encode()).decrypt(box.seal(b"x" * 24)) == b"x" * 24
    assert derived_key(ADMIN_TOKEN) != derived_key(ADMIN_TOKEN + "2")
    assert SecretBox.from_settings(OrchestratorSettings(service_token=service_token)) is None
    other = OrchestratorSettings(service_token=service_token, admin_token=ADMIN_TOKEN + "-other")
    assert SecretBox.from_settings(other).open(sealed) is None  # type: ignore[union-attr]


@pytest.fixture
def captured(orchestrator_settings):
    stream = io.StringIO()
    configure_logging(
        "orchestrator", level="DEBUG", secrets=orchestrator_settings.secrets(), stream=stream
    )
    yield stream
    logging.getLogger().handlers = []


async def test_no_secret_appears_in_responses_or_logs(captured, api, receiver):
    plain = "a-plain-subscription-secret-" + secrets.token_hex(8)
    await subscribe(api, receiver.url, ["run.escalated", "run.finished"], secret=plain)
    await subscribe(api, receiver.url, ["review.created"])
    refused = "refused-secret-" + secrets.token_hex(4)  # 23 bytes: one too few
    response = await api.post(
        "/v1/webhooks", json={"url": receiver.url, "events": ["run.finished"], "secret": refused}
    )
    assert response.status_code == 422
    assert refused not in response.text
    run_id = await start(
        api, task="Explain tides.", policy={"max_rounds": 1}, callback_url=receiver.url
    )
    await wait_for(api, run_id, statuses=FINAL)
    await receiver.wait_for("run.escalated", count=2, timeout=60)
    for got in receiver.of_type("run.escalated"):
        # one signed with the subscription's plain secret, one with the platform secret
        assert any(_verifies(got, key) for key in (plain.encode(), PLATFORM_SECRET.encode())), (
            got.headers
        )
    bodies = [
        (await api.get(path)).text
        for path in (
            "/v1/webhooks",
            "/v1/webhooks/deliveries",
            f"/v1/runs/{run_id}",
            "/v1/reviews",
            "/v1/events",
            "/openapi.json",
        )
    ]
    logs = captured.getvalue()
    assert '"path": "/v1/webhooks"' in logs  # requests were logged ...
    raw_sub = base64.b64decode(SUB_SECRET.removeprefix("whsec_"))
    for secret in (
        plain,
        refused,
        SUB_SECRET,
        SUB_SECRET.removeprefix("whsec_"),
        PLATFORM_SECRET,
        FERNET_KEY,
    ):
        assert secret not in logs  # ... their secrets were not
        for body in bodies:
            assert secret not in body
    assert raw_sub.hex() not in logs
    assert all("webhook-signature" not in body for body in bodies)


def _verifies(received, key: bytes) -> bool:
    try:
        Webhook(key).verify(received.body, received.headers)
    except Exception:
        return False
    return True


@pytest.mark.slow
def test_kill_9_mid_delivery_still_delivers_after_the_restart(
    service_token, database_url, tmp_path
):
    """A real orchestrator process, killed while its POST waits for an answer."""
    receiver = Receiver().start()
    receiver.holding = True  # the first request gets no answer: the delivery stays in flight
    env = {
        **os.environ,
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "DATABASE_URL": database_url,
        "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
        # No peers run: the run escalates at once (environment), which is all we need.
        "ACTOR_URL": f"http://127.0.0.1:{free_port()}",
        "CRITIC_URL": f"http://127.0.0.1:{free_port()}",
        "ORCHESTRATOR_PEER_MAX_ATTEMPTS": "1",
        "ORCHESTRATOR_DBOS_POLL_S": "0.1",
        "ORCHESTRATOR_WEBHOOK_TIMEOUT_S": "30",
        "ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    }
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with ExitStack() as stack:
        stack.callback(receiver.stop)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = stack.enter_context((tmp_path / "orchestrator.log").open("wb"))
        first = start_orchestrator(env, port, log)
        stack.callback(first.wait, 10)
        stack.callback(first.kill)
        sub = httpx.post(
            f"{url}/v1/webhooks",
            json={"url": receiver.url, "events": ["run.escalated"], "secret": SUB_SECRET},
            headers=admin,
        )
        assert sub.status_code == 201, sub.text
        run_id = httpx.post(
            f"{url}/v1/runs", json={"task": "Explain tides."}, headers=admin
        ).json()["id"]
        wait_until(lambda: receiver.received, 20, "the first delivery attempt to arrive")
        first.send_signal(signal.SIGKILL)
        first.wait()
        receiver.holding = False
        receiver.hold.set()  # the held handler answers a dead socket

        restarted = time.time()
        second = start_orchestrator(env, port, log)
        stack.callback(second.wait, 10)
        stack.callback(second.terminate)
        wait_until(lambda: len(receiver.received) >= 2, 10, "the delivery after the restart")

        def delivered():
            items = httpx.get(f"{url}/v1/webhooks/deliveries", headers=admin).json()["items"]
            return items if items and items[0]["status"] == "delivered" else None

        [row] = wait_until(delivered, 10, "the delivery to be recorded as delivered")

    before, after = receiver.received[0], receiver.received[1]
    assert after.at > restarted  # sent again by the restarted orchestrator
    assert before.headers["webhook-id"] == after.headers["webhook-id"] == row["id"]
    assert before.body == after.body
    payload = Webhook(SUB_SECRET).verify(after.body, after.headers)
    assert payload["type"] == "run.escalated"
    assert payload["data"]["run_id"] == run_id
    assert payload["data"]["error"] == "NeedHumanIntervention"
    assert row["attempts"] == 2
    assert len(receiver.received) == 2

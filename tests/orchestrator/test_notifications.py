"""Notifications through Apprise on the webhook outbox, to a real receiver on loopback (Apprise's
``json://`` channel; never an outside service): an escalation reaches a person once with the
task and the link to decide; a receiver that fails is retried until it accepts; a restart does
not send it again; the channel's URL (its credentials) is never stored, shown or logged; bad
settings are refused without echoing them."""

import json
import os
import time
from contextlib import ExitStack

import httpx
import pytest
from pydantic import ValidationError

from orchestrator.settings import OrchestratorSettings
from tests.orchestrator.conftest import ADMIN_TOKEN, start, wait_for
from tests.orchestrator.test_crash_recovery import start_orchestrator, wait_until
from tests.orchestrator.test_webhooks import deliveries, until
from tests.orchestrator.webhook_receiver import Receiver
from tests.support.servers import free_port

FINAL = {"succeeded", "escalated", "failed", "cancelled"}
CHANNEL_SECRET = "channel-credential-0c1d2e3f4a5b"  # stands for a Slack token in a real URL


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def notify_overrides():
    return {}


@pytest.fixture
def orchestrator_settings(orchestrator_settings, receiver, notify_overrides):
    values = {
        "notify_urls": f"json://127.0.0.1:{receiver.port}/hooks?token={CHANNEL_SECRET}",
        "notify_events": "run.escalated",
        "notify_console_url": "http://console.test:8501",
        "webhook_retry_initial_s": 0.2,
        "webhook_retry_max_s": 0.5,
        **notify_overrides,
    }
    return type(orchestrator_settings).model_validate(
        {**orchestrator_settings.model_dump(), **values}
    )


def notes(receiver: Receiver) -> list[dict]:
    return [json.loads(r.body) for r in receiver.received]


async def test_an_escalation_reaches_the_channel_once_with_the_task_and_the_link(api, receiver):
    run_id = await start(api, task="Explain tides in two sentences.", policy={"max_rounds": 1})
    run = await wait_for(api, run_id, statuses=FINAL)
    assert run["status"] == "escalated"
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]

    async def delivered():
        rows = await deliveries(api)
        return rows if rows and rows[0]["status"] == "delivered" else None

    [row] = await until(delivered, what="the notification to be delivered")
    [note] = notes(receiver)
    assert run_id in note["title"]
    assert "needs a person" in note["title"]
    assert "Explain tides in two sentences." in note["message"]
    assert f"http://console.test:8501/review?review={item['id']}" in note["message"]
    assert note["type"] == "warning"
    # the row names the channel, not its URL: the credential stays in the settings
    assert row["url"] == "notify:1"
    assert CHANNEL_SECRET not in json.dumps(await deliveries(api))
    assert len(receiver.received) == 1


async def test_a_channel_that_fails_is_retried_until_it_accepts_then_sent_no_more(api, receiver):
    receiver.status = 500
    run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
    await wait_for(api, run_id, statuses=FINAL)
    await until(lambda: _at_least(receiver, 2), what="two refused attempts")  # with backoff
    [refused] = await until(lambda: _refused_rows(api), what="the row to record the refusal")
    assert refused["status"] == "pending"
    assert refused["last_error"].startswith("channel 1: not delivered")
    assert CHANNEL_SECRET not in refused["last_error"]
    receiver.status = 200

    async def delivered():
        rows = await deliveries(api)
        return rows if rows and rows[0]["status"] == "delivered" else None

    [row] = await until(delivered, what="the notification to be accepted")
    accepted_at = len(receiver.received)
    assert row["attempts"] == accepted_at >= 3
    time.sleep(1.5)  # three backoffs' worth: nothing more is sent once it was accepted
    assert len(receiver.received) == accepted_at


async def _at_least(receiver: Receiver, count: int) -> bool:
    return len(receiver.received) >= count


async def _refused_rows(api) -> list[dict] | None:
    rows = await deliveries(api)
    return rows if rows and rows[0]["last_error"] else None


@pytest.mark.parametrize("notify_overrides", [{"notify_events": "run.escalated,review.created"}])
async def test_a_review_before_the_critique_notifies_with_its_own_words(api, receiver):
    run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
    await wait_for(api, run_id, statuses={"awaiting_review"})
    await until(lambda: _at_least(receiver, 1), what="the review notification")
    [note] = notes(receiver)
    assert "waits for review (before its critique)" in note["title"]
    assert note["type"] == "info"


@pytest.mark.slow
@pytest.mark.timeout(300)  # two orchestrator starts: minutes on a loaded machine
def test_a_restart_sends_nothing_twice(service_token, database_url, tmp_path):
    """A real orchestrator process: its escalation is notified once; after a restart the next
    escalation is notified and the first is not sent again."""
    receiver = Receiver().start()
    env = {
        **os.environ,
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "DATABASE_URL": database_url,
        "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
        # No peers run: each run escalates at once (environment), which is all we need.
        "ACTOR_URL": f"http://127.0.0.1:{free_port()}",
        "CRITIC_URL": f"http://127.0.0.1:{free_port()}",
        "ORCHESTRATOR_PEER_MAX_ATTEMPTS": "1",
        "ORCHESTRATOR_DBOS_POLL_S": "0.1",
        "ORCHESTRATOR_NOTIFY_URLS": f"json://127.0.0.1:{receiver.port}/hooks",
        "ORCHESTRATOR_NOTIFY_EVENTS": "run.escalated",
    }
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with ExitStack() as stack:
        stack.callback(receiver.stop)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = stack.enter_context((tmp_path / "orchestrator.log").open("wb"))

        # a loaded machine may take seconds to answer: these wait on the answer, not a clock
        api = stack.enter_context(httpx.Client(base_url=url, headers=admin, timeout=60.0))

        def escalate() -> str:
            run_id = api.post("/v1/runs", json={"task": "Explain tides."}).json()["id"]
            return str(run_id)

        def delivered(count: int):
            items = api.get("/v1/webhooks/deliveries").json()["items"]
            done = [i for i in items if i["status"] == "delivered"]
            return done if len(done) == count else None

        first = start_orchestrator(env, port, log)
        stack.callback(first.wait, 10)
        stack.callback(first.terminate)
        first_run = escalate()
        wait_until(lambda: delivered(1), 90, "the first notification to be delivered")
        first.terminate()
        first.wait(20)

        second = start_orchestrator(env, port, log)
        stack.callback(second.wait, 10)
        stack.callback(second.terminate)
        second_run = escalate()
        wait_until(lambda: delivered(2), 90, "the second notification to be delivered")
        time.sleep(1.0)  # time for any duplicate to show up
        second.terminate()

    titles = [json.loads(r.body)["title"] for r in receiver.received]
    assert len(titles) == 2, titles
    assert first_run in titles[0]
    assert second_run in titles[1]


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("ORCHESTRATOR_NOTIFY_URLS", f"json://ok.test/x not-a-url-{CHANNEL_SECRET}", "channel 2"),
        ("ORCHESTRATOR_NOTIFY_EVENTS", "run.escalated,run.exploded", "run.exploded"),
    ],
)
def test_bad_notification_settings_are_refused_without_echoing_secrets(
    monkeypatch, service_token, name, value, says
):
    monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", service_token)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        OrchestratorSettings()
    assert says in str(refused.value)
    assert CHANNEL_SECRET not in str(refused.value)

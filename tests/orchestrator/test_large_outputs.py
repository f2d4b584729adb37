"""A 50 KB output goes through two revisions while another client's requests keep being
answered in under 100 ms: nothing on the run's path may block the event loop.

Two measures: the wall-clock latency of another client's requests (what the issue asks),
and the CPU time the event loop's thread spends in any one callback (what blocking is: on a
loaded machine the first also counts time the operating system gave to other processes, the
second does not)."""

import asyncio
import multiprocessing
import statistics
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from actor.app import create_app as create_actor
from critic.app import create_app as create_critic
from tests.orchestrator.conftest import FINAL, start
from tests.orchestrator.test_loop import actor_reply, critique
from tests.support.factories import actor_settings, critic_settings
from tests.support.fakemodel import FakeModel
from tests.support.servers import free_port

# serial: `make test` runs it after the parallel suite, alone on the machine, so that the wall
# clock measures this process and not the scheduler sharing 2 cores with three test workers.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SECTIONS = 4
SECTION_CHARS = 12_500
LATENCY_BOUND_S = 0.1  # what the issue asks: another client is answered within 100 ms
SLOWEST_BOUND_S = 3.0  # one request the machine delayed, not a diff that holds the loop


def _serve(role: str, fake_url: str, token: str, port: int) -> None:
    fake = FakeModel(fake_url)
    if role == "actor":
        app = create_actor(actor_settings(fake=fake, token=token, model_max_attempts=2))
    else:
        app = create_critic(critic_settings(fake=fake, token=token, model_max_attempts=2))
    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, access_log=False)


@contextmanager
def forked_peer(role: str, fake: FakeModel, token: str, tmp_path):
    """A peer in a process of its own, as deployed, forked from this one (its modules are
    imported already: starting a fresh interpreter takes long on a loaded machine)."""
    port = free_port()
    process = multiprocessing.get_context("fork").Process(
        target=_serve, args=(role, fake.url, token, port), daemon=True
    )
    process.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.is_alive(), f"the {role} exited early"
            assert time.monotonic() < deadline, f"the {role} did not start in 60 s"
            try:
                if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()


@pytest.fixture
def peer_urls(fake_model, service_token, tmp_path, monkeypatch):
    """The Actor and the Critic in processes of their own, as deployed: the latency
    measured is the Orchestrator's, not that of peers sharing its process."""
    monkeypatch.chdir(tmp_path)  # their replay stores go under var/ of the cwd
    with (
        forked_peer("actor", fake_model, service_token, tmp_path) as actor,
        forked_peer("critic", fake_model, service_token, tmp_path) as critic,
    ):
        yield {"actor": actor, "critic": critic}


@pytest.fixture
def peers():
    return None  # no in-process peers: the Orchestrator reaches them over HTTP


@pytest.fixture
def orchestrator_settings(orchestrator_settings, peer_urls):
    return orchestrator_settings.model_copy(
        update={"actor_url": peer_urls["actor"], "critic_url": peer_urls["critic"]}
    )


def section(number: int, marker: str) -> str:
    head = f"# Part {number}\n{marker}\n"
    line = f"Part {number} keeps this background sentence as it is, line after line.\n"
    return head + line * ((SECTION_CHARS - len(head)) // len(line))


def issue(marker: str) -> dict:
    return {
        "dimension": "accuracy",
        "severity": "major",
        "quote": marker,
        "suggestion": "State this part precisely.",
    }


@contextmanager
def loop_cpu_per_callback():
    """The most CPU time the event loop's thread spent in one callback (a task step, an I/O
    callback) while the block runs, with what that callback was."""
    worst: dict = {"cpu_s": 0.0, "callback": ""}
    original = asyncio.events.Handle._run

    def timed(handle):
        began = time.thread_time()
        try:
            return original(handle)
        finally:
            spent = time.thread_time() - began
            if spent > worst["cpu_s"]:
                worst.update(cpu_s=spent, callback=repr(handle)[:300])

    setattr(asyncio.events.Handle, "_run", timed)  # noqa: B010 (mypy: no method assignment)
    try:
        yield worst
    finally:
        setattr(asyncio.events.Handle, "_run", original)  # noqa: B010


async def watch(api, run_id: str, latencies: list[float]) -> dict:
    """A steady stream of another client's requests until the run ends; returns the run."""
    paths = [f"/v1/runs/{run_id}", "/healthz"]
    n = 0
    while True:
        path = paths[n % 2]
        n += 1
        began = time.perf_counter()
        response = await api.get(path)
        latencies.append(time.perf_counter() - began)
        assert response.status_code == 200, response.text
        if path != "/healthz" and response.json()["status"] in FINAL:
            return response.json()
        await asyncio.sleep(0.005)


async def test_a_50kb_output_revised_twice_keeps_the_api_answering(api, fake_model):
    draft = "".join(section(k, f"part-{k}-v1") for k in range(SECTIONS))
    assert len(draft) >= 49_000
    flagged_v1 = "part-2-v1"
    revised_v2 = section(2, "part-2-v2")
    revised_v3 = section(2, "part-2-v3")
    passes = [{"stage": "critique", "response": critique("pass")}] * (3 + 3 + 4)
    fake_model.script(
        {"stage": "draft", "response": actor_reply(draft)},
        # matched items first: a section's call takes the first item that fits it
        {
            "stage": "critique",
            "match": flagged_v1,
            "response": critique(issues=[issue(flagged_v1)]),
        },
        {
            "stage": "critique",
            "match": "part-2-v2",
            "response": critique(issues=[issue("part-2-v2")]),
        },
        {"stage": "revise", "match": flagged_v1, "response": actor_reply(revised_v2)},
        {"stage": "revise", "match": "part-2-v2", "response": actor_reply(revised_v3)},
        *passes,
    )
    latencies: list[float] = []
    for path in ("/healthz", "/v1/runs", "/v1/runs/run_unknown"):  # warm: not measured
        await api.get(path)
    run_id = await start(
        api,
        task="Write a long four-part report.",
        policy={"convergence_threshold": 0, "max_rounds": 3},
    )
    with loop_cpu_per_callback() as worst:
        run = await asyncio.wait_for(watch(api, run_id, latencies), timeout=120)

    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
    assert [len(r["output"]) >= 49_000 for r in run["rounds"]] == [True, True, True]
    assert run["final_output"] == draft.replace(
        section(2, "part-2-v1"), revised_v3
    )  # two revisions of the flagged part; the other parts byte-identical
    assert [[s["revised"] for s in r["sections"]] for r in run["rounds"][:2]] == [
        [False, False, True, False],
        [False, False, True, False],
    ]
    assert len(latencies) >= 10  # a fast machine finishes the run in about half a second
    # Nothing blocks the loop: no callback holds its thread for 100 ms of CPU, and nine in ten
    # requests of the other client are answered within 100 ms. (Run among the parallel suite on
    # 2 cores, the slowest of ~100 requests reached 140 ms while the loop's worst callback took
    # 3 ms of CPU: the scheduler, not the loop. Hence the serial mark. Even alone, right after
    # the parallel suite, one request in a CI run took 0.98 s while no callback took 5 ms: the
    # machine, not the loop.) The loose bound on the slowest request still catches a diff that
    # holds the interpreter lock from a worker thread, which the per-callback CPU cannot see:
    # the quadratic diff took 7-11 s at 20 KB.
    slowest = (sorted(latencies)[-5:], worst)
    assert worst["cpu_s"] < LATENCY_BOUND_S, worst
    assert statistics.median(latencies) < LATENCY_BOUND_S, slowest
    assert statistics.quantiles(latencies, n=10)[-1] < LATENCY_BOUND_S, slowest
    assert max(latencies) < SLOWEST_BOUND_S, slowest

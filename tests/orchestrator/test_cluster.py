"""Three orchestrator replicas on one Postgres, as real processes (with one Actor, one Critic
and the fake model server): kill -9 of the leader with 200 runs in flight loses nothing and
repeats no model call; a websocket on a survivor sees every event once and in order; a
review decided on one replica resumes a run that paused on another."""

import asyncio
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
import websockets

from tests.conftest import ISOLATED_PREFIXES
from tests.orchestrator.conftest import ADMIN_TOKEN
from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY
from tests.support.fakemodel import user_text
from tests.support.servers import free_port, wait_healthy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RUNS = 200
LATENCY_MS = 150  # every model call: keeps the runs in flight while a replica dies
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
STAGES = ["draft", "critique", "revise", "critique"]  # one run: revise, then pass
TAG = re.compile(r"cluster-run-(\d+)")


@contextmanager
def throwaway_database() -> Iterator[str]:
    try:  # the shared helper (it reads CROSSCHECK_TEST_POSTGRES_URL)
        databases = importlib.import_module("tests.support.databases")
    except ImportError:
        databases = None
    if databases is not None:
        with databases.fresh_postgres_database("cc_cluster") as url:
            yield url
        return
    admin = os.environ.get(
        "CROSSCHECK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"cc_cluster_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Replica:
    def __init__(self, executor_id: str, env: dict[str, str], log: Path) -> None:
        self.executor_id = executor_id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **env,
            "ORCHESTRATOR_EXECUTOR_ID": executor_id,
            "ORCHESTRATOR_HOST": "127.0.0.1",
            "ORCHESTRATOR_PORT": str(self.port),
        }
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "orchestrator"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_healthy(self) -> None:
        assert self.process is not None
        wait_healthy(self.url, self.process)

    def kill_9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Service(Replica):
    """The Actor or the Critic, started beside the replicas rather than before them."""

    def __init__(self, module: str, prefix: str, env: dict[str, str], log: Path) -> None:
        super().__init__(module, env, log)
        self.module = module
        self.env = {**env, f"{prefix}HOST": "127.0.0.1", f"{prefix}PORT": str(self.port)}

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )


@pytest.fixture(scope="module")
def cluster(fake_model_server, service_token, tmp_path_factory):
    """Actor, Critic and three orchestrator replicas (a, b, c) on one new database, shared by
    this module's tests (starting five processes on two cores is most of the wall time)."""
    logs = tmp_path_factory.mktemp("cluster")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(ISOLATED_PREFIXES)},
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": fake_model_server.openai_base_url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": fake_model_server.anthropic_base_url,
        "ACTOR_REPLAY_DB": str(logs / "actor-replays.sqlite"),
        "CRITIC_REPLAY_DB": str(logs / "critic-replays.sqlite"),
    }
    for name in ("CROSSCHECK_TEST_POSTGRES_URL",):
        if name in os.environ:
            env[name] = os.environ[name]
    with ExitStack() as stack:
        database_url = stack.enter_context(throwaway_database())
        actor = Service("actor", "ACTOR_", env, logs / "actor.log")
        critic = Service("critic", "CRITIC_", env, logs / "critic.log")
        orch_env = {
            **env,
            "DATABASE_URL": database_url,
            "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
            "ACTOR_URL": actor.url,
            "CRITIC_URL": critic.url,
            "ORCHESTRATOR_HEARTBEAT_S": "0.5",
            "ORCHESTRATOR_REPLICA_TIMEOUT_S": "2",
            # Long, so that only LISTEN/NOTIFY can bring another replica's events in time.
            "ORCHESTRATOR_EVENTS_SAFETY_POLL_S": "60",
            "ORCHESTRATOR_DBOS_POLL_S": "0.2",
            "ORCHESTRATOR_REVIEW_SWEEP_S": "0.5",
            # Three replicas within the server's 100 connections, beside other tests.
            "ORCHESTRATOR_DB_POOL_SIZE": "4",
            "ORCHESTRATOR_DB_MAX_OVERFLOW": "8",
            "ORCHESTRATOR_SYSTEM_DB_POOL_SIZE": "8",
        }
        replicas = {
            name: Replica(name, orch_env, logs / f"orchestrator-{name}.log")
            for name in ("a", "b", "c")
        }
        # All at once: the replicas take turns migrating the new database.
        for process in (actor, critic, *replicas.values()):
            stack.callback(process.stop)
            process.start()
        for process in (actor, critic, *replicas.values()):
            process.wait_healthy()
        yield replicas


@pytest.fixture
def fresh_model(cluster, fake_model_server):
    fake_model_server.reset()
    yield fake_model_server
    fake_model_server.reset()


def cluster_view(url: str) -> dict:
    response = httpx.get(f"{url}/v1/cluster", headers=HEADERS, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def all_events(client: httpx.AsyncClient, **params) -> list[dict]:
    events: list[dict] = []
    since = 0
    while True:
        response = await client.get("/v1/events", params={**params, "since": since, "limit": 1000})
        batch = response.json()
        events.extend(batch)
        if len(batch) < 1000:
            return events
        since = batch[-1]["seq"]


async def watch(ws_url: str, into: list[dict], stop: asyncio.Event) -> None:
    async with websockets.connect(ws_url, additional_headers=HEADERS, max_size=None) as ws:
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(ws.recv(), 0.2)
            except TimeoutError:
                continue
            into.append(json.loads(message))


@pytest.mark.timeout(300)  # 200 runs through three replicas: minutes on a loaded 2-core machine
async def test_kill_9_of_the_leader_with_200_runs_in_flight(cluster, fresh_model):
    fake_model = fresh_model
    fake_model.latency(LATENCY_MS)
    replicas = list(cluster.values())
    leader_id = wait_until(
        lambda: cluster_view(replicas[0].url)["leader"], 10, "a leader to be elected"
    )
    victim = cluster[leader_id]
    survivors = [r for r in replicas if r is not victim]
    watcher = survivors[0]

    received: list[dict] = []
    stop = asyncio.Event()
    ws_url = watcher.url.replace("http", "ws") + "/v1/events"
    ws_task = asyncio.create_task(watch(ws_url, received, stop))

    clients = {
        r.executor_id: httpx.AsyncClient(base_url=r.url, headers=HEADERS, timeout=30)
        for r in replicas
    }
    try:
        gate = asyncio.Semaphore(24)

        async def submit(i: int) -> tuple[str, str]:
            replica = replicas[i % 3]
            async with gate:
                response = await clients[replica.executor_id].post(
                    "/v1/runs", json={"task": f"Explain topic {i} briefly. [cluster-run-{i}]"}
                )
            assert response.status_code == 201, response.text
            return response.json()["id"], replica.executor_id

        started = dict(await asyncio.gather(*(submit(i) for i in range(RUNS))))
        assert Counter(started.values())[victim.executor_id] >= RUNS // 3

        victim.kill_9()
        killed_at = time.monotonic()
        survivor = clients[watcher.executor_id]

        # Once the new leader has handed the dead replica's workflows to the survivors, it
        # comes back under its own id while they finish them: it must find nothing of its
        # old work to resume (a repeat would show in the model-call counts below).
        async def recovered() -> int:
            view = (await survivor.get("/v1/cluster")).json()
            row = next(r for r in view["replicas"] if r["executor_id"] == victim.executor_id)
            return int(row["recovered_workflows"])

        deadline = time.monotonic() + 30
        while await recovered() == 0:
            assert time.monotonic() < deadline, "nobody recovered the dead replica's runs"
            await asyncio.sleep(0.1)
        victim.start()

        deadline = time.monotonic() + 60
        while True:
            body = (await survivor.get("/v1/runs", params={"limit": 200})).json()
            runs = body["items"]
            done = [r for r in runs if r["status"] in {"succeeded", "escalated", "failed"}]
            if len(done) == RUNS:
                break
            assert time.monotonic() < deadline, f"{len(done)} of {RUNS} runs finished"
            await asyncio.sleep(0.25)
        recovered_in = time.monotonic() - killed_at

        failed = [r["id"] for r in runs if r["status"] != "succeeded"]
        if failed:
            example = (await survivor.get(f"/v1/runs/{failed[0]}")).json()
            raise AssertionError(
                f"{len(failed)} runs did not succeed, e.g. {example['status']}: "
                f"{example.get('stop_reason')} {example.get('detail')}"
            )
        assert {r["id"] for r in runs} == set(started)
        assert {r["rounds"] for r in runs} == {2}

        # The new leader recovered the dead replica's workflows; the survivors ran them.
        view = cluster_view(watcher.url)
        rows = {r["executor_id"]: r for r in view["replicas"]}
        assert view["leader"] in {s.executor_id for s in survivors}
        assert rows[victim.executor_id]["recovered_workflows"] > 0, rows

        # Every run called the model exactly once per step: nothing was repeated.
        per_run: dict[str, list[str]] = defaultdict(list)
        for call in fake_model.requests():
            tags = set(TAG.findall(user_text(call)))
            assert len(tags) == 1, user_text(call)[:300]
            per_run[tags.pop()].append(call["stage"])
            assert call["status"] == 200, call
        assert len(per_run) == RUNS
        repeated = {k: v for k, v in per_run.items() if sorted(v) != sorted(STAGES)}
        assert repeated == {}, f"{len(repeated)} runs repeated or missed a model call"

        # The websocket on a survivor saw every event of every run, once and in order.
        stored = await all_events(survivor)
        last = stored[-1]["seq"]
        wait_until(lambda: received and received[-1]["seq"] >= last, 10, "the websocket")
        stop.set()
        await ws_task
        seqs = [e["seq"] for e in received]
        assert seqs == sorted(set(seqs)), "the websocket repeated or reordered events"
        assert seqs == [e["seq"] for e in stored]
        by_run: dict[str, list[int]] = defaultdict(list)
        for event in received:
            by_run[event["run_id"]].append(event["seq"])
        for run_id in started:
            listed = [e["seq"] for e in await all_events(survivor, run_id=run_id)]
            assert by_run[run_id] == listed, run_id
            finals = [
                e
                for e in received
                if e["run_id"] == run_id and e["type"] == "run.status"
                if e["data"]["status"] == "succeeded"
            ]
            assert len(finals) == 1, f"{run_id} finished {len(finals)} times"
        print(f"\n{RUNS} runs finished {recovered_in:.1f} s after the kill")  # noqa: T201
    finally:
        stop.set()
        if not ws_task.done():
            ws_task.cancel()
        for client in clients.values():
            await client.aclose()

    victim.wait_healthy()
    rows = {r["executor_id"]: r for r in cluster_view(victim.url)["replicas"]}
    assert all(r["alive"] for r in rows.values()), rows


async def test_review_decided_on_another_replica_resumes_the_run(cluster, fresh_model):
    fake_model = fresh_model
    a, b, c = cluster["a"], cluster["b"], cluster["c"]
    async with (
        httpx.AsyncClient(base_url=a.url, headers=HEADERS, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.url, headers=HEADERS, timeout=30) as on_b,
    ):
        response = await on_b.post(
            "/v1/runs",
            json={"task": "Explain tides.", "policy": {"review": "first_round"}},
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]

        # A websocket on the third replica, which does none of this run's work.
        received: list[dict] = []
        stop = asyncio.Event()
        ws_url = c.url.replace("http", "ws") + f"/v1/events?run_id={run_id}"
        ws_task = asyncio.create_task(watch(ws_url, received, stop))

        async def status() -> str:
            return str((await on_a.get(f"/v1/runs/{run_id}")).json()["status"])

        deadline = time.monotonic() + 20
        while await status() != "awaiting_review":
            assert time.monotonic() < deadline, await status()
            await asyncio.sleep(0.1)

        minted = await on_a.post("/v1/tokens", json={"name": "ana", "role": "reviewer"})
        assert minted.status_code == 201, minted.text
        reviewer = {"Authorization": f"Bearer {minted.json()['token']}"}
        [item] = (await on_a.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        claimed = await on_a.post(f"/v1/reviews/{item['id']}/claim", headers=reviewer)
        assert claimed.is_success, claimed.text
        decided_at = time.monotonic()
        decided = await on_a.post(
            f"/v1/reviews/{item['id']}/decision",
            json={"action": "comment", "comment": "Mention the Moon."},
            headers=reviewer,
        )
        assert decided.status_code == 200, decided.text

        deadline = time.monotonic() + 30
        while not any(e["type"] == "run.finished" for e in received):
            assert time.monotonic() < deadline, [e["type"] for e in received]
            await asyncio.sleep(0.05)
        # Well inside the 60 s safety poll: NOTIFY brought A's events to C's websocket.
        assert time.monotonic() - decided_at < 20
        stop.set()
        await ws_task
        assert await status() == "succeeded"
        listed = [e["seq"] for e in await all_events(on_a, run_id=run_id)]
        assert [e["seq"] for e in received] == listed
    # The comment binds the next revision, which comes straight after the decision.
    assert [c["stage"] for c in fake_model.requests()] == ["draft", "revise", "critique"]

"""The reflection loop side by side: two LangGraph peers and Crosscheck, same model I/O.

One run = 1 draft + 3 critiques + 2 revisions (6 model calls); the task carries the fake
model's ``[bench:3]`` tag, so the scripted critic passes version 3. Every system talks to
the SAME fake model server process (``services/fakemodel``, started once here, latency set
through its control API).

  P1  LangGraph + SDK: a StateGraph draft -> critique -> revise -> critique ... whose
      nodes call the official openai SDK (AsyncOpenAI, chat.completions, strict
      json_schema response_format) and the official anthropic SDK (AsyncAnthropic,
      messages with a forced tool), parse with pydantic; AsyncSqliteSaver (WAL).
  P2  LangGraph orchestrating Crosscheck's services: the same graph; its nodes send the
      orchestrator's exact requests to the Actor and Critic over HTTP, through the
      orchestrator's own peer clients (orchestrator.peers.http); AsyncSqliteSaver (WAL).
  P2s P2 at LangGraph's synchronous durability (``--lg-durability sync``): each checkpoint
      written before the next step starts, so a crash loses no finished step, as
      Crosscheck promises; by default LangGraph writes it while the next step runs.
  P0  The calls alone: P2's six service calls in a plain loop, no framework and no
      checkpoint. Not an orchestrator: the floor that P2 and X both pay, so that P2 - P0
      is what LangGraph itself costs and X - P0 what Crosscheck's orchestration costs.
  X   Crosscheck: the real orchestrator (DBOS, read model, events) + Actor + Critic, driven
      by bench.reflection_loop's Driver (POST /v1/runs, wait for run.finished).

Measurements, interleaved (the order of the systems rotates every repeat) and repeated:
  seq   sequential runs at model latency 0: runs/s, per-run p50/p99
  conc  N concurrent runs at model latency --lat: wall time, errors, peak RSS summed over
        the system's own processes
  both  CPU seconds per run of every process (from /proc/<pid>/stat deltas)

Every system must send byte-identical model requests and finish every run correctly; a
failed check makes the exit code 1. Each (system, measurement, repeat) gets fresh processes
and a fresh database. Prints one JSON line per sample and per median, then a markdown table.

  uv run --frozen --group bench python -m bench.peers             # 200 seq, 1000 conc, 3x
  uv run --frozen --group bench python -m bench.peers --runs 20 --concurrency 100 --repeats 1
  ... --postgres-url postgresql://postgres@127.0.0.1:5432/postgres  # + X on Postgres (xpg),
                                                                   # a fresh database per sample
LangGraph comes from the root project's ``bench`` dependency group (``make bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

from bench.procstat import cpu_seconds, peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
MAX_ROUNDS = 3  # Crosscheck's default policy, and what bench/reflection_loop.py asks for
DEMO_MODEL = "scripted-demo"  # what Crosscheck's services send when the demo model stands in
MAX_TOKENS = 4096  # Crosscheck's max_output_tokens default
ACTOR_TEMPERATURE = {"draft": 0.7, "revise": 0.4}  # the Actor's defaults
CRITIC_TEMPERATURE = 0.2  # the Critic's default
SYSTEMS = ("p0", "p1", "p2", "p2s", "x", "xpg")
ORCHESTRATING = ("plain loop", "langgraph", "orchestrator")  # the process that makes the calls
LABELS = {
    "p0": "P0 the calls alone",
    "p1": "P1 LangGraph + SDK",
    "p2": "P2 LangGraph -> Crosscheck services",
    "p2s": "P2 at LangGraph's sync durability",
    "x": "X Crosscheck",
    "xpg": "X Crosscheck on Postgres",
}


def log(message: str) -> None:
    sys.stderr.write(f"[peers {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


# =============================================================== /proc readings


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False where refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, the same rule as bench/reflection_loop.py."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


# =============================================================== the LangGraph side (worker)
#
# A worker process holds one compiled graph with an AsyncSqliteSaver (P1, P2), or for P0 the
# same nodes called by ``plain_loop`` with no graph and no saver, and answers commands (JSON
# lines on stdin): warmup, seq, conc, exit. The driver reads its CPU and peak RSS from /proc
# around each command, like every other process.

TASK_KIND = "text"


class RunState(TypedDict, total=False):
    run_id: str
    task: str
    round: int
    uncertainties: list[str]
    output: str
    verdict: str
    reflections: list[dict[str, Any]]
    last_critique: dict[str, Any]  # its issues go to the next revision
    calls: int
    status: str
    stop_reason: str


def stop_after(verdict: str, round_number: int) -> tuple[str, str] | None:
    """The loop's stop rule on a verdict (Crosscheck's after_critique, minus what needs
    policy the bench does not use): pass ends it, else revise until MAX_ROUNDS."""
    if verdict == "pass":
        return "succeeded", "critic_pass"
    if verdict == "escalate":
        return "escalated", "critic_escalated"
    if round_number >= MAX_ROUNDS:
        return "escalated", "max_rounds"
    return None


def reflection_text(critique: dict[str, Any]) -> str:
    """The critic reflection Crosscheck's orchestrator stores (engine/steps/critique_commit.py)."""
    lines = [critique["reflection"]] + [
        f"- [{i['severity']}] {i['dimension']}: {i['suggestion']}"
        + (f' (on: "{i["quote"][:200]}")' if i.get("quote") else "")
        for i in critique["issues"]
    ]
    return "\n".join(lines)[:8000]


def critique_update(state: RunState, critique: dict[str, Any]) -> dict[str, Any]:
    round_number = state["round"]
    update: dict[str, Any] = {
        "verdict": critique["verdict"],
        "last_critique": critique,
        "calls": state["calls"] + 1,
    }
    if critique["verdict"] != "pass":
        note = {
            "source": "critic",
            "content": reflection_text(critique),
            "author": "",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        }
        update["reflections"] = [*state.get("reflections", []), note]
    stop = stop_after(critique["verdict"], round_number)
    if stop is not None:
        update["status"], update["stop_reason"] = stop
    return update


def numbered_issues(critique: dict[str, Any] | None) -> list[Any]:
    """The previous critique's issues as the orchestrator numbers them for the Actor
    (orchestrator/engine/discipline.py), so every system's revise prompt is the same."""
    from orchestrator.engine.discipline import numbered

    return list(numbered(critique))


def route(state: RunState) -> str:
    return "end" if state.get("status") else "revise"


class SdkNodes:
    """P1: the nodes a LangGraph user writes against the official SDKs."""

    def __init__(self, fake_url: str, api_key: str) -> None:
        import anthropic
        import openai

        from actor.service import ActorOutput
        from critic.profiles import ProfileBook
        from critic.settings import CriticSettings
        from shared.contracts import Critique, Depth, Reflection, TaskKind
        from shared.prompting import PromptBook
        from shared.providers.base import strict_json_schema

        # SDK defaults (connection pool, retries, timeout) as a user gets them.
        self.openai: Any = openai.AsyncOpenAI(api_key=api_key, base_url=f"{fake_url}/v1")
        self.anthropic: Any = anthropic.AsyncAnthropic(api_key=api_key, base_url=fake_url)
        # Crosscheck's prompt templates and output models, so the model server reads
        # byte-for-byte the prompts and schemas Crosscheck's services send: the model
        # side costs every system the same.
        self.ActorOutput, self.Critique, self.Reflection = ActorOutput, Critique, Reflection
        self.actor_prompts = PromptBook("actor")
        self.critic_prompts = PromptBook("critic")
        self.actor_system = self.actor_prompts.render("system.j2", kind=TASK_KIND, entry_point=None)
        # The Critic's default profile for the task kind at that profile's default depth (a
        # fixed depth here; `auto` is not the default of any shipped profile for this kind).
        profile = ProfileBook.load().choose(None, TaskKind(TASK_KIND))
        depth = profile.default_depth
        if depth is Depth.auto:
            raise SystemExit("bench.peers: the default profile's depth is auto; pin one")
        self.critic_system = self.critic_prompts.render(
            "system.j2", profile=profile, depth_template=f"depth_{depth.value}.j2"
        )
        caps = CriticSettings.model_fields
        depth_cap = caps[f"{depth.value.lower()}_max_tokens"].default
        self.critic_max_tokens = min(int(depth_cap), MAX_TOKENS)
        self.actor_format = {
            "type": "json_schema",
            "json_schema": {
                "name": "actor_output",
                "schema": strict_json_schema(ActorOutput),
                "strict": True,
            },
        }
        self.critic_tool = {
            "name": "critique",
            "description": "Submit your answer as a critique object.",
            "input_schema": strict_json_schema(Critique),
        }

    async def _actor(self, stage: str, user: str) -> Any:
        response = await self.openai.chat.completions.create(
            model=DEMO_MODEL,
            temperature=ACTOR_TEMPERATURE[stage],
            max_completion_tokens=MAX_TOKENS,
            messages=[
                {"role": "system", "content": self.actor_system},
                {"role": "user", "content": user},
            ],
            response_format=self.actor_format,
        )
        return self.ActorOutput.model_validate_json(response.choices[0].message.content or "")

    async def draft(self, state: RunState) -> dict[str, Any]:
        user = self.actor_prompts.render(
            "draft.j2",
            task=state["task"],
            kind=TASK_KIND,
            entry_point=None,
            lessons=[],
            knowledge=[],
        )
        value = await self._actor("draft", user)
        return {
            "output": value.output,
            "uncertainties": value.uncertainties,
            "round": 1,
            "calls": state["calls"] + 1,
        }

    async def revise(self, state: RunState) -> dict[str, Any]:
        advisory = [self.Reflection.model_validate(r) for r in state["reflections"]]
        user = self.actor_prompts.render(
            "revise.j2",
            task=state["task"],
            kind=TASK_KIND,
            entry_point=None,
            previous_output=state["output"],
            binding=[],
            advisory=advisory,
            lessons=[],
            knowledge=[],
            points=[],
            issues=numbered_issues(state.get("last_critique")),  # as the orchestrator sends them
            evidence=[],  # research is off, as in X's runs
            unverified=[],
        )
        value = await self._actor("revise", user)
        return {
            "output": value.output,
            "uncertainties": value.uncertainties,
            "round": state["round"] + 1,
            "calls": state["calls"] + 1,
        }

    async def critique(self, state: RunState) -> dict[str, Any]:
        user = self.critic_prompts.render(
            "critique.j2",
            round=state["round"],
            task=state["task"],
            kind=TASK_KIND,
            evaluation=None,
            reflections=[],  # the Critic gets human reflections only; there are none
            binding=[],
            advisory=[],
            points=[],
            first_round=None,
            knowledge=[],
            declined=[],
            output=state["output"],
            evidence=[],
            uncertainties=state.get("uncertainties") or [],  # the version's, as X sends them
            ask_queries=False,  # research is off, as in X's runs
        )
        message = await self.anthropic.messages.create(
            model=DEMO_MODEL,
            max_tokens=self.critic_max_tokens,
            system=self.critic_system,
            messages=[{"role": "user", "content": user}],
            tools=[self.critic_tool],
            tool_choice={"type": "tool", "name": "critique"},
            extra_body={"temperature": CRITIC_TEMPERATURE},  # as Crosscheck's provider sends it
        )
        block = next(b for b in message.content if b.type == "tool_use")
        value = self.Critique.model_validate(block.input)
        return critique_update(state, value.model_dump(mode="json"))

    async def aclose(self) -> None:
        await self.openai.close()
        await self.anthropic.close()


class ServiceNodes:
    """P2: the same nodes, sending the orchestrator's requests to Crosscheck's services,
    through the orchestrator's own peer clients (orchestrator/peers/http.py: HttpActor and
    HttpCritic over Peer, shared by every run), so the HTTP layer is X's, byte for byte
    and pool for pool."""

    def __init__(self, actor_url: str, critic_url: str, token: str) -> None:
        from orchestrator.peers.http import HttpActor, HttpCritic, Peer, peer_clients
        from orchestrator.settings import OrchestratorSettings
        from shared.contracts import (
            CritiqueRequest,
            DraftRequest,
            Reflection,
            ReviseRequest,
            TaskKind,
        )

        self.DraftRequest, self.ReviseRequest = DraftRequest, ReviseRequest
        self.CritiqueRequest, self.Reflection = CritiqueRequest, Reflection
        self.kind = TaskKind(TASK_KIND)
        timeout_s = OrchestratorSettings.model_fields["peer_timeout_s"].default
        actor_peer = Peer("actor", peer_clients(actor_url, token, timeout_s))
        critic_peer = Peer("critic", peer_clients(critic_url, token, timeout_s))
        self.peers = [actor_peer, critic_peer]
        actor, critic = HttpActor(actor_peer), HttpCritic(critic_peer)
        self._draft, self._revise = actor.draft, actor.revise
        self._critique = critic.critique

    async def _actor_call(self, path: str, request: Any, key: str) -> Any:
        return await (self._draft if path == "/v1/draft" else self._revise)(request, key=key)

    async def _critic_call(self, request: Any, key: str) -> Any:
        return await self._critique(request, key=key)

    async def draft(self, state: RunState) -> dict[str, Any]:
        request = self.DraftRequest(
            task=state["task"], kind=self.kind, entry_point=None, lessons=[]
        )
        key = f"{state['run_id']}:1:actor:1"  # the orchestrator's key: run, round, role, attempt
        result = await self._actor_call("/v1/draft", request, key)
        return {"output": result.output, "round": 1, "calls": state["calls"] + 1}

    async def revise(self, state: RunState) -> dict[str, Any]:
        number = state["round"] + 1
        request = self.ReviseRequest(
            task=state["task"],
            kind=self.kind,
            entry_point=None,
            previous_output=state["output"],
            reflections=[self.Reflection.model_validate(r) for r in state["reflections"]][-50:],
            lessons=[],
            issues=numbered_issues(state.get("last_critique")),  # the orchestrator's numbering
        )
        key = f"{state['run_id']}:{number}:actor:1"
        result = await self._actor_call("/v1/revise", request, key)
        return {"output": result.output, "round": number, "calls": state["calls"] + 1}

    async def critique(self, state: RunState) -> dict[str, Any]:
        request = self.CritiqueRequest(
            task=state["task"],
            kind=self.kind,
            output=state["output"],
            round=state["round"],
            evaluation=None,
            reflections=[],  # the orchestrator sends human reflections only; there are none
        )
        key = f"{state['run_id']}:{state['round']}:critic"
        result = await self._critic_call(request, key)
        doc = result.model_dump(mode="json", exclude={"usage", "exchanges"})
        return critique_update(state, doc)

    async def aclose(self) -> None:
        for peer in self.peers:
            await peer.aclose()


async def plain_loop(nodes: SdkNodes | ServiceNodes, state: RunState) -> dict[str, Any]:
    """P0: the graph's nodes called in order by hand, without LangGraph or a checkpoint."""
    current: dict[str, Any] = dict(state)
    current.update(await nodes.draft(state))
    while True:
        current.update(await nodes.critique(current))  # type: ignore[arg-type]
        if route(current) == "end":  # type: ignore[arg-type]
            return current
        current.update(await nodes.revise(current))  # type: ignore[arg-type]


def build_graph(nodes: SdkNodes | ServiceNodes, checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(RunState)
    graph.add_node("draft", nodes.draft)
    graph.add_node("critique", nodes.critique)
    graph.add_node("revise", nodes.revise)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "critique")
    graph.add_conditional_edges("critique", route, {"revise": "revise", "end": END})
    graph.add_edge("revise", "critique")
    return graph.compile(checkpointer=checkpointer)


def check_final(state: dict[str, Any]) -> str:
    """'ok' when the run did what Crosscheck's run does: 6 calls, passed at round 3."""
    problems = []
    if state.get("calls") != 6:
        problems.append(f"calls={state.get('calls')}")
    if (state.get("status"), state.get("stop_reason")) != ("succeeded", "critic_pass"):
        problems.append(f"{state.get('status')}/{state.get('stop_reason')}")
    if state.get("round") != MAX_ROUNDS:
        problems.append(f"round={state.get('round')}")
    if not str(state.get("output", "")).startswith(f"Bench answer version {MAX_ROUNDS}."):
        problems.append("final output is not version 3")
    if len(state.get("reflections", [])) != MAX_ROUNDS - 1:
        problems.append(f"reflections={len(state.get('reflections', []))}")
    return "ok" if not problems else "; ".join(problems)


async def worker_main(args: argparse.Namespace) -> None:
    if args.worker == "p1":
        nodes: SdkNodes | ServiceNodes = SdkNodes(args.fake_url, args.api_key)
    else:
        nodes = ServiceNodes(args.actor_url, args.critic_url, args.token)
    out = sys.stdout
    loop = asyncio.get_running_loop()
    invoke_kwargs: dict[str, Any] = {}
    if args.lg_durability != "default":
        invoke_kwargs["durability"] = args.lg_durability

    async with contextlib.AsyncExitStack() as stack:
        if args.worker == "p0":
            plain_nodes = nodes
            journal = synchronous = "none (no checkpoint)"

            async def invoke(state: RunState, run_id: str) -> dict[str, Any]:
                return await plain_loop(plain_nodes, state)
        else:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(args.db))
            await saver.setup()  # WAL, as AsyncSqliteSaver sets it
            if args.lg_synchronous != "untouched":
                await saver.conn.execute(f"PRAGMA synchronous={args.lg_synchronous}")
            async with saver.conn.execute("PRAGMA journal_mode") as cursor:
                journal = tuple(await cursor.fetchone() or ("?",))[0]
            async with saver.conn.execute("PRAGMA synchronous") as cursor:
                synchronous = tuple(await cursor.fetchone() or ("?",))[0]
            app = build_graph(nodes, saver)

            async def invoke(state: RunState, run_id: str) -> dict[str, Any]:
                final: dict[str, Any] = await app.ainvoke(
                    state, {"configurable": {"thread_id": run_id}}, **invoke_kwargs
                )
                return final

        async def one(prefix: str) -> tuple[float, str, dict[str, Any]]:
            run_id = f"{prefix}-{uuid.uuid4().hex}"
            start = time.perf_counter()
            state: RunState = {"run_id": run_id, "task": args.task, "calls": 0, "reflections": []}
            final = await invoke(state, run_id)
            return time.perf_counter() - start, check_final(final), final

        def reply(message: dict[str, Any]) -> None:
            out.write(json.dumps(message) + "\n")
            out.flush()

        durability = invoke_kwargs.get("durability", "default")
        reply(
            {
                "event": "ready",
                "journal_mode": journal,
                "synchronous": synchronous,
                "durability": durability,
            }
        )
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            command = json.loads(line)
            if command["cmd"] == "exit":
                break
            if command["cmd"] == "warmup":
                checks = [(await one("w"))[1] for _ in range(command["runs"])]
                reply({"event": "done", "ok": sum(c == "ok" for c in checks)})
            elif command["cmd"] == "seq":
                durations, checks = [], []
                last: dict[str, Any] = {}
                began = time.perf_counter()
                for _ in range(command["runs"]):
                    try:
                        seconds, check, last = await one("s")
                    except Exception as exc:  # counted as an error, like a failed run
                        checks.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                        continue
                    durations.append(seconds)
                    checks.append(check)
                wall = time.perf_counter() - began
                reply(
                    {
                        "event": "done",
                        "wall_s": wall,
                        "durations": durations,
                        "checks": checks,
                        "sample_final_state": last,
                    }
                )
            elif command["cmd"] == "conc":
                began = time.perf_counter()
                results = await asyncio.gather(
                    *[one("c") for _ in range(command["runs"])], return_exceptions=True
                )
                wall = time.perf_counter() - began
                durations = [r[0] for r in results if not isinstance(r, BaseException)]
                checks = [
                    f"{type(r).__name__}: {str(r)[:160]}" if isinstance(r, BaseException) else r[1]
                    for r in results
                ]
                sample = next((r[2] for r in results if not isinstance(r, BaseException)), {})
                reply(
                    {
                        "event": "done",
                        "wall_s": wall,
                        "durations": durations,
                        "checks": checks,
                        "sample_final_state": sample,
                    }
                )
    await nodes.aclose()


# =============================================================== the driver


class Ports:
    """Free loopback ports, picked once: the fake model, X's and P2's services."""

    def __init__(self) -> None:
        from tests.support.servers import free_port

        self.fakemodel = free_port()
        self.x = {"actor": free_port(), "critic": free_port(), "orchestrator": free_port()}
        self.p2 = {"actor": free_port(), "critic": free_port()}
        self.unused_sandbox = free_port()  # only ever a URL in the orchestrator's settings


class Bench:
    """Starts and stops every process (by pid, through Crosscheck's Supervisor)."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from bench import reflection_loop as rl  # Crosscheck's benchmark (imported)
        from crosscheck import launcher

        self.args = args
        self.rl = rl
        self.launcher = launcher
        self.workdir = workdir
        self.ports = Ports()
        self.service_token = secrets.token_urlsafe(32)
        self.fake_url = f"http://127.0.0.1:{self.ports.fakemodel}"
        self.fake_supervisor: Any = None
        self.fake_pid = 0
        self.active: list[Any] = []  # supervisors and worker processes to stop on exit
        self.databases: list[tuple[str, str]] = []  # Postgres databases made for samples
        self.counter = 0

    # ------------------------------------------------------------ environment

    def base_env(self, ports: dict[str, int], db_dir: Path) -> dict[str, str]:
        """What bench/reflection_loop.py's Platform gives the services, on our ports, with
        the provider variables its demo plan sets pointing at the one shared fake model."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env.update(
            {
                "ACTOR_PORT": str(ports["actor"]),
                "CRITIC_PORT": str(ports["critic"]),
                "ORCHESTRATOR_PORT": str(ports.get("orchestrator", self.ports.x["orchestrator"])),
                "SANDBOX_PORT": str(self.ports.unused_sandbox),
                "FAKEMODEL_PORT": str(self.ports.fakemodel),
                "CROSSCHECK_ADMIN_TOKEN": self.rl.ADMIN,
                "CROSSCHECK_SERVICE_TOKEN": self.service_token,
                "DATABASE_URL": f"sqlite:///{db_dir}/crosscheck.sqlite",
                "CROSSCHECK_LOG_LEVEL": "WARNING",
                "ORCHESTRATOR_EXECUTOR_THREADS": str(self.args.executor_threads),
                "OPENAI_API_KEY": self.launcher.DEMO_KEY,
                "OPENAI_BASE_URL": f"{self.fake_url}/v1",
                "ANTHROPIC_API_KEY": self.launcher.DEMO_KEY,
                "ANTHROPIC_BASE_URL": self.fake_url,
                "CROSSCHECK_DEMO": "1",
            }
        )
        return env

    def start_services(
        self, names: list[str], ports: dict[str, int], tag: str, database_url: str | None = None
    ) -> Any:
        directory = self.workdir / tag
        directory.mkdir(parents=True, exist_ok=True)
        env = self.base_env(ports, directory)
        if database_url is not None:
            env["DATABASE_URL"] = database_url
        plan = self.launcher.plan(env, with_sandbox=False, with_console=False)
        plan.services = [s for s in plan.services if s.name in names]
        supervisor = self.launcher.Supervisor(plan, directory / "logs")
        self.active.append(supervisor)
        for spec in plan.services:
            running = supervisor.start(spec)
            problem = supervisor.wait_healthy(running)
            if problem:
                raise RuntimeError(
                    f"{spec.name} did not start: {problem}\n" + self.launcher.tail(running.log_path)
                )
        return supervisor

    # ------------------------------------------------------------ Postgres

    def fresh_database(self, tag: str) -> str:
        """X on Postgres: a new empty database on --postgres-url's server for this sample
        (dropped after it), so every sample starts as empty as a fresh SQLite file."""
        server = self.args.postgres_url
        if not server:
            raise RuntimeError("xpg needs --postgres-url (or CROSSCHECK_BENCH_POSTGRES_URL)")
        import psycopg
        import sqlalchemy as sa

        name = f"crosscheck_peers_{os.getpid()}_{tag.replace('-', '_')}"
        base = sa.make_url(server)
        admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.databases.append((admin, name))
        return base.set(database=name).render_as_string(hide_password=False)

    def drop_databases(self) -> None:
        import psycopg

        while self.databases:
            admin, name = self.databases.pop()
            try:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:
                log(f"could not drop database {name}: {exc!r}")

    def stop_supervisor(self, supervisor: Any) -> None:
        supervisor.stop()
        if supervisor in self.active:
            self.active.remove(supervisor)

    def start_fakemodel(self) -> None:
        env = self.base_env(self.ports.x, self.workdir)
        plan = self.launcher.Plan(env=env, services=[self.launcher.FAKEMODEL], demo=True)
        self.fake_supervisor = self.launcher.Supervisor(plan, self.workdir / "fakemodel")
        self.active.append(self.fake_supervisor)
        running = self.fake_supervisor.start(self.launcher.FAKEMODEL)
        problem = self.fake_supervisor.wait_healthy(running)
        if problem:
            raise RuntimeError(f"fakemodel did not start: {problem}")
        self.fake_pid = running.process.pid

    # ------------------------------------------------------------ fake model control

    def set_latency(self, seconds: float) -> None:
        import httpx

        response = httpx.post(
            f"{self.fake_url}/_control/config", json={"latency_ms": int(seconds * 1000)}
        )
        response.raise_for_status()

    def clear_model_log(self) -> None:
        import httpx

        httpx.delete(f"{self.fake_url}/_control/requests").raise_for_status()

    def model_calls(self, runs: int) -> dict[str, Any]:
        """What the fake model saw since the log was cleared: calls by stage and status."""
        import httpx

        entries = httpx.get(f"{self.fake_url}/_control/requests", timeout=120).json()
        stages = Counter(e.get("stage") for e in entries)
        body_chars: dict[str, list[int]] = {}
        digests: dict[str, set[str]] = {}
        for entry in entries:
            text = json.dumps(entry.get("body"), sort_keys=True)
            body_chars.setdefault(str(entry.get("stage")), []).append(len(text))
            digests.setdefault(str(entry.get("stage")), set()).add(
                hashlib.sha256(text.encode()).hexdigest()[:12]
            )
        statuses = Counter(e.get("status") for e in entries)
        expected = {"draft": runs, "critique": 3 * runs, "revise": 2 * runs}
        got = {k: stages.get(k, 0) for k in expected}
        truncated = len(entries) >= 10_000  # the fake model keeps its last 10,000 calls
        return {
            "model_calls": len(entries),
            "model_calls_by_stage": got,
            "model_call_statuses": {str(k): v for k, v in statuses.items()},
            "model_calls_as_expected": (not truncated)
            and got == expected
            and statuses.get(200, 0) == len(entries),
            "model_log_truncated": truncated,
            # the request bodies the model server parsed: mean size, and the distinct bodies
            # (identical prompts across systems give identical digests)
            "model_request_chars_mean": {
                k: round(statistics.mean(v)) for k, v in sorted(body_chars.items())
            },
            "model_request_digests": {k: sorted(v) for k, v in sorted(digests.items())},
        }

    # ------------------------------------------------------------ workers (P0, P1, P2)

    def start_worker(self, system: str, db: Path, log_path: Path) -> subprocess.Popen[str]:
        # p2s: P2 with each checkpoint written before the next step starts, the promise
        # Crosscheck keeps (a crash loses no finished step)
        durability = "sync" if system == "p2s" else self.args.lg_durability
        command = [
            sys.executable,
            "-m",
            "bench.peers",
            "--worker",
            "p2" if system == "p2s" else system,
            "--db",
            str(db),
            "--fake-url",
            self.fake_url,
            "--api-key",
            self.launcher.DEMO_KEY,
            "--actor-url",
            f"http://127.0.0.1:{self.ports.p2['actor']}",
            "--critic-url",
            f"http://127.0.0.1:{self.ports.p2['critic']}",
            f"--token={self.service_token}",  # a token may start with "-"
            "--task",
            self.rl.TASK,
            "--lg-synchronous",
            self.args.lg_synchronous,
            "--lg-durability",
            durability,
            "--lg-loop",
            self.args.lg_loop,
        ]
        stderr = log_path.open("w")
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            bufsize=1,
            cwd=ROOT,
        )
        stderr.close()
        self.active.append(process)
        ready = self.worker_reply(process, timeout_s=120)
        if ready.get("event") != "ready":
            raise RuntimeError(f"{system} worker did not start: {ready}")
        process.info = ready  # type: ignore[attr-defined]
        return process

    @staticmethod
    def worker_reply(process: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            code = process.wait(timeout=timeout_s)
            return {"event": "exited", "code": code}
        reply: dict[str, Any] = json.loads(line)
        return reply

    def worker_command(self, process: subprocess.Popen[str], **command: Any) -> dict[str, Any]:
        assert process.stdin is not None
        process.stdin.write(json.dumps(command) + "\n")
        process.stdin.flush()
        return self.worker_reply(process, timeout_s=3600)

    def stop_worker(self, process: subprocess.Popen[str]) -> None:
        if process.poll() is None:
            try:
                assert process.stdin is not None
                process.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                process.stdin.flush()
                process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if process in self.active:
            self.active.remove(process)

    def stop_all(self) -> None:
        for item in reversed(list(self.active)):
            try:
                if isinstance(item, subprocess.Popen):
                    self.stop_worker(item)
                else:
                    self.stop_supervisor(item)
            except Exception as exc:  # keep stopping the rest
                log(f"while stopping: {exc!r}")
        self.active.clear()

    # ------------------------------------------------------------ one sample

    def sample(self, system: str, mode: str, repeat: int) -> dict[str, Any]:
        self.counter += 1
        tag = f"{self.counter:02d}-{system}-{mode}-r{repeat}"
        directory = self.workdir / tag
        directory.mkdir(parents=True)
        runs = self.args.runs if mode == "seq" else self.args.concurrency
        lat = 0.0 if mode == "seq" else self.args.lat
        procs: dict[str, int] = {}
        supervisor = None
        worker = None
        started = time.perf_counter()
        try:
            crosscheck = system in ("x", "xpg")
            if crosscheck or system in ("p0", "p2", "p2s"):
                names = ["actor", "critic"] + (["orchestrator"] if crosscheck else [])
                ports = self.ports.x if crosscheck else self.ports.p2
                database = self.fresh_database(tag) if system == "xpg" else None
                supervisor = self.start_services(names, ports, tag, database)
                procs.update({r.spec.name: r.process.pid for r in supervisor.running})
            if system in ("p0", "p1", "p2", "p2s"):
                worker = self.start_worker(
                    system, directory / "langgraph.sqlite", directory / "worker.log"
                )
                procs["plain loop" if system == "p0" else "langgraph"] = worker.pid
            if crosscheck:
                result = asyncio.run(self.x_sample(mode, runs, lat, procs))
            else:
                assert worker is not None
                result = self.worker_sample(worker, mode, runs, lat, procs)
                result["sqlite"] = {
                    "journal_mode": worker.info["journal_mode"],  # type: ignore[attr-defined]
                    "synchronous": worker.info["synchronous"],  # type: ignore[attr-defined]
                }
                result["lg_durability"] = worker.info["durability"]  # type: ignore[attr-defined]
            result.update(self.model_calls(runs))
        finally:
            if worker is not None:
                self.stop_worker(worker)
            if supervisor is not None:
                self.stop_supervisor(supervisor)
            self.drop_databases()
        ok_runs = result.pop("ok_runs")
        checks_ok = ok_runs == runs and result["model_calls_as_expected"]
        if system in ("x", "xpg"):
            checks_ok = (
                checks_ok
                and result["x_runs_read_back"] == runs
                and result["x_runs_in_database"] == runs + self.args.warmup
                and result["x_runs_not_succeeded_in_3_rounds"] == 0
                and not result["x_detail_problems"]
            )
        row = {
            "row": "sample",
            "system": system,
            "label": LABELS[system],
            "measurement": mode,
            "repeat": repeat,
            "runs": runs,
            "lat_s": lat,
            "ok_runs": ok_runs,
            "errors": runs - ok_runs,
            "checks_ok": checks_ok,
            **result,
            "sample_seconds_incl_startup": round(time.perf_counter() - started, 1),
        }
        return row

    def snapshot(self, procs: dict[str, int], include_self: bool) -> dict[str, float]:
        cpu = {name: cpu_seconds(pid) for name, pid in procs.items()}
        cpu["fakemodel"] = cpu_seconds(self.fake_pid)
        if include_self:
            cpu["client"] = cpu_seconds(os.getpid())
        return cpu

    def prepare_window(self, lat: float, procs: dict[str, int]) -> None:
        """Right before the measured window: latency, an empty model log, peaks reset."""
        self.set_latency(lat)
        self.clear_model_log()
        reset_peak_rss(self.fake_pid)

    def finish_row(
        self,
        runs: int,
        wall: float,
        durations: list[float],
        checks: list[str],
        cpu_before: dict[str, float],
        cpu_after: dict[str, float],
        procs: dict[str, int],
    ) -> dict[str, Any]:
        cpu = {k: cpu_after[k] - cpu_before[k] for k in cpu_after}
        own = list(procs)  # the system's own processes (not the fake model, not the client)
        row: dict[str, Any] = {
            "wall_s": round(wall, 3),
            "runs_per_s": round(runs / wall, 2),
            "p50_ms": _ms(percentile(durations, 50)),
            "p99_ms": _ms(percentile(durations, 99)),
            "cpu_s_by_process": {k: round(v, 3) for k, v in cpu.items()},
            "cpu_ms_per_run_by_process": {k: round(v / runs * 1000, 2) for k, v in cpu.items()},
            "cpu_ms_per_run_system": round(sum(cpu[k] for k in own) / runs * 1000, 2),
            "peak_rss_mb_by_process": {k: round(peak_rss_mb(pid), 1) for k, pid in procs.items()},
            "fakemodel_peak_rss_mb_in_window": round(peak_rss_mb(self.fake_pid), 1),
            "ok_runs": sum(c == "ok" for c in checks),
            "failure_kinds": sorted({c for c in checks if c != "ok"})[:5],
        }
        row["peak_rss_mb"] = round(sum(row["peak_rss_mb_by_process"].values()), 1)
        return row

    def worker_sample(
        self, worker: subprocess.Popen[str], mode: str, runs: int, lat: float, procs: dict[str, int]
    ) -> dict[str, Any]:
        self.set_latency(0)
        warm = self.worker_command(worker, cmd="warmup", runs=self.args.warmup)
        if warm.get("ok") != self.args.warmup:
            raise RuntimeError(f"warm-up runs failed: {warm}")
        self.prepare_window(lat, procs)
        before = self.snapshot(procs, include_self=False)
        result = self.worker_command(worker, cmd=mode, runs=runs)
        after = self.snapshot(procs, include_self=False)
        if result.get("event") != "done":
            raise RuntimeError(f"worker failed: {result}")
        row = self.finish_row(
            runs, result["wall_s"], result["durations"], result["checks"], before, after, procs
        )
        row["sample_final_state"] = _short_state(result["sample_final_state"])
        return row

    async def x_sample(
        self, mode: str, runs: int, lat: float, procs: dict[str, int]
    ) -> dict[str, Any]:
        """Crosscheck driven as bench/reflection_loop.py drives it: its one_run (POST
        /v1/runs, then wait for run.finished on the event websocket) and Finished."""
        rl = self.rl
        url = f"http://127.0.0.1:{self.ports.x['orchestrator']}"
        # 10 connections for the sequential runs, 100 for the concurrent ones
        self.set_latency(0)
        async with rl.Driver(url, 10 if mode == "seq" else 100) as driver:
            for _ in range(self.args.warmup):
                _, outcome = await driver.one_run()
                if outcome != "ok":
                    raise RuntimeError(f"warm-up run failed: {outcome}")
            self.prepare_window(lat, procs)
            before = self.snapshot(procs, include_self=True)
            began = time.perf_counter()
            if mode == "seq":
                results: list[Any] = []
                for _ in range(runs):
                    try:
                        results.append(await driver.one_run())
                    except Exception as exc:  # counted as an error, like a failed run
                        results.append(exc)
            else:
                results = await asyncio.gather(
                    *[driver.one_run() for _ in range(runs)], return_exceptions=True
                )
            wall = time.perf_counter() - began
            after = self.snapshot(procs, include_self=True)
            durations = [r[0] for r in results if not isinstance(r, BaseException)]
            checks = [
                f"{type(r).__name__}: {str(r)[:160]}" if isinstance(r, BaseException) else r[1]
                for r in results
            ]
            row = self.finish_row(runs, wall, durations, checks, before, after, procs)
            row.update(await self.x_verify(driver.client, runs))
        return row

    async def x_verify(self, client: Any, runs: int) -> dict[str, Any]:
        """Read back every run from the runs API: succeeded/critic_pass after 3 rounds; and
        a sample in full: verdicts revise, revise, pass, version 3 kept, 2 reflections."""
        summaries: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/v1/runs", params=params)).json()
            summaries += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        measured = summaries[:runs]  # newest first; the warm-up runs are the oldest
        bad_summaries = [
            s
            for s in measured
            if (s["status"], s["stop_reason"], s["rounds"]) != ("succeeded", "critic_pass", 3)
        ]
        detail_problems: list[str] = []
        last: dict[str, Any] = {}
        for summary in measured[: self.args.verify_sample]:
            run = (await client.get(f"/v1/runs/{summary['id']}")).json()
            last = run
            verdicts = [(r.get("critique") or {}).get("verdict") for r in run["rounds"]]
            if verdicts != ["revise", "revise", "pass"]:
                detail_problems.append(f"{run['id']}: verdicts {verdicts}")
            if not (run.get("final_output") or "").startswith("Bench answer version 3."):
                detail_problems.append(f"{run['id']}: final output not version 3")
            if len(run.get("reflections", [])) != 2:
                detail_problems.append(
                    f"{run['id']}: {len(run.get('reflections', []))} reflections"
                )
        return {
            "x_runs_in_database": len(summaries),  # warm-up + measured
            "x_runs_read_back": len(measured),
            "x_runs_not_succeeded_in_3_rounds": len(bad_summaries),
            "x_detail_checked": min(self.args.verify_sample, len(measured)),
            "x_detail_problems": detail_problems[:5],
            "sample_final_state": {
                "status": last.get("status"),
                "stop_reason": last.get("stop_reason"),
                "final_round": last.get("final_round"),
                "rounds": len(last.get("rounds", [])),
                "verdicts": [
                    (r.get("critique") or {}).get("verdict") for r in last.get("rounds", [])
                ],
                "output": (last.get("final_output") or "")[:60],
            },
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _short_state(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": state.get("status"),
        "stop_reason": state.get("stop_reason"),
        "round": state.get("round"),
        "calls": state.get("calls"),
        "reflections": len(state.get("reflections", [])),
        "output": str(state.get("output", ""))[:60],
    }


# =============================================================== summary


def median_row(samples: list[dict[str, Any]]) -> dict[str, Any]:
    first = samples[0]
    row: dict[str, Any] = {
        "row": "median",
        "system": first["system"],
        "label": first["label"],
        "measurement": first["measurement"],
        "repeats": len(samples),
        "runs": first["runs"],
        "lat_s": first["lat_s"],
        "checks_ok": all(s["checks_ok"] for s in samples),
        "errors_total": sum(s["errors"] for s in samples),
    }
    for key in ("runs_per_s", "p50_ms", "p99_ms", "wall_s", "peak_rss_mb", "cpu_ms_per_run_system"):
        values = [s[key] for s in samples if s.get(key) is not None]
        if values:
            row[key] = round(statistics.median(values), 2)
            row[f"{key}_min_max"] = [min(values), max(values)]
    row["errors"] = statistics.median(s["errors"] for s in samples)
    for nested in ("cpu_ms_per_run_by_process", "peak_rss_mb_by_process"):
        names = sorted({k for s in samples for k in s[nested]})
        row[nested] = {
            k: round(statistics.median(s[nested][k] for s in samples if k in s[nested]), 2)
            for k in names
        }
    return row


def prompts_identical(samples: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, bool]:
    """Per measurement: did every system send the model byte-identical request bodies?"""
    verdict: dict[str, bool] = {}
    for mode in sorted({m for _, m in samples}):
        seen = []
        for (_system, m), rows in samples.items():
            if m != mode:
                continue
            union: dict[str, set[str]] = {}
            for row in rows:
                for stage, digests in row.get("model_request_digests", {}).items():
                    union.setdefault(stage, set()).update(digests)
            seen.append(union)
        verdict[mode] = all(u == seen[0] for u in seen)
    return verdict


def ratio(x: float | None, p: float | None) -> str:
    if x is None or p is None or p == 0:
        return "-"
    return f"{x / p:.2f}x"


def markdown_table(
    medians: dict[tuple[str, str], dict[str, Any]],
    args: argparse.Namespace,
    floors: list[dict[str, Any]] | None = None,
) -> str:
    def get(system: str, mode: str, key: str, sub: str | None = None) -> float | None:
        row = medians.get((system, mode))
        if row is None:
            return None
        value = row.get(key)
        if sub is not None:
            value = (value or {}).get(sub)
        return value

    present = {system for system, _ in medians}
    shown_systems = [s for s in SYSTEMS if s in present]
    # ratio columns: (numerator, denominator), shown when both systems were measured
    pairs = [
        (x, p)
        for x, p in (("x", "p1"), ("x", "p2"), ("x", "p2s"), ("xpg", "p2"))
        if {x, p} <= present
    ]
    head = " | ".join(LABELS[s] for s in shown_systems)
    names = {"x": "X", "xpg": "X on Postgres", "p1": "P1", "p2": "P2", "p2s": "P2 sync"}
    ratio_head = "".join(f" | {names[x]}/{names[p]}" for x, p in pairs)
    lines = [
        f"| measurement | {head}{ratio_head} |",
        "|---" * (len(shown_systems) + len(pairs) + 1) + "|",
    ]

    def add(name: str, mode: str, key: str, sub: str | None = None, fmt: str = "{:.1f}") -> None:
        values = {s: get(s, mode, key, sub) for s in shown_systems}
        if all(v is None for v in values.values()):
            return
        shown = " | ".join("-" if v is None else fmt.format(v) for v in values.values())
        ratios = "".join(f" | {ratio(values[x], values[p])}" for x, p in pairs)
        lines.append(f"| {name} | {shown}{ratios} |")

    seq = f"(a) {args.runs} sequential, LAT=0"
    conc = f"(b) {args.concurrency} concurrent, LAT={args.lat:g} s"
    add(f"{seq}: runs/s", "seq", "runs_per_s")
    add(f"{seq}: per-run p50 ms", "seq", "p50_ms")
    add(f"{seq}: per-run p99 ms", "seq", "p99_ms")
    add(f"{seq}: CPU ms/run, system total", "seq", "cpu_ms_per_run_system")
    for proc in ORCHESTRATING + ("actor", "critic", "fakemodel", "client"):
        add(f"{seq}: CPU ms/run, {proc}", "seq", "cpu_ms_per_run_by_process", proc)
    add(f"{conc}: wall s", "conc", "wall_s", fmt="{:.2f}")
    add(f"{conc}: errors (median)", "conc", "errors", fmt="{:.0f}")
    add(f"{conc}: peak RSS MB, summed", "conc", "peak_rss_mb")
    add(f"{conc}: CPU ms/run, system total", "conc", "cpu_ms_per_run_system")
    for proc in ORCHESTRATING + ("actor", "critic", "fakemodel", "client"):
        add(f"{conc}: CPU ms/run, {proc}", "conc", "cpu_ms_per_run_by_process", proc)
    lines += ["", *above_the_calls(medians, floors or [])]
    lines.append(
        "System total = the system's own processes (LangGraph worker, orchestrator, Actor, "
        "Critic); the shared fake model and X's load-generating client are listed apart. "
        f"Medians of {args.repeats} repeat(s). All runs checked: "
        + ", ".join(
            f"{s}/{m} {'ok' if medians[(s, m)]['checks_ok'] else 'FAILED'}"
            for (s, m) in sorted(medians)
        )
        + "."
    )
    return "\n".join(lines)


def above_the_calls(
    medians: dict[tuple[str, str], dict[str, Any]], floors: list[dict[str, Any]]
) -> list[str]:
    """The orchestrating process's CPU per run minus P0's (the same calls, no framework):
    what LangGraph (P2) and Crosscheck's orchestrator (X) cost on top of the calls; and
    DBOS's own share of X's (a workflow of six steps that do nothing, bench.dbos_floor)."""
    lines = []
    for mode, label, key in (("seq", "(a)", "a"), ("conc", "(b)", "b")):
        floor = medians.get(("p0", mode), {}).get("cpu_ms_per_run_by_process", {}).get("plain loop")
        if floor is None:
            continue
        parts = []
        for system in ("p2", "p2s", "x", "xpg"):
            by_process = medians.get((system, mode), {}).get("cpu_ms_per_run_by_process", {})
            own = by_process.get("langgraph", by_process.get("orchestrator"))
            if own is not None:
                parts.append(f"{LABELS[system]} {own - floor:.1f} ms")
        lines.append(
            f"{label} orchestrating process, CPU per run above the calls alone "
            f"(P0's {floor:.1f} ms): " + ", ".join(parts) + "."
        )
        for row in floors:
            engine = row[f"{key}_cpu_ms_per_workflow"]
            lines.append(
                f"{label} of which DBOS alone on {row['database']} (six steps that do nothing, "
                f"bench.dbos_floor): {engine:.1f} ms; the calls plus DBOS: {floor + engine:.1f} ms."
            )
    return [*lines, ""] if lines else []


def dbos_floor(args: argparse.Namespace, database_url: str | None) -> dict[str, Any]:
    """bench.dbos_floor in a process of its own, with this invocation's runs and load."""
    command = [sys.executable, "-m", "bench.dbos_floor", "--runs", str(args.runs)]
    command += ["--concurrency", str(args.concurrency), "--lat", str(args.lat)]
    command += ["--executor-threads", str(args.executor_threads)]
    if database_url:
        command += ["--database-url", database_url]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
    }
    for name in (
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "aiosqlite",
        "langchain-core",
        "openai",
        "anthropic",
        "httpx",
        "httpx2",
        "dbos",
        "fastapi",
        "uvicorn",
        "uvloop",
        "pydantic",
    ):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def project_commit(project: Path) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(project), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def driver_main(args: argparse.Namespace) -> int:
    chosen = args.systems or ("p0,p1,p2,p2s,x,xpg" if args.postgres_url else "p0,p1,p2,p2s,x")
    systems = [s.strip() for s in chosen.split(",") if s.strip()]
    modes = [m.strip() for m in args.measurements.split(",") if m.strip()]
    for s in systems:
        if s not in SYSTEMS:
            sys.exit(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    for m in modes:
        if m not in ("seq", "conc"):
            sys.exit(f"unknown measurement {m!r}; choose from seq, conc")

    out_file = open(args.out, "a") if args.out else None

    def emit(row: dict[str, Any]) -> None:
        text = json.dumps(row)
        print(text, flush=True)  # noqa: T201
        if out_file:
            out_file.write(text + "\n")
            out_file.flush()

    # a SIGTERM unwinds like Ctrl-C, so every process started here is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise_open_files(args.concurrency)
    workdir = Path(tempfile.mkdtemp(prefix="peer-sdk-", dir=args.workdir))
    bench = Bench(args, workdir)
    emit(
        {
            "row": "env",
            **versions(),
            "project_commit": project_commit(ROOT),
            "task": bench.rl.TASK,
            "args": {k: v for k, v in vars(args).items() if k not in ("worker",)},
            "loadavg_start": os.getloadavg(),
        }
    )
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    failed = False
    try:
        bench.start_fakemodel()
        log(f"fake model pid {bench.fake_pid} at {bench.fake_url}; work dir {workdir}")
        for repeat in range(args.repeats):
            order = systems[repeat % len(systems) :] + systems[: repeat % len(systems)]
            for mode in modes:
                for system in order:
                    log(f"repeat {repeat + 1}/{args.repeats}: {system} {mode} ...")
                    try:
                        row = bench.sample(system, mode, repeat)
                    except Exception as exc:
                        failed = True
                        log(f"{system} {mode} failed: {exc!r}")
                        emit(
                            {
                                "row": "failed",
                                "system": system,
                                "measurement": mode,
                                "repeat": repeat,
                                "error": repr(exc)[:2000],
                            }
                        )
                        continue
                    emit(row)
                    samples.setdefault((system, mode), []).append(row)
                    log(
                        f"  {system} {mode}: wall {row['wall_s']} s, p50 {row['p50_ms']} ms, "
                        f"errors {row['errors']}, checks {'ok' if row['checks_ok'] else 'FAILED'}, "
                        f"cpu/run {row['cpu_ms_per_run_by_process']}"
                    )
    finally:
        bench.stop_all()
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    floors: list[dict[str, Any]] = []
    if args.dbos_floor and "p0" in systems:
        for database_url, wanted in ((None, "x"), (args.postgres_url, "xpg")):
            if wanted not in systems:
                continue
            log(f"DBOS alone ({'Postgres' if database_url else 'SQLite'}) ...")
            try:
                floors.append(dbos_floor(args, database_url))
            except (subprocess.CalledProcessError, ValueError) as exc:
                failed = True
                log(f"bench.dbos_floor failed: {exc!r}")
            else:
                emit(floors[-1])
    medians = {key: median_row(rows) for key, rows in samples.items()}
    for key in sorted(medians):
        emit(medians[key])
    same_prompts = prompts_identical(samples)
    emit({"row": "fairness", "model_requests_identical_across_systems": same_prompts})
    emit({"row": "end", "loadavg_end": os.getloadavg()})
    if medians:
        print()  # noqa: T201
        print(markdown_table(medians, args, floors))  # noqa: T201
        print(  # noqa: T201
            "Model request bodies byte-identical across the systems: "
            + ", ".join(f"{m} {'yes' if ok else 'NO'}" for m, ok in same_prompts.items())
            + "."
        )
    if out_file:
        out_file.close()
    all_ok = all(m["checks_ok"] for m in medians.values())
    return 0 if (all_ok and not failed) else 1


def raise_open_files(concurrency: int) -> None:
    """P1's SDK clients may hold ~concurrency connections each, and the fake model twice
    that: lift the soft open-files limit (inherited by every child) towards the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * concurrency + 1024
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        log(f"note: open-files limit {target} (hard limit) may be short for {concurrency} runs")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("CROSSCHECK_BENCH_POSTGRES_URL"),
        help="a Postgres server for xpg (X on Postgres): a fresh database per sample, dropped "
        "after it; with it, xpg joins the default systems",
    )
    parser.add_argument(
        "--systems",
        default=None,
        help="any of p0,p1,p2,p2s,x,xpg (default p0,p1,p2,p2s,x, and xpg with "
        "--postgres-url; p2s: P2 at --lg-durability sync, in the same invocation); "
        "LangGraph keeps its SQLite saver throughout",
    )
    parser.add_argument("--measurements", default="seq,conc", help="any of seq,conc")
    parser.add_argument("--runs", type=int, default=200, help="sequential runs per sample (LAT=0)")
    parser.add_argument("--concurrency", type=int, default=1000, help="concurrent runs per sample")
    parser.add_argument("--lat", type=float, default=0.05, help="fake model latency for conc, s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=5, help="sequential LAT=0 runs before each window"
    )
    parser.add_argument(
        "--executor-threads",
        type=int,
        default=8,
        help="ORCHESTRATOR_EXECUTOR_THREADS (bench/reflection_loop.py's default)",
    )
    parser.add_argument(
        "--lg-synchronous",
        default="NORMAL",
        choices=["NORMAL", "FULL", "OFF", "untouched"],
        help="PRAGMA synchronous on LangGraph's SQLite connection (default NORMAL: the "
        "durability Crosscheck's own SQLite pragmas choose; 'untouched': as "
        "AsyncSqliteSaver leaves it, FULL)",
    )
    parser.add_argument(
        "--lg-durability",
        default="default",
        choices=["default", "async", "sync", "exit"],
        help="LangGraph durability mode (default: LangGraph's own, 'async')",
    )
    parser.add_argument(
        "--lg-loop",
        default="asyncio",
        choices=["asyncio", "uvloop"],
        help="event loop of the LangGraph process (the services run uvloop via uvicorn)",
    )
    parser.add_argument(
        "--verify-sample",
        type=int,
        default=50,
        help="X runs read back in full from the runs API per sample (all are checked in summary)",
    )
    parser.add_argument(
        "--dbos-floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure DBOS alone (bench.dbos_floor) beside P0, for X and xpg",
    )
    parser.add_argument("--workdir", default=None, help="parent of the temporary work dir")
    parser.add_argument("--keep-workdir", action="store_true", help="keep databases and logs")
    parser.add_argument("--out", default=None, help="also append the JSON lines to this file")
    # worker-side (internal)
    parser.add_argument("--worker", choices=["p0", "p1", "p2"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--fake-url", help=argparse.SUPPRESS)
    parser.add_argument("--api-key", help=argparse.SUPPRESS)
    parser.add_argument("--actor-url", help=argparse.SUPPRESS)
    parser.add_argument("--critic-url", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        if args.lg_loop == "uvloop":
            import uvloop

            uvloop.run(worker_main(args))
        else:
            asyncio.run(worker_main(args))
        return 0
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())

"""Run schemas cannot take the orchestrator down: patterns are bounded before they are
compiled, schemas are capped in size at creation, and evaluations run in killable worker
processes shared fairly between owners (issue #26)."""

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from orchestrator.evaluators.patterns import PatternLimits, compile_pattern
from orchestrator.evaluators.pool import PoolConfig, SchemaPool, SchemaTimeout, SchemaUnusable
from orchestrator.evaluators.schema import InvalidSchema, SchemaLimits, check_schema
from orchestrator.settings import OrchestratorSettings
from tests.orchestrator.conftest import ADMIN_TOKEN, mint, wait_for
from tests.orchestrator.test_loop import actor_reply, critique
from tests.support.servers import free_port, wait_healthy

# a{1000000000}: a backtracking engine expands the repeat when it compiles it (~20 GB).
OOM_SCHEMA = {"type": "string", "pattern": "a{1000000000}"}


def anyof_chain(links: int = 23) -> dict:
    """Each link tries two $refs to the next: 2**links paths for a value that fails them all."""
    defs: dict[str, dict] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(links)
    }
    defs[f"d{links}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def refused(schema: dict, limits: SchemaLimits | None = None) -> str:
    with pytest.raises(InvalidSchema) as caught:
        check_schema(schema, limits)
    assert caught.value.status_code == 422
    return caught.value.message


def pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


class TestPatternBounds:
    def test_a_repeat_at_the_limit_is_accepted_one_above_is_refused_naming_the_path(self):
        check_schema({"type": "string", "pattern": "^a{1000}$"})
        check_schema({"type": "string", "pattern": "^a{2,1000}$"})
        message = refused({"properties": {"x": {"type": "string", "pattern": "^a{1001}$"}}})
        assert "/properties/x/pattern" in message
        assert "{1001} counts above the limit of 1000" in message

    def test_the_oom_repeat_is_refused_without_compiling(self):
        message = refused(OOM_SCHEMA)
        assert "/pattern" in message
        assert "{1000000000} counts above the limit of 1000" in message

    def test_nested_repeats_may_not_multiply_past_the_limit(self):
        check_schema({"type": "string", "pattern": "^(a{10}){100}$"})
        message = refused({"type": "string", "pattern": "^(a{100}){100}$"})
        assert "multiply to more than 1000" in message

    @pytest.mark.parametrize("pattern", ["^(?=a)a$", "^a(?!b)", "(?<=a)b", "(?<!a)b"])
    def test_lookaround_is_refused_with_a_clear_message(self, pattern):
        message = refused({"type": "string", "pattern": pattern})
        assert "is a lookaround" in message
        assert "not supported" in message
        assert "RE2" in message

    @pytest.mark.parametrize("pattern", [r"^(a)\1$", r"^(?<x>a)\k<x>$"])
    def test_a_backreference_is_refused_with_a_clear_message(self, pattern):
        assert "is a backreference" in refused({"type": "string", "pattern": pattern})

    def test_pattern_length_at_the_limit_and_above(self):
        limits = SchemaLimits(patterns=PatternLimits(max_length=10))
        check_schema({"type": "string", "pattern": "a" * 10}, limits)
        message = refused({"type": "string", "pattern": "a" * 11}, limits)
        assert "11 characters long, above the limit of 10" in message

    def test_group_nesting_at_the_limit_and_above(self):
        limits = SchemaLimits(patterns=PatternLimits(max_depth=3))
        check_schema({"type": "string", "pattern": "(((a)))"}, limits)
        assert "nest more than 3 deep" in refused(
            {"type": "string", "pattern": "((((a))))"}, limits
        )

    def test_a_lower_repeat_limit_from_settings_holds(self, service_token):
        settings = OrchestratorSettings(service_token=service_token, schema_pattern_max_repeat=10)
        check_schema({"type": "string", "pattern": "a{10}"}, settings.schema_limits())
        assert "limit of 10" in refused(
            {"type": "string", "pattern": "a{11}"}, settings.schema_limits()
        )

    def test_pattern_properties_keys_are_bounded_too(self):
        message = refused({"patternProperties": {"^x{5000}$": {"type": "string"}}})
        assert "/patternProperties" in message
        assert "limit of 1000" in message

    def test_a_pattern_the_meta_schema_does_not_see_is_bounded_too(self):
        # under an unknown keyword, reachable by $ref
        schema = {"x-lib": {"pattern": "a{1000000000}"}, "$ref": "#/x-lib"}
        message = refused(schema)
        assert "/x-lib" in message
        assert "limit of 1000" in message

    def test_a_pattern_over_the_memory_budget_is_refused(self):
        message = refused({"type": "string", "pattern": r"[\p{L}]{1000}"})
        assert "memory budget" in message

    def test_ecma_unicode_escapes_are_read_as_ecma_262_does(self):
        assert compile_pattern(r"^\u0041+$", PatternLimits()).search("AAA") is not None


class TestSizeLimits:
    def test_node_count_at_the_limit_is_accepted_one_more_is_refused(self):
        schema = {"type": "object", "required": ["a", "b"]}  # 1 + 1 + 1 + 2 = 5 nodes
        check_schema(schema, SchemaLimits(max_nodes=5))
        message = refused(schema, SchemaLimits(max_nodes=4))
        assert "more than 4 nodes" in message

    def test_json_size_at_the_limit_is_accepted_one_byte_more_is_refused(self):
        schema = {"type": "string", "description": "é" * 10}
        size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
        check_schema(schema, SchemaLimits(max_bytes=size))
        assert f"{size} bytes of JSON, above the limit of {size - 1}" in refused(
            schema, SchemaLimits(max_bytes=size - 1)
        )

    def test_a_5000_entry_all_of_is_refused_before_it_is_checked(self):
        schema = {"allOf": [{"type": "string", "minLength": i} for i in range(5000)]}
        # the meta-schema check alone cost about 1 s of CPU on it (5 s with $refs)
        assert "more than 2000 nodes" in refused(schema)


class TestOomReproduction:
    def test_the_oom_pattern_gets_a_422_from_a_memory_capped_orchestrator(
        self, tmp_path, service_token
    ):
        """The orchestrator runs as its own process under RLIMIT_AS (1.5 GB), so the test
        cannot take the machine down: compiling a{1000000000} the old way fails in it."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cap = 1536 * 1024 * 1024
        launcher = (
            "import resource, runpy, sys; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap})); "
            "sys.argv = ['orchestrator']; "
            "runpy.run_module('orchestrator', run_name='__main__', alter_sys=True)"
        )
        env = {
            **os.environ,
            "CROSSCHECK_SERVICE_TOKEN": service_token,
            "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
            "DATABASE_URL": f"sqlite:///{tmp_path}/crosscheck.sqlite",
            "ORCHESTRATOR_HOST": "127.0.0.1",
            "ORCHESTRATOR_PORT": str(port),
        }
        with (tmp_path / "orchestrator.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", launcher], env=env, stdout=log, stderr=subprocess.STDOUT
            )
            try:
                wait_healthy(url, process)
                admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
                minted = httpx.post(
                    f"{url}/v1/tokens", json={"name": "tenant", "role": "service"}, headers=admin
                )
                assert minted.status_code == 201, minted.text
                tenant = {"Authorization": f"Bearer {minted.json()['token']}"}
                response = httpx.post(
                    f"{url}/v1/runs",
                    json={"task": "x", "json_schema": OOM_SCHEMA},
                    headers=tenant,
                    timeout=60,
                )
                assert response.status_code == 422, response.text
                assert response.json()["error"] == "InvalidSchema"
                assert "/pattern" in response.json()["detail"]
                assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
                assert process.poll() is None
            finally:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


async def until(predicate, timeout: float = 30.0, what: str = "a condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


PLAIN = {"type": "string"}


class TestWorkerPool:
    async def test_an_evaluation_over_its_limit_is_killed_and_frees_its_slot(self):
        pool = SchemaPool(PoolConfig(workers=1, timeout_s=1.0))
        try:
            assert (await pool.evaluate("a", PLAIN, "x")).count == 0
            [pid] = pool.pids()
            with pytest.raises(SchemaTimeout, match="took longer than 1 s"):
                await pool.evaluate("a", anyof_chain(), "x")
            assert not pid_alive(pid)
            assert pool.busy() == 0
            assert (await pool.evaluate("a", PLAIN, "x")).count == 0  # a fresh worker
            assert pool.pids() != [pid]
        finally:
            pool.close()

    async def test_a_warm_worker_is_reused(self):
        pool = SchemaPool(PoolConfig(workers=1))
        try:
            await pool.evaluate("a", PLAIN, "x")
            first = pool.pids()
            for _ in range(20):
                assert (await pool.evaluate("a", PLAIN, 1)).count == 1
            assert pool.pids() == first
        finally:
            pool.close()

    async def test_one_owner_cannot_take_every_slot(self):
        """Two slow evaluations of one owner hold one slot of two: another owner's plain one
        is answered at once (before: both pool threads were stuck and it timed out)."""
        pool = SchemaPool(PoolConfig(workers=2, owner_share=1, timeout_s=60.0))
        noisy = [asyncio.create_task(pool.evaluate("noisy", anyof_chain(), "x")) for _ in range(2)]
        try:
            await until(lambda: len(pool.pids()) == 1, what="the first noisy evaluation")
            [noisy_pid] = pool.pids()
            quiet = await asyncio.wait_for(pool.evaluate("quiet", PLAIN, "x"), 30)
            assert quiet.count == 0
            assert not any(task.done() for task in noisy)  # one running, one queued
            assert pool.busy() == 1
            for task in noisy:
                task.cancel()
            await asyncio.gather(*noisy, return_exceptions=True)
            # a cancelled evaluation is killed and frees its slot
            assert not pid_alive(noisy_pid)
            assert pool.busy() == 0
            assert (await pool.evaluate("noisy", PLAIN, "x")).count == 0
        finally:
            pool.close()

    async def test_waiting_for_a_slot_does_not_count_against_the_limit(self):
        pool = SchemaPool(PoolConfig(workers=1, timeout_s=1.0))
        try:
            slow = asyncio.create_task(pool.evaluate("a", anyof_chain(), "x"))
            await until(lambda: pool.busy() == 1, what="the slow evaluation")
            plain = await pool.evaluate("b", PLAIN, "x")  # waits about 1 s for the slot
            assert plain.count == 0
            with pytest.raises(SchemaTimeout):
                await slow
        finally:
            pool.close()

    async def test_queued_owners_are_served_in_turn(self):
        pool = SchemaPool(PoolConfig(workers=1, timeout_s=1.0))
        finished: list[str] = []

        async def evaluate(owner: str, name: str) -> None:
            await pool.evaluate(owner, PLAIN, "x")
            finished.append(name)

        try:
            blocker = asyncio.create_task(pool.evaluate("x", anyof_chain(), "x"))
            await until(lambda: pool.busy() == 1, what="the blocking evaluation")
            queued = [
                asyncio.create_task(evaluate(owner, name))
                for owner, name in (("a", "a1"), ("a", "a2"), ("b", "b1"))
            ]
            await asyncio.gather(*queued)
            assert finished == ["a1", "b1", "a2"]
            with pytest.raises(SchemaTimeout):
                await blocker
        finally:
            pool.close()

    async def test_a_cancelled_waiter_leaves_no_slot_behind(self):
        pool = SchemaPool(PoolConfig(workers=1, timeout_s=1.0))
        try:
            blocker = asyncio.create_task(pool.evaluate("x", anyof_chain(), "x"))
            await until(lambda: pool.busy() == 1, what="the blocking evaluation")
            waiter = asyncio.create_task(pool.evaluate("a", PLAIN, "x"))
            await asyncio.sleep(0)
            waiter.cancel()
            await asyncio.gather(blocker, waiter, return_exceptions=True)
            assert pool.busy() == 0
            assert (await pool.evaluate("a", PLAIN, "x")).count == 0
        finally:
            pool.close()

    async def test_an_evaluation_over_the_memory_cap_fails_alone(self):
        pool = SchemaPool(PoolConfig(workers=1, memory_mb=64))
        try:
            await pool.evaluate("a", PLAIN, "x")
            [pid] = pool.pids()
            assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "1000"
            with pytest.raises(SchemaUnusable, match="needed more than 64 MB"):
                await pool.evaluate("a", {"type": "array"}, list(range(2_000_000)))
            assert (await pool.evaluate("a", PLAIN, "x")).count == 0
        finally:
            pool.close()

    async def test_an_error_of_the_evaluation_is_raised_as_its_class(self):
        # as before the workers: an unexpected error fails the run as internal_error
        pool = SchemaPool(PoolConfig(workers=1))
        try:
            with pytest.raises(TypeError):
                await pool.evaluate("a", {"type": 12}, "x")  # stored before checks existed
        finally:
            pool.close()


@pytest.mark.sqlite_only
class TestNoisyNeighbours:
    @pytest.fixture
    def orchestrator_settings(self, orchestrator_settings):
        return orchestrator_settings.model_copy(update={"schema_timeout_s": 2.0})

    async def test_two_pathological_runs_do_not_fail_a_third_owners_plain_run(
        self, api, fake_model, orchestrator_app
    ):
        fake_model.script(
            {"stage": "draft", "match": "Noisy A", "response": actor_reply('"x"')},
            {"stage": "draft", "match": "Noisy B", "response": actor_reply('"x"')},
            {"stage": "draft", "match": "Plain C", "response": actor_reply('"hello"')},
            {"stage": "critique", "match": "Plain C", "response": critique("pass")},
        )
        pool = orchestrator_app.state.schema_pool
        runs = {}
        for name in ("Noisy A", "Noisy B"):
            headers = {"Authorization": f"Bearer {await mint(api, 'service')}"}
            created = await api.post(
                "/v1/runs",
                json={
                    "task": f"{name}.",
                    "json_schema": anyof_chain(),
                    "policy": {"max_rounds": 1},
                },
                headers=headers,
            )
            assert created.status_code == 201, created.text
            runs[name] = (created.json()["id"], headers)
        await until(lambda: pool.busy() == 2, what="both noisy evaluations")
        noisy_pids = pool.pids()
        assert (await api.get("/healthz")).status_code == 200
        headers = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        created = await api.post(
            "/v1/runs", json={"task": "Plain C.", "json_schema": PLAIN}, headers=headers
        )
        assert created.status_code == 201, created.text
        plain = await wait_for(api, created.json()["id"], timeout=60)
        assert plain["rounds"][0]["evaluation"]["passed"] is True, plain["rounds"][0]
        assert plain["status"] == "succeeded"
        for run_id, _ in runs.values():
            run = await wait_for(api, run_id, timeout=60)
            evaluation = run["rounds"][0]["evaluation"]
            assert evaluation["passed"] is False
            assert evaluation["summary"] == "the schema evaluation took longer than 2 s"
        assert not any(pid_alive(pid) for pid in noisy_pids)


@pytest.mark.sqlite_only
class TestRefusalsThroughTheApi:
    @pytest.mark.parametrize(
        ("schema", "named"),
        [
            (OOM_SCHEMA, "/pattern"),
            ({"type": "string", "pattern": "^(?=a)"}, "lookaround"),
            ({"type": "string", "pattern": "\ud800"}, "lone surrogate"),
            ({"properties": {"\ud800": {"type": 12}}}, "/properties/"),
            ({"allOf": [{"type": "string"}] * 1000}, "more than 2000 nodes"),
        ],
    )
    async def test_a_refused_schema_is_a_422_and_the_orchestrator_keeps_answering(
        self, api, schema, named
    ):
        # escaped as JSON allows ("\ud800"): httpx would not encode a lone surrogate
        body = json.dumps({"task": "x", "json_schema": schema})
        response = await api.post(
            "/v1/runs", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "InvalidSchema"
        assert named in response.json()["detail"]
        assert (await api.get("/healthz")).status_code == 200

    async def test_lone_surrogates_in_the_output_are_matched_not_crashed_on(self):
        pool = SchemaPool(PoolConfig(workers=1))
        try:
            schema = {"type": "string", "pattern": "^a"}
            assert (await pool.evaluate("a", schema, "a\ud800")).count == 0
            keyed = {"patternProperties": {"^a": {"type": "integer"}}}
            assert (await pool.evaluate("a", keyed, {"a\ud800": "s"})).count == 1
        finally:
            pool.close()


class TestPoolShutdown:
    async def test_closing_the_pool_kills_its_workers_and_fails_waiting_evaluations(self):
        pool = SchemaPool(PoolConfig(workers=1, timeout_s=60.0))
        running = asyncio.create_task(pool.evaluate("a", anyof_chain(), "x"))
        await until(lambda: len(pool.pids()) == 1, what="the running evaluation")
        [pid] = pool.pids()
        waiting = asyncio.create_task(pool.evaluate("b", PLAIN, "x"))
        await asyncio.sleep(0)
        pool.close()
        assert not pid_alive(pid)
        for task in (running, waiting):
            with pytest.raises(SchemaUnusable):
                await asyncio.wait_for(task, 30)
        assert pool.pids() == []


class TestSettings:
    def test_the_limits_and_the_pool_come_from_the_environment(self, monkeypatch, service_token):
        for name, value in {
            "SCHEMA_MAX_BYTES": "1000",
            "SCHEMA_MAX_NODES": "50",
            "SCHEMA_PATTERN_MAX_LENGTH": "40",
            "SCHEMA_PATTERN_MAX_REPEAT": "20",
            "SCHEMA_PATTERN_MAX_DEPTH": "4",
            "SCHEMA_PATTERN_MAX_MEM_KB": "512",
            "SCHEMA_WORKERS": "3",
            "SCHEMA_OWNER_SHARE": "5",
            "SCHEMA_TIMEOUT_S": "2.5",
            "SCHEMA_WORKER_MEMORY_MB": "256",
        }.items():
            monkeypatch.setenv(f"ORCHESTRATOR_{name}", value)
        settings = OrchestratorSettings(service_token=service_token)
        patterns = PatternLimits(max_length=40, max_repeat=20, max_depth=4, max_mem_kb=512)
        assert settings.schema_limits() == SchemaLimits(
            max_bytes=1000, max_nodes=50, patterns=patterns
        )
        assert settings.schema_pool() == PoolConfig(
            workers=3, owner_share=5, timeout_s=2.5, memory_mb=256, patterns=patterns
        )
        pool = SchemaPool(settings.schema_pool())
        assert pool.share == 3  # never more than the workers
        pool.close()

    def test_a_repeat_limit_above_what_re2_allows_is_refused_at_start(self, service_token):
        with pytest.raises(ValueError, match="schema_pattern_max_repeat"):
            OrchestratorSettings(service_token=service_token, schema_pattern_max_repeat=1001)

"""Start-up: the self-test gates serving; without bubblewrap the service refuses unless weak
isolation is allowed, and then every result and ``/v1/isolation`` say so."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sandbox.app import create_app
from sandbox.fake import FakeExecutor, make_result
from sandbox.isolation.plan import IsolationUnavailable, plan_isolation
from sandbox.selftest import run_selftest
from sandbox.service import SandboxService, SelfTestFailed
from shared.sandbox.schemas import ExecuteRequest, ExecuteResult, ExecutionStatus, SelfTestCheck
from tests.sandbox.conftest import AUTH, NOBODY, processes_of, require_bwrap, sandbox_settings


def nobody_processes() -> set[int]:
    return set(processes_of(NOBODY))


class TestRefusal:
    def test_without_bubblewrap_the_service_refuses_to_start(self) -> None:
        require_bwrap()
        before = nobody_processes()
        app = create_app(sandbox_settings(bwrap_path="/nonexistent/bwrap"))
        with pytest.raises(IsolationUnavailable, match="SANDBOX_ALLOW_WEAK_ISOLATION"):
            with TestClient(app, headers=AUTH):
                pass
        assert nobody_processes() <= before

    def test_a_failed_self_test_refuses_to_serve(self, monkeypatch: pytest.MonkeyPatch) -> None:
        require_bwrap()

        async def leaky(executor: Any, plan: Any) -> list[SelfTestCheck]:
            return [SelfTestCheck(name="host_files", passed=False, detail="read a host file")]

        monkeypatch.setattr("sandbox.service.run_selftest", leaky)  # where the service looks
        before = nobody_processes()
        app = create_app(sandbox_settings())
        with pytest.raises(SelfTestFailed, match="host_files: read a host file"):
            with TestClient(app, headers=AUTH):
                pass
        time.sleep(0.1)
        assert nobody_processes() <= before

    def test_a_python_outside_usr_is_refused(self) -> None:
        with pytest.raises(IsolationUnavailable, match="under /usr"):
            plan_isolation(sandbox_settings(python_path="/opt/python3"))


class TestWeakIsolation:
    def test_weak_isolation_serves_and_says_so_everywhere(self) -> None:
        require_bwrap()  # root and a Linux host; bubblewrap itself is switched off below
        settings = sandbox_settings(bwrap_path="/nonexistent/bwrap", allow_weak_isolation=True)
        with TestClient(create_app(settings), headers=AUTH) as client:
            report = client.get("/v1/isolation").json()
            assert report["mode"] == "weak"
            assert report["weak_isolation_allowed"] is True
            layers = {layer["name"]: layer for layer in report["layers"]}
            assert layers["bubblewrap"]["active"] is False
            assert "not found" in layers["bubblewrap"]["detail"]
            assert layers["seccomp"]["active"] is True
            checks = {c["name"]: c for c in report["selftest"]}
            assert report["selftest_passed"] is True
            # what only bubblewrap stops is reported as not contained, without blocking
            assert checks["host_write"]["required"] is False
            assert checks["host_write"]["passed"] is False
            assert checks["network"]["required"] is True
            assert checks["network"]["passed"] is True

            result = client.post(
                "/v1/execute", json={"code": "x = 1\n", "tests": "assert x == 1\n"}
            ).json()
            assert result["status"] == "passed"
            assert result["isolation"] == "weak"
            assert result["message"].endswith("[weak isolation]")

            zygotes = nobody_processes()
            orphan = (
                "import os, time\n"
                "if os.fork() == 0:\n"
                "    os.setsid()\n"
                "    if os.fork() == 0:\n"
                "        time.sleep(60)\n"
                "    os._exit(0)\n"
                "time.sleep(60)\n"
            )
            result = client.post("/v1/execute", json={"code": orphan, "timeout_s": 0.5}).json()
            assert result["status"] == "timeout"
            assert nobody_processes() == zygotes  # the orphan was found and killed


class TestSelfTestProbes:
    async def test_the_host_checks_catch_a_leak_the_job_does_not_report(self) -> None:
        def leaking(request: ExecuteRequest) -> ExecuteResult:
            target = re.search(r"TARGET = '([^']+)'", request.code)
            if target:  # the write "escaped" to the host
                Path(target.group(1)).write_text("x")
            return make_result(request)

        plan = plan_isolation(sandbox_settings()) if _bwrap() else None
        if plan is None:
            pytest.skip("needs a Linux host with bubblewrap")
        try:
            checks = {c.name: c for c in await run_selftest(FakeExecutor(leaking), plan)}
        finally:
            plan.close()
        assert checks["host_write"].passed is False
        assert "created" in checks["host_write"].detail
        assert checks["timeout"].passed is False  # an endless loop cannot "pass"
        assert checks["control"].passed is False  # no stdout: the control did not really run

    async def test_the_real_sandbox_passes_every_probe(self) -> None:
        require_bwrap()
        service = await SandboxService.start(sandbox_settings(workers=1))
        try:
            assert service.selftest_passed
            assert all(c.passed and c.required for c in service.selftest)
        finally:
            await service.close()


def _bwrap() -> bool:
    try:
        require_bwrap()
    except pytest.skip.Exception:
        return False
    return True


def test_fake_results_are_well_formed() -> None:
    failed = make_result(status=ExecutionStatus.failed, message="1 of 1 tests failed")
    assert failed.error_class.value == "logic"
    assert make_result().error_class.value == "none"

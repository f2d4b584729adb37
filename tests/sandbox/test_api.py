"""The sandbox API as a caller sees it: request limits, auth, results per test, batch, isolation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sandbox.conftest import Sandbox

ADD = "def add(a, b):\n    return a + b\n"
CHECK = (
    "def check(candidate):\n"
    "    assert candidate(1, 2) == 3\n"
    "    assert candidate(2, 2) == 5\n"
    "    for i in range(10):\n"
    "        assert candidate(i, 0) == i\n"
)


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {test["name"]: test for test in result["tests"]}


class TestRequestLimits:
    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("timeout_s", 0),
            ("timeout_s", 61),
            ("memory_mb", 8),
            ("memory_mb", 5000),
            ("entry_point", "not an identifier"),
            ("code", "x" * 100_001),
            ("tests", "x" * 100_001),
            ("unknown_field", 1),
        ],
    )
    def test_a_bad_value_is_a_clear_422(self, sandbox: Sandbox, field: str, value: Any) -> None:
        body = {"code": ADD, field: value}
        response = sandbox.client.post("/v1/execute", json=body)
        assert response.status_code == 422
        error = response.json()
        assert error["error"] == "ValidationError"
        assert error["detail"][0]["loc"][-1] == field

    def test_a_batch_past_its_limit_is_a_422(self, sandbox: Sandbox) -> None:
        response = sandbox.client.post("/v1/execute/batch", json={"jobs": [{"code": "pass"}] * 257})
        assert response.status_code == 422

    def test_an_empty_batch_is_a_422(self, sandbox: Sandbox) -> None:
        assert sandbox.client.post("/v1/execute/batch", json={"jobs": []}).status_code == 422

    def test_a_body_past_the_body_limit_is_a_413(self, sandbox: Sandbox) -> None:
        jobs = [{"code": "x" * 90_000}] * 60
        response = sandbox.client.post("/v1/execute/batch", json={"jobs": jobs})
        assert response.status_code == 413


class TestAuth:
    @pytest.mark.parametrize(
        ("method", "path"),
        [("post", "/v1/execute"), ("post", "/v1/execute/batch"), ("get", "/v1/isolation")],
    )
    def test_every_v1_route_needs_the_token(self, sandbox: Sandbox, method: str, path: str) -> None:
        response = sandbox.client.request(
            method, path, json={"code": ADD}, headers={"Authorization": "Bearer wrong-token-xyz"}
        )
        assert response.status_code == 401
        assert response.json()["error"] == "Unauthorized"

    def test_info_and_health_are_open(self, sandbox: Sandbox) -> None:
        headers = {"Authorization": ""}
        assert sandbox.client.get("/v1/info", headers=headers).json()["service"] == "sandbox"
        assert sandbox.client.get("/healthz", headers=headers).status_code == 200
        assert sandbox.client.get("/readyz", headers=headers).json() == {"status": "ready"}


class TestHumanEvalStyle:
    def test_each_assertion_is_reported_with_the_values_compared(self, sandbox: Sandbox) -> None:
        result = sandbox.run(ADD, CHECK, entry_point="add")
        assert result["status"] == "failed"
        assert result["error_class"] == "logic"
        tests = by_name(result)
        assert tests["check:2"]["status"] == "passed"
        assert tests["check:3"]["status"] == "failed"
        assert "left was 4, right was 5" in tests["check:3"]["message"]
        assert tests["check:3"]["source"] == "assert candidate(2, 2) == 5"
        assert tests["check:5"] | {"status": "passed", "runs": 10} == tests["check:5"]
        assert result["tests_passed"] == 2
        assert result["tests_failed"] == 1
        assert "check:3" in result["message"]

    def test_prompt_and_completion_are_joined(self, sandbox: Sandbox) -> None:
        result = sandbox.run(
            "    return a + b\n",
            "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            prompt='def add(a, b):\n    """Add."""\n',
            entry_point="add",
        )
        assert result["status"] == "passed", result
        assert result["message"] == "all 1 tests passed"

    def test_fail_fast_stops_at_the_first_failed_assertion(self, sandbox: Sandbox) -> None:
        result = sandbox.run(ADD, CHECK, entry_point="add", fail_fast=True)
        assert result["status"] == "failed"
        assert by_name(result)["check:5"]["status"] == "not_run"

    def test_an_exception_inside_an_assertion_is_that_assertion_erroring(
        self, sandbox: Sandbox
    ) -> None:
        code = "def inv(x):\n    return 1 / x\n"
        tests = (
            "def check(candidate):\n    assert candidate(0) == 0\n    assert candidate(1) == 1\n"
        )
        result = sandbox.run(code, tests, entry_point="inv")
        tests_ = by_name(result)
        assert tests_["check:2"]["status"] == "error"
        assert "ZeroDivisionError" in tests_["check:2"]["message"]
        assert "solution.py:2" in tests_["check:2"]["message"]
        assert tests_["check:3"]["status"] == "passed"

    def test_a_missing_entry_point_is_an_error(self, sandbox: Sandbox) -> None:
        result = sandbox.run(ADD, CHECK, entry_point="subtract")
        assert result["status"] == "error"
        assert "subtract" in result["message"]

    def test_the_entry_point_is_inferred_from_a_single_function(self, sandbox: Sandbox) -> None:
        assert sandbox.run(ADD, "def check(c):\n    assert c(1, 1) == 2\n")["status"] == "passed"


class TestPytestStyle:
    def test_each_function_is_reported(self, sandbox: Sandbox) -> None:
        tests = (
            "import pytest\n"
            "from solution import add\n"
            "def test_small():\n    assert add(1, 2) == 3\n"
            "def test_wrong():\n    assert add(2, 2) == 5\n"
            "def test_raises():\n    with pytest.raises(TypeError):\n        add(1, None)\n"
            "@pytest.mark.parametrize('a,b,total', [(1, 1, 2), (2, 3, 6)])\n"
            "def test_table(a, b, total):\n    assert add(a, b) == total\n"
            "@pytest.fixture\ndef base():\n    return 10\n"
            "def test_fixture(base, tmp_path):\n"
            "    (tmp_path / 'f').write_text('x')\n    assert add(base, 1) == 11\n"
            "class TestClass:\n    def test_method(self):\n        assert add(0, 0) == 0\n"
            "def test_approx():\n    assert add(0.1, 0.2) == pytest.approx(0.3)\n"
        )
        result = sandbox.run(ADD, tests)
        statuses = {t["name"]: t["status"] for t in result["tests"]}
        assert statuses == {
            "test_small": "passed",
            "test_wrong": "failed",
            "test_raises": "passed",
            "test_table[1-1-2]": "passed",
            "test_table[2-3-6]": "failed",
            "test_fixture": "passed",
            "TestClass.test_method": "passed",
            "test_approx": "passed",
        }
        assert result["status"] == "failed"
        wrong = by_name(result)["test_wrong"]["message"]
        assert "assert add(2, 2) == 5" in wrong
        assert "left was 4, right was 5" in wrong

    def test_unittest_cases_are_reported_per_method(self, sandbox: Sandbox) -> None:
        tests = (
            "import unittest\n"
            "class TestAdd(unittest.TestCase):\n"
            "    def test_ok(self):\n        self.assertEqual(add(1, 1), 2)\n"
            "    def test_bad(self):\n        self.assertEqual(add(1, 1), 3)\n"
        )
        statuses = {t["name"]: t["status"] for t in sandbox.run(ADD, tests)["tests"]}
        assert statuses == {"TestAdd.test_ok": "passed", "TestAdd.test_bad": "failed"}


class TestScriptsAndErrors:
    def test_top_level_asserts_are_tests(self, sandbox: Sandbox) -> None:
        result = sandbox.run(ADD, "assert add(1, 1) == 2\nassert add(1, 1) == 3\n")
        assert [t["status"] for t in result["tests"]] == ["passed", "failed"]

    def test_code_without_tests_just_runs(self, sandbox: Sandbox) -> None:
        result = sandbox.run("print('hello')\n")
        assert result["status"] == "passed"
        assert result["stdout"] == "hello\n"
        assert result["message"] == "the code ran without error"

    def test_a_syntax_error_is_an_error_with_the_line(self, sandbox: Sandbox) -> None:
        result = sandbox.run("def f(:\n    pass\n", "assert f() is None\n")
        assert result["status"] == "error"
        assert result["error_class"] == "logic"
        assert "line 1" in result["message"]

    def test_an_exception_at_import_is_an_error_with_a_traceback(self, sandbox: Sandbox) -> None:
        result = sandbox.run("import json\nraise ValueError('boom')\n", "assert True\n")
        assert result["status"] == "error"
        assert "ValueError: boom" in result["message"]
        assert "solution.py" in result["stderr"]

    def test_calling_exit_is_reported(self, sandbox: Sandbox) -> None:
        assert "exit" in sandbox.run("import sys\nsys.exit(3)\n")["message"]
        result = sandbox.run("import os\nos._exit(0)\n", "assert True\n")
        assert result["status"] == "error"
        assert "before the tests finished" in result["message"]

    def test_stdout_and_stderr_are_kept_apart(self, sandbox: Sandbox) -> None:
        result = sandbox.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n")
        assert (result["stdout"], result["stderr"]) == ("out\n", "err\n")

    def test_output_before_a_timeout_is_kept(self, sandbox: Sandbox) -> None:
        result = sandbox.run("print('started')\nwhile True:\n    pass\n", timeout_s=0.5)
        assert result["status"] == "timeout"
        assert result["stdout"] == "started\n"

    def test_a_timeout_names_the_assertion_that_was_running(self, sandbox: Sandbox) -> None:
        code = "def f(x):\n    while x:\n        pass\n    return x\n"
        tests = (
            "def check(candidate):\n    assert candidate(0) == 0\n    assert candidate(1) == 1\n"
        )
        result = sandbox.run(code, tests, entry_point="f", timeout_s=0.5)
        assert result["status"] == "timeout"
        assert result["limit"] == "wall_time"
        statuses = {t["name"]: t["status"] for t in result["tests"]}
        assert statuses["check:2"] == "passed"
        assert statuses["check:3"] == "timeout"
        assert "check:3" in result["message"]

    def test_job_id_is_echoed(self, sandbox: Sandbox) -> None:
        assert sandbox.run("pass", job_id="run-7/round-2")["job_id"] == "run-7/round-2"


class TestBatch:
    def test_results_come_back_in_request_order(self, sandbox: Sandbox) -> None:
        jobs = [
            {
                "code": f"def f():\n    return {i}\n",
                "tests": f"assert f() == {i % 3}\n",
                "job_id": str(i),
            }
            for i in range(12)
        ]
        body = sandbox.client.post("/v1/execute/batch", json={"jobs": jobs}).json()
        assert [r["job_id"] for r in body["results"]] == [str(i) for i in range(12)]
        assert [r["status"] for r in body["results"]] == [
            "passed" if i % 3 == i else "failed" for i in range(12)
        ]
        assert (body["passed"], body["total"]) == (3, 12)


class TestIsolationReport:
    def test_every_layer_is_active_and_the_self_test_passed(self, sandbox: Sandbox) -> None:
        report = sandbox.client.get("/v1/isolation").json()
        assert report["mode"] == "full"
        assert report["selftest_passed"] is True
        layers = {layer["name"]: layer["active"] for layer in report["layers"]}
        for name in ("non_root_uid", "bubblewrap", "seccomp", "rlimits", "pids_cgroup"):
            assert layers[name], name
        assert {c["name"] for c in report["selftest"]} >= {
            "control",
            "host_files",
            "host_write",
            "network",
            "namespaces",
            "timeout",
        }
        assert all(c["passed"] for c in report["selftest"])
        assert report["workers"] == 2

    def test_results_say_full_isolation(self, sandbox: Sandbox) -> None:
        assert sandbox.run("pass")["isolation"] == "full"

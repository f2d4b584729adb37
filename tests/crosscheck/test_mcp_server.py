"""`crosscheck mcp` through the `mcp` package's own client: over streamable HTTP (each request
with its bearer token) and over stdio (the command an MCP host starts), against a real
Orchestrator with the Actor and Critic on the fake model (see conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from crosscheck.mcp_server import build_server, http_app
from tests.orchestrator.conftest import ADMIN_TOKEN, mint
from tests.support.apps import uvicorn_serving

SKY = "Explain why the sky is blue."
TOOLS = {"check", "get_run", "list_escalations", "request_review"}


@asynccontextmanager
async def mcp_over_http(url: str, token: str | None) -> AsyncIterator[Client]:
    """The orchestrator at ``url`` served as MCP at /mcp, and a client with ``token``."""
    async with uvicorn_serving(http_app(build_server(url), url)) as served:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(f"{served}/mcp", http_client=http)
            async with Client(transport) as client:
                yield client


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


async def test_check_returns_the_output_that_shipped_and_get_run_reads_the_run(url, api):
    async with mcp_over_http(url, ADMIN_TOKEN) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        checked = structured(await client.call_tool("check", {"task": SKY}))
        assert checked["status"] == "succeeded", checked
        run = (await api.get(f"/v1/runs/{checked['run_id']}")).json()
        assert run["status"] == "succeeded"
        assert checked["output"] == run["final_output"]
        assert checked["rounds"] == len(run["rounds"]) == 2

        read = structured(await client.call_tool("get_run", {"run_id": checked["run_id"]}))
        assert read["status"] == "succeeded"
        assert read["final_output"] == run["final_output"]
        assert read["last_verdict"] == "pass"


async def test_an_escalation_is_a_tool_result_naming_the_review_item(url, api):
    async with mcp_over_http(url, ADMIN_TOKEN) as client:
        checked = structured(await client.call_tool("check", {"task": SKY, "max_rounds": 1}))
        assert checked["status"] == "escalated", checked
        assert checked["stop_reason"] == "max_rounds"
        assert checked["output"] is None  # nothing shipped: a person decides
        items = (await api.get("/v1/reviews", params={"run_id": checked["run_id"]})).json()
        [item] = items["items"]
        assert checked["review_id"] == item["id"]
        assert item["id"] in checked["review_url"]

        listed = structured(await client.call_tool("list_escalations", {}))
        entries = listed["result"] if isinstance(listed, dict) else listed
        assert item["id"] in {entry["review_id"] for entry in entries}


async def test_bad_arguments_are_refused_before_any_run_starts(url, api):
    before = (await api.get("/v1/runs")).json()["items"]
    async with mcp_over_http(url, ADMIN_TOKEN) as client:
        refused = await client.call_tool("check", {"task": SKY, "max_rounds": 0})
        assert refused.is_error
        assert "max_rounds" in str(refused.content)
        missing = await client.call_tool("get_run", {"run_id": "run_does_not_exist"})
        assert missing.is_error
        assert (
            "run_does_not_exist" in str(missing.content)
            or "not found" in str(missing.content).lower()
        )
    assert (await api.get("/v1/runs")).json()["items"] == before


async def test_over_http_a_request_needs_a_token_the_orchestrator_knows(url):
    async with uvicorn_serving(http_app(build_server(url), url)) as served:
        async with httpx.AsyncClient(base_url=served, timeout=30) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            without = await http.post("/mcp", json=body)
            assert without.status_code == 401
            assert "Bearer" in without.headers["www-authenticate"]
            unknown = await http.post(
                "/mcp", json=body, headers={"Authorization": "Bearer not-a-real-token-0123"}
            )
            assert unknown.status_code == 401
            assert "does not accept this token" in unknown.text
            assert "not-a-real-token" not in unknown.text  # the token is never echoed


async def test_each_caller_sees_only_its_own_runs(url, api):
    """Tools act with the caller's token: a service token cannot read the admin's run."""
    created = await api.post("/v1/runs", json={"task": SKY})
    run_id = created.json()["id"]
    other = await mint(api, "service")
    async with mcp_over_http(url, other) as client:
        refused = await client.call_tool("get_run", {"run_id": run_id})
        assert refused.is_error, refused.structured_content
    async with mcp_over_http(url, ADMIN_TOKEN) as client:
        assert structured(await client.call_tool("get_run", {"run_id": run_id}))["run_id"] == run_id


async def test_over_stdio_the_command_an_mcp_host_starts_answers(url, api):
    created = await api.post("/v1/runs", json={"task": SKY})
    run_id = created.json()["id"]
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "crosscheck", "mcp", "--url", url, "--token", ADMIN_TOKEN],
    )
    async with Client(command) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        read = structured(await client.call_tool("get_run", {"run_id": run_id}))
        assert read["run_id"] == run_id
        assert read["task"] == SKY

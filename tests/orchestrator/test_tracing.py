"""A run started with a ``traceparent`` is one trace: the orchestrator's steps, the Actor's,
Critic's and Research service's requests and every model call, with the GenAI attributes.

The Actor, Critic and Research service run in-process (their SDKs reach the fake model server
over HTTP), so one in-memory exporter sees every service's spans."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from sandbox.app import create_app as create_sandbox
from sandbox.fake import FakeExecutor
from shared import tracing
from tests.orchestrator.conftest import ADMIN_TOKEN, wait_for
from tests.orchestrator.test_decisions import FINAL, claimed_by_reviewer, decide
from tests.orchestrator.test_loop import actor_reply, critique
from tests.orchestrator.test_research_loop import (  # noqa: F401  (fixtures)
    document,
    draft,
    orchestrator_app,
    research_app,
    research_service,
    research_url,
)
from tests.sandbox.conftest import sandbox_settings
from tests.sandbox.test_conformance import PASSING, client_of
from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY
from tests.support.tracing import (
    CALLER_SPAN_ID,
    TRACE_ID,
    TRACEPARENT,
    attribute_texts,
    hex_id,
    recording,
    spans_until,
)

pytestmark = pytest.mark.sqlite_only  # the trace does not depend on the database

TASK = "When did the Golden Gate Bridge open?"
REVISED = "The Golden Gate Bridge opened in 1937.\nIt crosses the Golden Gate strait.\n"


@pytest.fixture(scope="session")
def sandbox_url() -> str:
    """No run here evaluates code: no sandbox process is started for these tests."""
    return "http://127.0.0.1:9"


@pytest.fixture
def spans():
    with recording() as exporter:
        yield exporter


@pytest.fixture
def spans_with_content():
    with recording(content=True) as exporter:
        yield exporter


def script_two_rounds(fake_model) -> None:
    fake_model.script(
        {"stage": "draft", "response": draft()},
        {"stage": "critique", "response": critique("revise")},
        {"stage": "revise", "response": actor_reply(REVISED)},
        {"stage": "critique", "response": critique("pass")},
    )


async def start_traced(api, **policy) -> str:
    response = await api.post(
        "/v1/runs", json={"task": TASK, "policy": policy}, headers={"traceparent": TRACEPARENT}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def traced_run(api, exporter) -> tuple[dict, list[ReadableSpan]]:
    run = await wait_for(api, await start_traced(api, research=True, convergence_threshold=0))
    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])

    def ended(spans: list[ReadableSpan]) -> bool:
        return any(attrs(s).get("crosscheck.stop_reason") for s in spans)

    return run, await spans_until(exporter, ended)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [parent] = [s for s in spans if s.context.span_id == span.parent.span_id]
    return parent


def model_calls(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if attrs(s).get("gen_ai.operation.name") == "chat"]


class TestOneTracePerRun:
    async def test_the_steps_and_model_calls_of_every_service_share_the_callers_trace(
        self, api, fake_model, spans
    ):
        script_two_rounds(fake_model)
        run, found = await traced_run(api, spans)

        # every span but those of the test's own polling (requests of their own) is in it
        polls = named(found, "GET /v1/runs/{run_id}")
        assert polls, "no span was recorded"
        run_spans = [s for s in found if s not in polls]
        assert {hex_id(s.context.trace_id, 32) for s in run_spans} == {TRACE_ID}
        # the request that created the run is the caller's child, and every step is its child
        [created] = named(found, "POST /v1/runs")
        assert created.kind is SpanKind.SERVER
        assert created.parent is not None
        assert hex_id(created.parent.span_id, 16) == CALLER_SPAN_ID
        steps = sorted(
            (s for s in found if "crosscheck.step" in attrs(s)),
            key=lambda s: s.start_time or 0,
        )
        assert sorted({s.name for s in steps}) == ["act", "critique", "research"]
        assert all(parent_of(s, found) is created for s in steps)
        assert all(attrs(s)["crosscheck.run_id"] == run["id"] for s in steps)
        assert [(s.name, attrs(s)["crosscheck.round"]) for s in steps] == [
            ("act", 1),
            ("research", 1),
            ("critique", 1),
            ("act", 2),
            ("research", 2),
            ("critique", 2),
        ]
        last = steps[-1]
        assert attrs(last)["crosscheck.stop_reason"] == run["stop_reason"] == "critic_pass"
        assert attrs(last)["crosscheck.run_status"] == "succeeded"
        # each step's peer request (another service) is a child of the step's span
        for step, request in [("act", "POST /v1/draft"), ("critique", "POST /v1/critique")]:
            [served, *_] = named(found, request)
            assert served.kind is SpanKind.SERVER
            assert parent_of(served, found).name == step
        [searched] = named(found, "POST /v1/research")  # round 2 reuses round 1's evidence
        assert parent_of(searched, found).name == "research"
        [revised] = named(found, "POST /v1/revise")
        assert attrs(parent_of(revised, found))["crosscheck.round"] == 2

    async def test_model_calls_carry_the_genai_attributes_and_the_runs_tokens(
        self, api, fake_model, spans
    ):
        script_two_rounds(fake_model)
        run, found = await traced_run(api, spans)

        calls = model_calls(found)
        assert len(calls) == len(fake_model.requests()) == 4
        for call in calls:
            attributes = attrs(call)
            assert call.kind is SpanKind.CLIENT
            assert call.name == f"chat {attributes['gen_ai.request.model']}"
            assert attributes["gen_ai.provider.name"] in {"openai", "anthropic"}
            assert attributes["gen_ai.system"] == attributes["gen_ai.provider.name"]
            assert attributes["gen_ai.response.model"]
            assert attributes["gen_ai.usage.input_tokens"] > 0
            assert attributes["gen_ai.usage.output_tokens"] > 0
            # made by the Actor or the Critic, inside the request the orchestrator sent it
            assert parent_of(call, found).kind is SpanKind.SERVER
        actor, critic = run["models"]["actor"]["provider"], run["models"]["critic"]["provider"]
        providers = {attrs(c)["crosscheck.stage"]: attrs(c)["gen_ai.provider.name"] for c in calls}
        assert providers == {"draft": actor, "revise": actor, "critique": critic}
        # the tokens on the spans are the run's own accounting
        assert sum(attrs(c)["gen_ai.usage.input_tokens"] for c in calls) == run["input_tokens"]
        assert sum(attrs(c)["gen_ai.usage.output_tokens"] for c in calls) == run["output_tokens"]

    async def test_prompts_and_outputs_are_not_recorded_by_default(self, api, fake_model, spans):
        script_two_rounds(fake_model)
        _, found = await traced_run(api, spans)

        calls = model_calls(found)
        assert calls
        for call in calls:
            assert "gen_ai.input.messages" not in attrs(call)
            assert "gen_ai.output.messages" not in attrs(call)
            assert "gen_ai.system_instructions" not in attrs(call)
        assert not any(TASK in text for text in attribute_texts(found))

    async def test_prompts_and_outputs_are_recorded_when_the_setting_allows(
        self, api, fake_model, spans_with_content
    ):
        script_two_rounds(fake_model)
        _, found = await traced_run(api, spans_with_content)

        [revise] = [c for c in model_calls(found) if attrs(c)["crosscheck.stage"] == "revise"]
        [message] = json.loads(attrs(revise)["gen_ai.input.messages"])
        assert message["role"] == "user"
        assert TASK in message["parts"][0]["content"]
        assert json.loads(attrs(revise)["gen_ai.system_instructions"])[0]["content"]
        [answer] = json.loads(attrs(revise)["gen_ai.output.messages"])
        assert answer["role"] == "assistant"
        assert json.loads(answer["parts"][0]["content"])["output"] == REVISED

    async def test_no_key_or_token_is_ever_an_attribute(
        self, api, fake_model, spans_with_content, service_token
    ):
        script_two_rounds(fake_model)
        _, found = await traced_run(api, spans_with_content)

        texts = attribute_texts(found)
        assert texts
        for secret in (service_token, ADMIN_TOKEN, OPENAI_KEY, ANTHROPIC_KEY, "Bearer"):
            assert not [t for t in texts if secret in t], secret
        keys = {k.lower() for s in found for k in attrs(s)}
        assert not [k for k in keys if "authorization" in k or "api_key" in k or "header" in k]


class TestAResumedRun:
    async def test_the_segment_a_reviewers_decision_starts_joins_the_runs_trace(
        self, api, fake_model, spans
    ):
        fake_model.script(
            {"stage": "draft", "response": actor_reply(REVISED)},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start_traced(api, review="before_critique")
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = await claimed_by_reviewer(api, item)
        # the decision is a request of its own (no traceparent: a trace of its own)
        await decide(api, item, headers, action="edit", output=REVISED + "(edited)\n")
        await wait_for(api, run_id, statuses=FINAL)

        found = await spans_until(spans, lambda spans: bool(named(spans, "critique")))
        [decision] = named(found, "POST /v1/reviews/{review_id}/decision")
        assert hex_id(decision.context.trace_id, 32) != TRACE_ID
        [created] = named(found, "POST /v1/runs")
        [step] = named(found, "critique")
        assert hex_id(step.context.trace_id, 32) == TRACE_ID
        assert parent_of(step, found) is created
        [call] = model_calls([s for s in found if (s.start_time or 0) > (decision.start_time or 0)])
        assert hex_id(call.context.trace_id, 32) == TRACE_ID


class TestTheSandbox:
    async def test_its_request_span_is_a_child_of_the_step_that_called_it(self, spans):
        app = create_sandbox(sandbox_settings(), executor=FakeExecutor())
        async with app.router.lifespan_context(app):
            async with client_of(httpx.ASGITransport(app=app)) as sandbox:
                with tracing.span("evaluate") as step:
                    await sandbox.execute(PASSING, key="k-1")

        [served] = named(list(spans.get_finished_spans()), "POST /v1/execute")
        assert served.kind is SpanKind.SERVER
        assert served.context.trace_id == step.get_span_context().trace_id
        assert served.parent is not None
        assert served.parent.span_id == step.get_span_context().span_id

"""Research in the reflection loop, end to end: a Research service in-process over a temp
corpus (a document with a file:// URL), real Actor and Critic apps driving their SDKs against
the fake model server, and the orchestrator's research step, critique and citation check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from orchestrator.app import create_app
from orchestrator.engine.research import (
    MAX_QUERIES,
    collect_queries,
    markers,
    merge,
    research_on,
)
from orchestrator.engine.research import research as research_step
from orchestrator.settings import OrchestratorSettings
from research.app import create_app as create_research
from research.corpus import CorpusIndex, read_document
from shared.contracts import Depth, Evidence
from shared.orchestration import Policy
from tests.orchestrator.conftest import start, wait_for
from tests.orchestrator.test_loop import critique
from tests.research.conftest import research_settings
from tests.support.fakemodel import user_text
from tests.support.servers import free_port

WRONG = "The Golden Gate Bridge opened in 1957.\nIt crosses the Golden Gate strait.\n"
FACT = (
    "# Golden Gate Bridge\n\n"
    "The Golden Gate Bridge opened to traffic on May 27, 1937. "
    "Its main span is 1,280 metres long.\n"
)
QUERY = "Golden Gate Bridge opening year"
STEADY = {"research": True, "convergence_threshold": 0}  # small revisions: not under test


def draft(output: str = WRONG, queries: list[str] | None = None) -> dict:
    return {
        "output": output,
        "uncertainties": [],
        "search_queries": [QUERY] if queries is None else queries,
    }


def wrong_year() -> dict:
    return critique(
        "revise",
        [
            {
                "dimension": "accuracy",
                "severity": "major",
                "quote": "The Golden Gate Bridge opened in 1957.",
                "suggestion": "The bridge opened in 1937, as evidence:[1] states.",
                "evidence_source": "evidence:[1]",
            }
        ],
    )


def cited(url: str, extra: str = "") -> str:
    return (
        "The Golden Gate Bridge opened in 1937 [1].\nIt crosses the Golden Gate strait.\n\n"
        f"References\n[1] {url}\n{extra}"
    )


class CountingTransport(httpx.AsyncBaseTransport):
    """The Research service in-process, counting the research requests it is sent."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.calls: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/research":
            self.calls.append(request)
        return await self.inner.handle_async_request(request)


@pytest.fixture
def document(tmp_path) -> Path:
    path = tmp_path / "docs" / "golden-gate.md"
    path.parent.mkdir()
    path.write_text(FACT)
    return path


@pytest.fixture
def research_app(tmp_path, fake_model, service_token, document):
    index = CorpusIndex(tmp_path / "corpus.sqlite")
    index.add_many([read_document(document)])  # as `crosscheck corpus add` does: a file:// URL
    index.close()
    settings = research_settings(fake_model, service_token, tmp_path, distill=False)
    return create_research(settings)


@pytest.fixture
async def research_service(research_app) -> AsyncIterator[CountingTransport]:
    app = research_app
    async with app.router.lifespan_context(app):
        yield CountingTransport(httpx.ASGITransport(app=app))


@pytest.fixture
def research_url() -> str:
    return "http://research.test"


@pytest.fixture
async def orchestrator_app(orchestrator_settings, peers, research_service, research_url):
    settings = orchestrator_settings.model_copy(update={"research_url": research_url})
    return create_app(settings, peer_transports={**peers, "research": research_service})


def stage_calls(fake_model, stage: str) -> list[dict]:
    return [c for c in fake_model.requests() if c["stage"] == stage]


async def events_of(api, run_id: str, kind: str) -> list[dict]:
    events = (await api.get("/v1/events", params={"run_id": run_id, "type": kind})).json()
    return [e["data"] for e in events]


# ---------------------------------------------------------------------- end to end


async def test_a_planted_wrong_fact_is_corrected_and_cited_from_the_evidence(
    api, fake_model, research_service, document
):
    url = document.as_uri()
    fake_model.script(
        {"stage": "draft", "response": draft()},
        {"stage": "critique", "response": wrong_year()},
        {"stage": "revise", "response": {"output": cited(url), "uncertainties": []}},
        {"stage": "critique", "response": critique("pass")},
    )
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=STEADY)
    run = await wait_for(api, run_id)

    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
    assert run["stop_reason"] == "critic_pass"
    first, second = run["rounds"]
    assert first["search_queries"] == [QUERY]
    assert first["research"]["status"] == "ok"
    assert first["research"]["queries"] == [QUERY]
    assert first["research"]["failed_queries"] == []
    [source] = first["research"]["evidence"]
    assert source["n"] == 1
    assert source["url"] == url
    assert "1937" in source["snippet"]
    # the critique saw the evidence as numbered sources
    critic_prompt = user_text(stage_calls(fake_model, "critique")[0])
    assert f"[1] Golden Gate Bridge {url}" in critic_prompt
    assert "May 27, 1937" in critic_prompt
    assert "evidence:[n]" in critic_prompt
    # the revision was given the same sources and told to cite only them
    revise_prompt = user_text(stage_calls(fake_model, "revise")[0])
    assert url in revise_prompt
    assert "never cite a source that is not listed there" in revise_prompt
    # the revision (with its reference list, which the diff lock keeps) passes the check
    assert second["output"] == cited(url)
    assert run["final_output"] == cited(url)
    assert second["citations"] == {"ok": True, "cited": [1], "problems": []}
    assert first["citations"] is None  # a draft has no evidence to cite yet
    # round 2 searched nothing new: it keeps round 1's evidence, without another request
    assert second["research"]["queries"] == []
    assert [e["url"] for e in second["research"]["evidence"]] == [url]
    assert len(research_service.calls) == 1
    completed = await events_of(api, run_id, "research.completed")
    assert completed == [
        {"round": 1, "status": "ok", "queries": 1, "evidence": 1, "failed_queries": 0},
        {"round": 2, "status": "ok", "queries": 0, "evidence": 1, "failed_queries": 0},
    ]
    metrics = (await api.get("/metrics")).text
    assert 'crosscheck_research_steps_total{status="ok"} 2.0' in metrics
    assert "crosscheck_research_evidence_total 1.0" in metrics
    assert 'crosscheck_citation_checks_total{ok="true"} 1.0' in metrics
    # the step run again (a retry after a crash) reuses what the round holds
    again = await research_step(run_id, 1)
    assert again == {"status": "ok", "evidence": 1, "failed_queries": 0}
    assert len(research_service.calls) == 1
    assert len(await events_of(api, run_id, "research.completed")) == 2
    assert (await api.get(f"/v1/runs/{run_id}")).json()["rounds"][0]["research"] == first[
        "research"
    ]


async def test_a_fabricated_reference_is_caught_and_fixed_in_the_next_round(
    api, fake_model, research_service, document
):
    url = document.as_uri()
    made_up = cited(url, "[2] https://made.up/\n").replace("strait.", "strait [2].")
    fake_model.script(
        {"stage": "draft", "response": draft()},
        {"stage": "critique", "response": wrong_year()},
        {"stage": "revise", "response": {"output": made_up, "uncertainties": []}},
        {"stage": "critique", "response": critique("pass")},
        {"stage": "revise", "response": {"output": cited(url), "uncertainties": []}},
        {"stage": "critique", "response": critique("pass", reflection="Sources check out.")},
    )
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=STEADY)
    run = await wait_for(api, run_id)

    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
    assert run["final_round"] == 3  # the critic's pass of round 2 did not end the run
    bad = run["rounds"][1]
    assert bad["output"] == made_up
    assert bad["citations"]["ok"] is False
    assert bad["citations"]["cited"] == [1, 2]
    [problem] = bad["citations"]["problems"]
    assert problem["kind"] == "url_not_in_evidence"
    assert problem["url"] == "https://made.up/"
    assert problem["number"] == 2
    # the check's reflection is a fact for the next revision
    second_revise = user_text(stage_calls(fake_model, "revise")[1])
    assert "Fix the citations" in second_revise
    assert "https://made.up/, which is not in the evidence" in second_revise
    metrics = (await api.get("/metrics")).text
    assert 'crosscheck_citation_checks_total{ok="false"} 1.0' in metrics
    fixed = run["rounds"][2]
    assert fixed["citations"] == {"ok": True, "cited": [1], "problems": []}
    assert run["final_output"] == cited(url)
    assert any(f["source"] == "evaluator" and "made.up" in f["content"] for f in run["reflections"])


async def test_invalid_citations_never_pass_when_no_round_is_left(
    api, fake_model, research_service, document
):
    made_up = cited(document.as_uri(), "[2] https://made.up/\n")
    fake_model.script(
        {"stage": "draft", "response": draft()},
        {"stage": "critique", "response": wrong_year()},
        {"stage": "revise", "response": {"output": made_up, "uncertainties": []}},
        {"stage": "critique", "response": critique("pass")},
    )
    policy = {**STEADY, "max_rounds": 2}
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=policy)
    run = await wait_for(api, run_id)
    assert run["status"] == "escalated"
    assert run["stop_reason"] == "max_rounds"
    assert run["rounds"][1]["citations"]["ok"] is False
    # the person deciding sees the evidence and the failed check
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    context = (await api.get(f"/v1/reviews/{item['id']}")).json()["context"]
    assert context["rounds"][0]["research"]["evidence"][0]["url"] == document.as_uri()
    assert context["rounds"][1]["citations"]["ok"] is False


async def test_require_citations_flags_a_new_fact_without_a_source(
    api, fake_model, research_service, document
):
    url = document.as_uri()
    uncited = cited(url).replace("strait.\n", "strait.\nIts main span is 1,280 metres long.\n")
    fake_model.script(
        {"stage": "draft", "response": draft()},
        {"stage": "critique", "response": wrong_year()},
        {"stage": "revise", "response": {"output": uncited, "uncertainties": []}},
        {"stage": "critique", "response": critique("revise", reflection="Cite the span.")},
    )
    policy = {**STEADY, "require_citations": True, "max_rounds": 2}
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=policy)
    run = await wait_for(api, run_id)
    kinds = [p["kind"] for p in run["rounds"][1]["citations"]["problems"]]
    assert kinds == ["uncited_claim"]
    assert "1,280 metres" in run["rounds"][1]["citations"]["problems"][0]["sentence"]


async def test_markers_and_the_previous_critiques_queries_are_searched(
    api, fake_model, research_service
):
    marked = "The bridge opened in 1957 [UNCERTAIN: Golden Gate Bridge opened].\n"
    asking = {
        **critique(
            "revise",
            [
                {
                    "dimension": "accuracy",
                    "severity": "minor",
                    "quote": None,
                    "suggestion": "Check the span.",
                }
            ],
        ),
        "queries": ["Golden Gate main span length"],
    }
    fake_model.script(
        {"stage": "draft", "response": draft(marked, queries=[])},
        {"stage": "critique", "response": asking},
        {"stage": "revise", "response": {"output": marked + "More.\n", "uncertainties": []}},
        {"stage": "critique", "response": critique("pass")},
    )
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=STEADY)
    run = await wait_for(api, run_id)
    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
    first, second = run["rounds"]
    assert first["research"]["queries"] == ["Golden Gate Bridge opened"]
    assert first["critique"]["queries"] == ["Golden Gate main span length"]
    # the critique's query first, then the version's own marker (a duplicate is not sent twice)
    assert second["research"]["queries"] == ["Golden Gate main span length"]
    assert len(research_service.calls) == 2


async def test_a_run_resumed_after_review_researches_before_its_critique(
    api, fake_model, research_service
):
    fake_model.script(
        {"stage": "draft", "response": draft()},
        {"stage": "critique", "response": critique("pass")},
    )
    policy = {**STEADY, "review": "before_critique", "review_deadline_s": 1}
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=policy)
    paused = await wait_for(api, run_id)
    assert paused["status"] == "awaiting_review"
    assert paused["rounds"][0]["research"] is None  # nothing searched before a person looked
    assert research_service.calls == []
    # the deadline passes and the AI critic carries on, in a new workflow segment
    run = await wait_for(api, run_id, statuses={"succeeded", "escalated", "failed"}, timeout=60)
    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
    assert run["rounds"][0]["research"]["queries"] == [QUERY]
    assert len(research_service.calls) == 1
    assert "May 27, 1937" in user_text(stage_calls(fake_model, "critique")[0])


# ------------------------------------------------------------------------ degrading


class TestResearchDown:
    @pytest.fixture
    def research_url(self) -> str:
        return f"http://127.0.0.1:{free_port()}"  # nothing listens there

    @pytest.fixture
    async def orchestrator_app(self, orchestrator_settings, peers, research_url):
        settings = orchestrator_settings.model_copy(update={"research_url": research_url})
        return create_app(settings, peer_transports=peers)

    async def test_the_round_degrades_and_the_run_finishes(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": draft()},
            {"stage": "critique", "response": critique("pass")},
        )
        policy = {"research": True, "depth": "L2"}
        run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=policy)
        run = await wait_for(api, run_id)

        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        assert run["final_output"] == WRONG  # nothing lost
        [only] = run["rounds"]
        assert only["research"]["status"] == "degraded"
        assert only["research"]["evidence"] == []
        [failed] = only["research"]["failed_queries"]
        assert failed["query"] == QUERY
        assert "unreachable" in failed["reason"]
        assert only["critique"]["degraded"] is True
        assert only["critique"]["depth"] == "L1"
        assert only["critique"]["requested_depth"] == "L2"
        assert "research degraded" in only["critique"]["degraded_reason"]
        system = stage_calls(fake_model, "critique")[0]["body"]
        assert "Depth L1" in str(system)
        assert "Depth L2" not in str(system)
        completed = await events_of(api, run_id, "research.completed")
        assert completed == [
            {"round": 1, "status": "degraded", "queries": 1, "evidence": 0, "failed_queries": 1}
        ]
        metrics = (await api.get("/metrics")).text
        assert 'crosscheck_research_steps_total{status="degraded"} 1.0' in metrics


class SlowTransport(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import asyncio

        await asyncio.sleep(5)
        return httpx.Response(500)


class TestOverBudget:
    @pytest.fixture
    async def orchestrator_app(self, orchestrator_settings, peers):
        settings = orchestrator_settings.model_copy(
            update={"research_url": "http://research.test", "research_budget_s": 0.2}
        )
        return create_app(settings, peer_transports={**peers, "research": SlowTransport()})

    async def test_a_slow_service_is_cut_off_at_the_budget(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": draft()},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=STEADY)
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded"
        research = run["rounds"][0]["research"]
        assert research["status"] == "degraded"
        assert "0.2 s budget" in research["failed_queries"][0]["reason"]
        assert run["rounds"][0]["critique"]["degraded"] is True


async def test_the_demo_model_researches_and_cites_without_a_script(
    api, fake_model, research_service, document
):
    """What a newcomer sees with no keys: the built-in answers propose a query from the
    task, the corpus answers it, and the revision cites the evidence it was given."""
    task = "Golden Gate Bridge opening year, for a travel guide."
    run_id = await start(api, task=task, policy=STEADY)
    run = await wait_for(api, run_id)

    assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
    first = run["rounds"][0]
    assert first["search_queries"] == ["Golden Gate Bridge opening year for a travel"]  # 8 words
    assert first["research"]["status"] == "ok"
    assert [e["url"] for e in first["research"]["evidence"]] == [document.as_uri()]
    final = run["rounds"][-1]
    assert final["citations"] == {"ok": True, "cited": [1], "problems": []}
    assert run["final_output"].rstrip().endswith(f"[1] {document.as_uri()}")
    assert "[1]." in run["final_output"]  # the sentence taken from the source cites it


# ------------------------------------------------------------------- off switches


async def test_research_false_makes_no_step_and_no_call(api, fake_model, research_service):
    fake_model.script({"stage": "draft", "response": draft()})
    policy = {"research": False, "depth": "L2"}
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=policy)
    run = await wait_for(api, run_id)
    assert run["status"] in {"succeeded", "escalated"}
    assert all(r["research"] is None for r in run["rounds"])
    assert research_service.calls == []
    assert await events_of(api, run_id, "research.completed") == []
    critic_prompt = user_text(stage_calls(fake_model, "critique")[0])
    assert "<evidence>" not in critic_prompt


async def test_research_null_follows_the_depth(api, fake_model, research_service):
    fake_model.script({"stage": "draft", "response": draft()})
    run_id = await start(api, task="When did the Golden Gate Bridge open?")  # depth: L1
    run = await wait_for(api, run_id)
    assert all(r["research"] is None for r in run["rounds"])
    assert research_service.calls == []

    fake_model.reset()
    fake_model.script({"stage": "draft", "response": draft()})
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy={"depth": "L2"})
    run = await wait_for(api, run_id)
    assert run["rounds"][0]["research"]["queries"] == [QUERY]
    assert len(research_service.calls) == 1


class TestNoService:
    @pytest.fixture
    async def orchestrator_app(self, orchestrator_settings, peers):
        return create_app(orchestrator_settings, peer_transports=peers)  # no research URL

    async def test_null_stays_off_and_true_degrades(self, api, fake_model):
        fake_model.script({"stage": "draft", "response": draft()})
        run_id = await start(api, task="Golden Gate?", policy={"depth": "L2"})
        run = await wait_for(api, run_id)
        assert all(r["research"] is None for r in run["rounds"])

        fake_model.script(
            {"stage": "draft", "response": draft()},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, task="Golden Gate, again?", policy={"research": True})
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded"
        research = run["rounds"][0]["research"]
        assert research["status"] == "degraded"
        assert "ORCHESTRATOR_RESEARCH_URL" in research["failed_queries"][0]["reason"]


# ---------------------------------------------------------------------- bad input


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("research", "yes"),
        ("research", 1),
        ("require_citations", "true"),
        ("require_citations", None),
    ],
)
async def test_a_bad_research_policy_field_is_a_422_naming_it(api, field, value):
    response = await api.post("/v1/runs", json={"task": "Golden Gate?", "policy": {field: value}})
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "policy", field]
    assert problem["type"] == "bool_type"
    assert "true or false" in problem["msg"] or "valid boolean" in problem["msg"]


def test_the_research_budget_setting_is_bounded(service_token):
    OrchestratorSettings(service_token=service_token, research_budget_s=300)
    for bad in (0, -1, 300.5):
        with pytest.raises(ValidationError, match="research_budget_s"):
            OrchestratorSettings(service_token=service_token, research_budget_s=bad)


# ---------------------------------------------------------------------------- units


def test_markers_queries_are_tidied_deduplicated_and_capped():
    assert markers("A [UNCERTAIN:  opening year ] and [uncertain: span]. [UNCERTAIN:]") == [
        "opening year",
        "span",
    ]
    got = collect_queries(["Span  length", "", "span length."], ["Opening year", "a", "b"])
    assert got == ["Span length", "Opening year", "a"]
    assert len(got) == MAX_QUERIES
    assert len(collect_queries(["x" * 900])[0]) == 500
    assert collect_queries(["Opening year", "span"], searched=["opening  YEAR."]) == ["span"]


def test_research_on_by_policy_and_service():
    assert research_on(Policy(research=True), configured=False)
    assert not research_on(Policy(research=False, depth=Depth.L2), configured=True)
    assert research_on(Policy(depth=Depth.L2), configured=True)
    assert not research_on(Policy(depth=Depth.L2), configured=False)
    assert not research_on(Policy(depth=Depth.L1), configured=True)
    assert not research_on(Policy(), configured=True)


def test_earlier_evidence_keeps_its_numbers():
    def ev(n: int, url: str) -> Evidence:
        return Evidence(
            n=n, url=url, retrieved_at=datetime(2026, 12, 1, tzinfo=UTC), source="corpus"
        )

    merged = merge([ev(1, "a"), ev(2, "b")], [ev(1, "b"), ev(2, "c")])
    assert [(e.n, e.url) for e in merged] == [(1, "a"), (2, "b"), (3, "c")]


# ------------------------------------------------- citations bound to their evidence

EIFFEL = "# Eiffel Tower\n\nThe Eiffel Tower in Paris is 330 metres tall.\n"
TWO_TASK = "When did the Golden Gate Bridge open, and how tall is the Eiffel Tower?"
TWO_QUERIES = [QUERY, "Eiffel Tower height"]


def both(first: str, second: str, body_extra: str = "") -> str:
    """A revision citing the opening year as [1] and the height as [2], listing ``first``
    and ``second`` as their URLs."""
    return (
        "The Golden Gate Bridge opened in 1937 [1]. The Eiffel Tower is 330 metres tall [2].\n"
        f"{body_extra}\nReferences\n[1] {first}\n[2] {second}\n"
    )


class TestCitationsBoundToEvidence:
    """Two sources (the bridge as evidence 1, the tower as evidence 2); the Critic passes
    the revision, the citation check holds the pass back and says why, in the round, in
    the Actor's next reflection and in the escalated run's detail."""

    @pytest.fixture
    def eiffel(self, tmp_path, document) -> Path:
        path = document.parent / "eiffel.md"
        path.write_text(EIFFEL)
        return path

    @pytest.fixture
    def research_app(self, tmp_path, fake_model, service_token, document, eiffel):
        index = CorpusIndex(tmp_path / "corpus.sqlite")
        index.add_many([read_document(document), read_document(eiffel)])
        index.close()
        settings = research_settings(fake_model, service_token, tmp_path, distill=False)
        return create_research(settings)

    async def run_with(self, api, fake_model, revision: str, **policy) -> dict:
        fake_model.script(
            {"stage": "draft", "response": draft(queries=TWO_QUERIES)},
            {"stage": "critique", "response": wrong_year()},
            {"stage": "revise", "response": {"output": revision, "uncertainties": []}},
            {"stage": "critique", "response": critique("pass")},
            {"stage": "revise", "response": {"output": revision + "\n", "uncertainties": []}},
            {"stage": "critique", "response": critique("pass")},
        )
        body = {**STEADY, "max_rounds": 2, **policy}
        run_id = await start(api, task=TWO_TASK, policy=body)
        run = await wait_for(api, run_id)
        evidence = run["rounds"][0]["research"]["evidence"]
        assert [e["n"] for e in evidence] == [1, 2]
        return run

    def urls(self, run: dict) -> tuple[str, str]:
        first, second = run["rounds"][0]["research"]["evidence"]
        return first["url"], second["url"]

    async def test_correct_citations_pass(self, api, fake_model, document, eiffel):
        revision = both(document.as_uri(), eiffel.as_uri())
        run = await self.run_with(api, fake_model, revision, require_citations=True)
        assert (run["status"], run["stop_reason"]) == ("succeeded", "critic_pass"), run["detail"]
        assert run["rounds"][1]["citations"] == {"ok": True, "cited": [1, 2], "problems": []}

    async def test_a_number_listing_another_sources_url_holds_the_pass_back(
        self, api, fake_model, document, eiffel
    ):
        # every URL is one of the evidence's: only the binding of [n] to evidence n fails
        gate, tower = document.as_uri(), eiffel.as_uri()
        run = await self.run_with(api, fake_model, both(tower, gate))
        assert (run["status"], run["stop_reason"]) == ("escalated", "max_rounds")
        assert self.urls(run) == (gate, tower)
        problems = run["rounds"][1]["citations"]["problems"]
        assert [(p["kind"], p["number"], p["url"]) for p in problems] == [
            ("wrong_source", 1, tower),
            ("wrong_source", 2, gate),
        ]
        said = f"[1] lists evidence [2]'s URL {tower}"
        assert said in run["detail"]
        assert "the critic passed it, but its citations failed the check" in run["detail"]
        facts = [r["content"] for r in run["reflections"] if r["source"] == "evaluator"]
        assert any(said in fact for fact in facts)

    async def test_a_listed_reference_the_text_never_cites_holds_the_pass_back(
        self, api, fake_model, document, eiffel
    ):
        revision = both(document.as_uri(), eiffel.as_uri()).replace(" tall [2].", " tall.")
        run = await self.run_with(api, fake_model, revision)
        assert (run["status"], run["stop_reason"]) == ("escalated", "max_rounds")
        [problem] = run["rounds"][1]["citations"]["problems"]
        assert (problem["kind"], problem["number"]) == ("uncited_reference", 2)
        assert "reference [2] is listed but the text never cites [2]" in run["detail"]

    async def test_a_lower_case_uncited_claim_holds_the_pass_back(
        self, api, fake_model, document, eiffel
    ):
        claim = "the golden gate bridge is painted international orange."
        revision = both(document.as_uri(), eiffel.as_uri(), body_extra=claim + "\n")
        run = await self.run_with(api, fake_model, revision, require_citations=True)
        assert (run["status"], run["stop_reason"]) == ("escalated", "max_rounds")
        [problem] = run["rounds"][1]["citations"]["problems"]
        assert (problem["kind"], problem["sentence"]) == ("uncited_claim", claim)
        assert "a name known from the task or the evidence" in run["detail"]

    async def test_the_reason_reaches_the_next_revision(self, api, fake_model, document, eiffel):
        gate, tower = document.as_uri(), eiffel.as_uri()
        await self.run_with(api, fake_model, both(tower, gate), max_rounds=3)
        second_revise = user_text(stage_calls(fake_model, "revise")[1])
        assert "Fix the citations" in second_revise
        assert f"[1] lists evidence [2]'s URL {tower}" in second_revise


# --------------------------------------- a hallucination's source, checked on the evidence

TRUE_CLAIM = "The Golden Gate Bridge opened in 1937."
WRONG_CLAIM = "The Golden Gate Bridge opened in 1957."


def flagged(claim: str) -> dict:
    return {
        **critique(
            "revise",
            [
                {
                    "dimension": "accuracy",
                    "severity": "major",
                    "quote": claim,
                    "suggestion": "Nothing supports this date: remove it or source it.",
                }
            ],
        ),
        "error_class": "hallucination",
    }


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("claim", "source", "refused"),
    [
        (TRUE_CLAIM, "{url}", None),
        (TRUE_CLAIM, "evidence:[1]", None),
        (TRUE_CLAIM, "evidence 1, the bridge's page", None),
        (TRUE_CLAIM, "https://made.up/golden-gate", "is not a URL of the evidence"),
        (TRUE_CLAIM, "[2]", "evidence [2] was not given to this revision (given: [1])"),
        (WRONG_CLAIM, "[1]", "the named source does not state 1957"),
    ],
)
async def test_a_hallucination_stays_open_unless_the_evidence_named_supports_it(
    api, fake_model, research_service, document, claim, source, refused
):
    kept = f"{claim}\nIt crosses the Golden Gate strait, a narrow channel.\n"
    answer = {
        "issue": "i1",
        "action": "applied",
        "reason": "",
        "where": "It crosses the Golden Gate strait, a narrow channel.",
        "source": source.format(url=document.as_uri()),
    }
    fake_model.script(
        {"stage": "draft", "response": draft(f"{claim}\nIt crosses the Golden Gate strait.\n")},
        {"stage": "critique", "response": flagged(claim)},
        {
            "stage": "revise",
            "response": {"output": kept, "uncertainties": [], "responses": [answer]},
        },
        {"stage": "critique", "response": critique("revise", reflection="Say more.")},
    )
    policy = {**STEADY, "max_rounds": 2}
    run_id = await start(api, task="When did the Golden Gate Bridge open?", policy=policy)
    run = await wait_for(api, run_id)
    assert run["rounds"][1]["output"] == kept
    facts = [r["content"] for r in run["reflections"] if r["source"] == "evaluator"]
    opened = await events_of(api, run_id, "round.unsourced_claims")
    if refused is None:
        assert facts == []
        assert opened == []
    else:
        [fact] = facts
        assert "flagged as hallucinations, without a source that supports them" in fact
        assert "source refused: " in fact
        assert refused in fact
        assert "`knowledge:<id>`" in fact  # the accepted forms are listed
        assert opened == [{"round": 2, "issues": ["i1"]}]
    revise_prompt = user_text(stage_calls(fake_model, "revise")[0])
    assert "`[n]` or `evidence:[n]` (a source of the <evidence> above)" in revise_prompt

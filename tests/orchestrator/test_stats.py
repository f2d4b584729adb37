"""GET /v1/stats: aggregates of the read model, checked against the runs and trajectories."""

import itertools
import re
import statistics
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from sqlmodel import Session

from orchestrator.engine import records, settled
from orchestrator.engine.policy import Stop, output_hash
from orchestrator.stats.service import StatsService
from orchestrator.tables import Round, Run, new_id
from shared.evaluations import INTERCEPT_TARGET
from shared.orchestration import Policy, RunStatus, StopReason
from tests.critic.conftest import scripted
from tests.orchestrator.conftest import mint, start, wait_for
from tests.orchestrator.test_evaluations import intercept_summary
from tests.support import promql

PASSES = "Explain why the sky is blue."  # the fake critic passes round 2
ESCALATES = "Explain tides."  # with max_rounds 1: escalated, max_rounds


async def two_runs(api) -> tuple[dict, dict]:
    passed = await wait_for(api, await start(api, task=PASSES))
    escalated = await wait_for(api, await start(api, task=ESCALATES, policy={"max_rounds": 1}))
    assert (passed["status"], escalated["status"]) == ("succeeded", "escalated")
    return passed, escalated


async def stats(api, **params) -> dict:
    response = await api.get("/v1/stats", params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def expected_providers(api, *run_ids: str) -> dict[tuple[str, str], dict]:
    """The per-provider figures, recomputed from the trajectories of the runs."""
    calls: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run_id in run_ids:
        trajectory = (await api.get(f"/v1/runs/{run_id}/trajectory")).json()
        for call in trajectory["calls"]:
            calls[(call["usage"]["provider"], call["role"])].append(call)
    out = {}
    for key, group in calls.items():
        latencies = [c["latency_ms"] for c in group]
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        out[key] = {
            "calls": len(group),
            "models": sorted({c["usage"]["model"] for c in group}),
            "latency_ms_total": sum(latencies),
            "latency_ms_avg": statistics.fmean(latencies),
            "latency_ms_p50": cuts[49],
            "latency_ms_p95": cuts[94],
            "input_tokens": sum(c["usage"]["input_tokens"] for c in group),
            "output_tokens": sum(c["usage"]["output_tokens"] for c in group),
            "cost_usd": sum(c["usage"]["cost_usd"] or 0.0 for c in group),
            "unpriced_calls": sum(c["usage"]["cost_usd"] is None for c in group),
        }
    return out


def squash(text: str | None) -> str:
    return " ".join((text or "").split())


def raised_again(found: dict, now: list[dict]) -> bool:
    """The critique of the revision raises ``found`` again: an issue on the same span or of
    the same dimension (case and spacing aside)."""
    quote, dimension = squash(found["quote"]), found["dimension"].strip().lower()
    return any(
        (quote and squash(i["quote"]) == quote)
        or (dimension and i["dimension"].strip().lower() == dimension)
        for i in now
    )


def adoption_counts(run: dict) -> list[tuple[int, int]]:
    """Each Actor revision's (adopted, counted) critic issues, from the run's own rounds: an
    issue is adopted when the critique of the revision does not raise it again, whatever the
    Actor answered; a refusal the Critic accepted is not counted. A person's edit is not
    measured."""
    out = []
    for before, after in itertools.pairwise(run["rounds"]):
        issues = (before["critique"] or {}).get("issues", [])
        if not issues or after["critique"] is None or after["provenance"] != "actor":
            continue
        answers = {r["issue"]: r for r in after["responses"] or [] if r.get("issue")}
        accepted = set(after["critique"]["accepted_refusals"])
        adopted = counted = 0
        for n, found in enumerate(issues, start=1):
            if answers.get(f"i{n}", {}).get("action") == "declined" and f"i{n}" in accepted:
                continue
            counted += 1
            adopted += not raised_again(found, after["critique"]["issues"])
        if counted:
            out.append((adopted, counted))
    return out


JUDGING = {"comment", "approve", "edit", "reject"}


async def decided_rounds(api, run_id: str) -> set[int]:
    """The rounds of a run a person decided on (comment, approve, edit, reject)."""
    params = {"run_id": run_id, "status": "resolved"}
    out = set()
    for item in (await api.get("/v1/reviews", params=params)).json()["items"]:
        decision = (await api.get(f"/v1/reviews/{item['id']}")).json()["decision"]
        if decision["action"] in JUDGING:
            out.add(item["round"])
    return out


def settled_versions(run: dict, decided: set[int]) -> list[tuple[bool, bool]]:
    """(judged, critiqued) for each version of the run that settled: a later round revised
    it, or the run succeeded with it. Judged: it has a critique, a person decided on it, or
    a person approved it as the version that shipped."""
    out = []
    last = max((r["number"] for r in run["rounds"]), default=0)
    for r in run["rounds"]:
        shipped = run["status"] == "succeeded" and r["number"] == run["final_round"]
        if r["number"] == last and not shipped:
            continue
        critiqued = r["critique"] is not None
        approved = shipped and run["stop_reason"] == "review_approved"
        out.append((critiqued or r["number"] in decided or approved, critiqued))
    return out


async def expected_trigger(api, *runs: dict) -> dict:
    versions = [
        v for run in runs for v in settled_versions(run, await decided_rounds(api, run["id"]))
    ]
    judged = sum(j for j, _ in versions)
    return {
        "versions": len(versions),
        "versions_judged": judged,
        "versions_critiqued": sum(c for _, c in versions),
        "trigger_rate": round(judged / len(versions), 6) if versions else None,
    }


TRIGGER = ("versions", "versions_judged", "versions_critiqued", "trigger_rate")


def trigger(body: dict) -> dict:
    return {k: body[k] for k in TRIGGER}


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


class TestStats:
    async def test_empty_database(self, api):
        body = await stats(api)
        assert body["runs_total"] == 0
        assert body["runs_by_status"] == {}
        assert body["runs_by_stop_reason"] == {}
        assert body["rounds_per_run"] == []
        assert (body["adoption_rate"], body["adoption_rounds"]) == (None, 0)
        assert (body["model_calls"], body["model_calls_truncated"]) == (0, False)
        assert body["providers"] == []
        assert body["since"] is None

    async def test_counts_rounds_adoption_and_providers_match_the_runs(self, api):
        passed, escalated = await two_runs(api)
        body = await stats(api)
        assert body["runs_total"] == 2
        assert body["runs_by_status"] == {"escalated": 1, "succeeded": 1}
        assert body["runs_by_stop_reason"] == {"critic_pass": 1, "max_rounds": 1}
        assert body["rounds_per_run"] == [{"rounds": 1, "runs": 1}, {"rounds": 2, "runs": 1}]

        adoptions = [
            r["adoption"]
            for run in (passed, escalated)
            for r in run["rounds"]
            if r["adoption"] is not None
        ]
        assert len(adoptions) == 1  # only the passing run's round 2 follows a critique
        assert body["adoption_rounds"] == 1
        assert body["adoption_rate"] == pytest.approx(statistics.fmean(adoptions))
        counts = [c for run in (passed, escalated) for c in adoption_counts(run)]
        assert body["adoption_rate"] == pytest.approx(statistics.fmean(a / n for a, n in counts))

        expected = await expected_providers(api, passed["id"], escalated["id"])
        assert sorted(expected) == [("anthropic", "critic"), ("openai", "actor")]
        got = {(p["provider"], p["role"]): p for p in body["providers"]}
        assert sorted(got) == sorted(expected)
        assert body["model_calls"] == 6
        assert not body["model_calls_truncated"]
        for key, want in expected.items():
            have = got[key]
            assert have["calls"] == want["calls"] == 3
            assert have["models"] == want["models"]
            assert (have["input_tokens"], have["output_tokens"]) == (
                want["input_tokens"],
                want["output_tokens"],
            )
            assert have["input_tokens"] > 0
            assert have["unpriced_calls"] == want["unpriced_calls"]
            assert have["cost_usd"] == pytest.approx(want["cost_usd"], abs=1e-8)
            for field in ("latency_ms_total", "latency_ms_avg", "latency_ms_p50", "latency_ms_p95"):
                assert have[field] == pytest.approx(want[field], abs=1e-3), field
        # the sums agree with what each run billed
        runs = (passed, escalated)
        assert sum(p["input_tokens"] for p in body["providers"]) == sum(
            r["input_tokens"] for r in runs
        )
        assert sum(p["cost_usd"] for p in body["providers"]) == pytest.approx(
            sum(r["cost_usd"] for r in runs), abs=1e-6
        )

    async def test_since_keeps_runs_created_from_that_moment(self, api):
        passed, escalated = await two_runs(api)
        moment = datetime.fromisoformat(escalated["created_at"])
        assert moment.tzinfo is not None  # every database answers with an offset
        body = await stats(api, since=moment.isoformat())
        assert body["runs_by_status"] == {"escalated": 1}
        assert body["rounds_per_run"] == [{"rounds": 1, "runs": 1}]
        assert (body["adoption_rate"], body["adoption_rounds"]) == (None, 0)
        assert body["model_calls"] == 2
        assert datetime.fromisoformat(body["since"]) == moment

        # the same moment written with another offset is the same moment
        east = moment.astimezone(timezone(timedelta(hours=2)))
        assert (await stats(api, since=east.isoformat()))["runs_total"] == 1

        # a time without an offset is UTC; a future one matches nothing
        future = (moment + timedelta(days=1)).replace(tzinfo=None).isoformat()
        assert (await stats(api, since=future))["runs_total"] == 0
        past = (moment - timedelta(days=1)).replace(tzinfo=None).isoformat()
        assert (await stats(api, since=past))["runs_total"] == 2

    async def test_calls_are_bounded_and_say_so(self, api, orchestrator_app):
        await two_runs(api)
        with Session(orchestrator_app.state.engine) as session:
            body = StatsService(max_calls=4).compute(session, None)
        assert (body.model_calls, body.model_calls_truncated) == (4, True)
        assert sum(p.calls for p in body.providers) == 4
        assert body.runs_total == 2  # counts are exact regardless


class TestStatsAccess:
    async def test_no_token_is_401(self, api):
        response = await api.get("/v1/stats", headers={"Authorization": ""})
        assert response.status_code == 401
        assert response.json()["error"] == "Unauthorized"

    async def test_reviewers_read_every_run_and_a_service_its_own(self, api):
        await two_runs(api)
        admin = await stats(api)
        headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        response = await api.get("/v1/stats", headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        # the same figures the admin sees (only the moment they were computed differs)
        assert {**body, "generated_at": None} == {**admin, "generated_at": None}
        assert (body["runs_total"], body["runs_by_status"]) == (
            2,
            {"succeeded": 1, "escalated": 1},
        )
        # a service: the figures of its own runs, none of the admin's two
        service = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        assert (await api.get("/v1/stats", headers=service)).json()["runs_total"] == 0
        created = await api.post("/v1/runs", json={"task": PASSES}, headers=service)
        await wait_for(api, created.json()["id"])
        own = (await api.get("/v1/stats", headers=service)).json()
        assert (own["runs_total"], own["runs_by_status"]) == (1, {"succeeded": 1})
        assert {p["role"] for p in own["providers"]} == {p["role"] for p in admin["providers"]}
        assert sum(p["calls"] for p in own["providers"]) < sum(
            p["calls"] for p in (await stats(api))["providers"]
        )

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize("since", ["yesterday", "2025-13-01", "2025-01-01T25:00:00"])
    async def test_unreadable_since_is_422(self, api, since):
        response = await api.get("/v1/stats", params={"since": since})
        assert response.status_code == 422
        body = response.json()
        assert body["error"] == "ValidationError"
        assert body["detail"][0]["loc"] == ["query", "since"]

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_since_out_of_range_in_utc_is_400(self, api):
        response = await api.get("/v1/stats", params={"since": "0001-01-01T00:00:00+01:00"})
        assert response.status_code == 400
        assert response.json() == {
            "error": "BadRequest",
            "detail": "since is out of range once converted to UTC: 0001-01-01 00:00:00+01:00",
        }


async def decide_escalation(api, run_id: str, **decision) -> dict:
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
    assert (await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)).is_success
    response = await api.post(f"/v1/reviews/{item['id']}/decision", json=decision, headers=headers)
    assert response.status_code == 200, response.text
    return (await api.get(f"/v1/reviews/{item['id']}")).json()


class TestCriticAgreement:
    async def test_a_person_overruling_the_critic_is_counted_per_provider(self, api):
        # both escalate max_rounds with the Critic asking for a revision of round 1
        overruled = await wait_for(api, await start(api, task=ESCALATES, policy={"max_rounds": 1}))
        agreed = await wait_for(api, await start(api, task=ESCALATES, policy={"max_rounds": 1}))
        approved = await decide_escalation(api, overruled["id"], action="approve")
        commented = await decide_escalation(api, agreed["id"], action="comment", comment="More.")
        assert approved["decision"]["critic_verdict"] == "revise"
        assert approved["decision"]["agreed_with_critic"] is False
        assert commented["decision"]["agreed_with_critic"] is True
        # a decision before any critique is no agreement either way
        paused = await wait_for(
            api, await start(api, task=PASSES, policy={"review": "first_round"})
        )
        before = await decide_escalation(api, paused["id"], action="approve")
        assert before["decision"]["agreed_with_critic"] is None
        assert (await stats(api))["critic_agreement"] == [
            {
                "provider": "anthropic",
                "profile": "default",
                "decisions": 2,
                "agreed": 1,
                "overruled": 1,
                "rate": 0.5,
            }
        ]

    async def test_no_decision_means_no_agreement_figures(self, api):
        await two_runs(api)
        assert (await stats(api))["critic_agreement"] == []


PASS = scripted(verdict="pass", confidence=0.9, reflection="Nothing to change.", error_class="none")


class TestReflectionHealth:
    @pytest.fixture
    def peer_overrides(self):
        return {
            "actor": {"model_max_attempts": 2},
            "critic": {"model_max_attempts": 2, "l2_budget_s": 0.5},
        }

    async def test_trigger_degraded_and_adoption_equal_counts_from_the_runs(self, api, fake_model):
        passed, escalated = await two_runs(api)
        # A legal run whose L2 critique times out: L1 passes it, degraded; a person decides.
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        fake_model.script(
            {"stage": "critique", "response": PASS}, {"stage": "critique", "response": PASS}
        )
        degraded = await wait_for(
            api, await start(api, task="Keep the deposit?", policy={"profile": "legal"})
        )
        assert degraded["stop_reason"] == "degraded_critique"
        # A critic that cannot be reached: the version is never critiqued.
        fake_model.faults(*[{"status": 503, "stage": "critique"}] * 6)
        down = await wait_for(api, await start(api, task="Explain tides."))
        assert down["stop_reason"] == "environment"

        runs = [passed, escalated, degraded, down]
        rounds = [r for run in runs for r in run["rounds"]]
        critiques = [r["critique"] for r in rounds if r["critique"]]
        body = await stats(api)
        # settled: the passing run's two versions; the three escalated runs' only versions
        # have not (a person has yet to decide on them)
        assert trigger(body) == await expected_trigger(api, *runs)
        assert trigger(body) == {
            "versions": 2,
            "versions_judged": 2,
            "versions_critiqued": 2,
            "trigger_rate": 1.0,
        }
        assert body["critiques"] == 4
        assert body["critiques_degraded"] == sum(c["degraded"] for c in critiques) == 1
        assert body["degraded_rate"] == pytest.approx(1 / 4)
        assert body["critiques_by_depth"] == {"L1": 4}
        assert body["adoption_rate"] == pytest.approx(1.0)  # the one revision fixed its issue
        assert body["adoption_in_band"] is False  # above 70%: drafts poor or critic harsh

        text = (await api.get("/metrics")).text
        assert 'crosscheck_critiques_total{degraded="true",depth="L1",profile="legal"} 1.0' in text
        assert (
            'crosscheck_critiques_total{degraded="false",depth="L1",profile="general"} 3.0' in text
        )

    async def test_adoption_from_the_answers_equals_counts_from_the_runs(self, api, fake_model):
        """Applied and not raised again is adopted; a refusal the Critic accepts is not
        counted; one it rejects counts against; `/v1/stats` and `/metrics` agree with it."""
        from tests.orchestrator.test_revision_points import (
            DRAFT,
            ONE,
            REASON,
            REVISED,
            TWO,
            actor,
            answer,
        )

        declined = actor(REVISED, answer("i1"), answer("i2", "declined", REASON))
        accepted = {**PASS, "accepted_refusals": ["i2"]}
        for verdict in (accepted, scripted(issues=[TWO])):  # accepted, then raised again
            fake_model.script(
                {"stage": "draft", "response": actor(DRAFT)},
                {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
                {"stage": "revise", "response": declined},
                {"stage": "critique", "response": verdict},
            )
            await wait_for(api, await start(api, task="Explain tides.", policy={"max_rounds": 2}))
        await wait_for(api, await start(api, task=PASSES))  # the built-in loop: all applied
        items = (await api.get("/v1/runs")).json()["items"]
        runs = [(await api.get(f"/v1/runs/{r['id']}")).json() for r in items]

        counts = [c for run in runs for c in adoption_counts(run)]
        assert sorted(counts) == [(1, 1), (1, 1), (1, 2)]
        body = await stats(api)
        assert body["adoption_rounds"] == len(counts)
        assert body["adoption_rate"] == pytest.approx(statistics.fmean(a / n for a, n in counts))
        text = (await api.get("/metrics")).text
        assert metric(text, "crosscheck_reflection_issues_total") == sum(n for _, n in counts)
        assert metric(text, "crosscheck_reflection_issues_adopted_total") == sum(
            a for a, _ in counts
        )

    async def test_the_last_version_of_a_run_that_did_not_succeed_is_not_counted(
        self, api, fake_model
    ):
        same = {"output": "The same answer.", "uncertainties": []}
        fake_model.script(
            {"stage": "draft", "response": same}, {"stage": "revise", "response": same}
        )
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert run["stop_reason"] == "duplicate_output"
        body = await stats(api)
        # round 1 was critiqued, then revised; round 2 ended the run before its critique
        assert (body["versions"], body["versions_judged"], body["trigger_rate"]) == (1, 1, 1.0)
        assert body["degraded_rate"] == 0.0


ALERTS = Path(__file__).parents[2] / "infra" / "prometheus" / "crosscheck-alerts.yml"
METRIC = re.compile(r"\b(crosscheck_[a-z_]+)")
DONE = {"succeeded", "escalated", "failed", "cancelled"}
MOON = "Mention the Moon."


def alert_rules() -> dict[str, str]:
    return {r["alert"]: r["expr"] for r in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]}


def trigger_rule() -> tuple[promql.Node, promql.Node]:
    """The trigger-rate rule, and its ratio: ``(ratio) < 0.95 and (traffic) >= 20``."""
    rule = promql.parse(alert_rules()["CrosscheckCritiqueTriggerRateLow"])
    assert isinstance(rule, promql.Binary)
    assert rule.op == "and"
    assert isinstance(rule.left, promql.Binary)
    assert rule.left.op == "<"
    assert rule.left.right == promql.Number(0.95)
    return rule, rule.left.left


async def scrape(api) -> promql.Samples:
    response = await api.get("/metrics")
    assert response.status_code == 200
    return promql.samples(response.text)


def settled_counts(scraped: promql.Samples) -> tuple[float, float]:
    """crosscheck_versions_settled_total: (judged, not judged)."""
    series = scraped["crosscheck_versions_settled_total"]
    return series[frozenset({("judged", "true")})], series[frozenset({("judged", "false")})]


def scaled(scraped: promql.Samples, factor: float) -> promql.Samples:
    return {name: {k: v * factor for k, v in s.items()} for name, s in scraped.items()}


async def paused_run(api) -> str:
    run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
    assert (await wait_for(api, run_id))["status"] == "awaiting_review"
    return run_id


class TestTriggerRate:
    """Versions that settled (revised, or shipped by a succeeded run) and were judged first
    (a critique, or a person's decision), over all that settled: in `/v1/stats` from the
    read model, and in `/metrics` as it happens, where the alert rule reads it."""

    async def test_a_comment_before_the_first_critique_judges_that_version(self, api):
        before = await scrape(api)
        run_id = await start(api, task="Explain tides.", policy={"review": "first_round"})
        await wait_for(api, run_id)
        await decide_escalation(api, run_id, action="comment", comment=MOON)
        run = await wait_for(api, run_id, statuses=DONE)
        assert (run["status"], run["stop_reason"]) == ("succeeded", "critic_pass")
        assert [r["critique"] is not None for r in run["rounds"]] == [False, True]

        body = await stats(api)
        assert trigger(body) == {
            "versions": 2,
            "versions_judged": 2,  # the reviewer judged round 1, the Critic round 2
            "versions_critiqued": 1,
            "trigger_rate": 1.0,
        }
        assert trigger(body) == await expected_trigger(api, run)
        after = await scrape(api)
        assert settled_counts(after) == (2, 0)
        rule, ratio = trigger_rule()
        assert promql.evaluate(ratio, after, before) == {frozenset(): body["trigger_rate"]}
        assert promql.evaluate(rule, after, before) == {}  # healthy: no alert

    async def test_a_version_revised_without_a_judgement_lowers_it(self, api, orchestrator_app):
        """No path through the API revises a version nobody judged any more (every revision
        follows a critique or a person's decision; a retry critiques an unjudged version
        first), so the rows are written here as such a path would leave them: round 1 revised
        without a critique, round 2 critiqued and shipped. The counter is fed by the same hooks
        the act step and ``records.finalize`` call, in the same transaction."""
        before = await scrape(api)

        def work(session: Session) -> str:
            run = Run(
                id=new_id("run"),
                status="critiquing",
                kind="text",
                task="Explain tides.",
                evaluator="none",
                policy=Policy().model_dump(mode="json"),
                created_by="test",
                rounds=2,
            )
            session.add(run)
            session.flush()
            digest = output_hash("Tides come from the Moon.")
            session.add(Round(run_id=run.id, number=1, output="Tides.", output_hash="h1"))
            session.add(
                Round(
                    run_id=run.id,
                    number=2,
                    output="Tides come from the Moon.",
                    output_hash=digest,
                    critique={**PASS, "output_hash": digest, "binding_checks": []},
                )
            )
            session.flush()
            settled.revised(session, run.id, 1, None)
            stop = Stop(RunStatus.succeeded, StopReason.critic_pass, error_class="none")
            assert records.finalize(session, run, stop, final_round=2).status.value == "succeeded"
            return run.id

        run_id = await orchestrator_app.state.db.run(work)
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert (run["status"], run["shipped_by"]) == ("succeeded", "critic")

        body = await stats(api)
        assert trigger(body) == {
            "versions": 2,
            "versions_judged": 1,
            "versions_critiqued": 1,
            "trigger_rate": 0.5,
        }
        assert trigger(body) == await expected_trigger(api, run)
        after = await scrape(api)
        assert settled_counts(after) == (1, 1)
        rule, ratio = trigger_rule()
        assert promql.evaluate(ratio, after, before) == {frozenset(): 0.5}
        assert promql.evaluate(rule, after, before) == {}  # 2 versions: under the minimum
        busy = scaled(after, 10)  # the same mix over 20 versions: the alert fires
        assert promql.evaluate(rule, busy, before) == {frozenset(): 0.5}

    async def test_a_persons_decisions_judge_and_unsettled_versions_are_not_counted(self, api):
        edited = await paused_run(api)
        await decide_escalation(api, edited, action="edit", output="The Moon pulls.", finish=True)
        approved = await paused_run(api)
        await decide_escalation(api, approved, action="approve")
        rejected = await paused_run(api)
        await decide_escalation(api, rejected, action="reject", comment="Off topic.")
        waiting = await paused_run(api)
        runs = [(await api.get(f"/v1/runs/{r}")).json() for r in (edited, approved, rejected)]
        runs.append((await api.get(f"/v1/runs/{waiting}")).json())
        assert [r["status"] for r in runs] == [
            "succeeded",
            "succeeded",
            "failed",
            "awaiting_review",
        ]

        body = await stats(api)
        # the edited run: its draft (revised by the edit, which judged it) and the edited
        # version (shipped on the person's approval); the approved draft. The rejected draft
        # and the waiting one have not settled.
        assert trigger(body) == {
            "versions": 3,
            "versions_judged": 3,
            "versions_critiqued": 0,
            "trigger_rate": 1.0,
        }
        assert trigger(body) == await expected_trigger(api, *runs)
        assert settled_counts(await scrape(api)) == (3, 0)

    async def test_a_step_run_again_counts_no_version_twice(self, api):
        from orchestrator.engine.steps import act, critique

        run = await wait_for(api, await start(api, task=PASSES))
        assert settled_counts(await scrape(api)) == (2, 0)
        # the critique step that succeeded the run, run again (cut off after its commit)
        assert (await critique(run["id"], 2, None, None)).verdict == "pass"
        assert settled_counts(await scrape(api)) == (2, 0)

        run_id = await paused_run(api)
        await decide_escalation(api, run_id, action="comment", comment=MOON)
        paused = await wait_for(api, run_id, statuses={"awaiting_review"})
        assert len(paused["rounds"]) == 2
        assert settled_counts(await scrape(api)) == (3, 0)  # round 1, on the comment
        # the revision step, run again: its round is written already
        await act(run_id, 2, "revise", 1, [paused["rounds"][0]["output_hash"]])
        assert settled_counts(await scrape(api)) == (3, 0)
        assert (await stats(api))["versions"] == 3


class TestAdoptionIsTheCriticsCall:
    async def test_an_issue_raised_again_on_the_revised_text_is_not_adopted(self, api, fake_model):
        """The Actor says it applied both issues; the Critic raises the first again on the
        revised text (a new quote, the same dimension written differently)."""
        from tests.critic.conftest import issue
        from tests.orchestrator.test_revision_points import (
            DRAFT,
            ONE,
            REVISED,
            TWO,
            actor,
            answer,
        )

        again = issue(
            severity="minor",
            dimension=" Completeness",
            quote="Tides rise and fall twice a day",
            suggestion="Name the rhythm.",
        )
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
            {"stage": "revise", "response": actor(REVISED, answer("i1"), answer("i2"))},
            {"stage": "critique", "response": scripted(issues=[again])},
        )
        run = await wait_for(api, await start(api, task="Explain tides.", policy={"max_rounds": 2}))
        assert [r["action"] for r in run["rounds"][1]["responses"]] == ["applied", "applied"]
        assert run["rounds"][1]["adoption"] == 0.5
        assert adoption_counts(run) == [(1, 2)]
        body = await stats(api)
        assert (body["adoption_rate"], body["adoption_rounds"]) == (0.5, 1)
        text = (await api.get("/metrics")).text
        assert metric(text, "crosscheck_reflection_issues_total") == 2
        assert metric(text, "crosscheck_reflection_issues_adopted_total") == 1

    async def test_a_refusal_the_critic_lets_go_without_accepting_it_is_adopted(
        self, api, fake_model
    ):
        from tests.orchestrator.test_revision_points import (
            DRAFT,
            ONE,
            REASON,
            REVISED,
            TWO,
            actor,
            answer,
        )

        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
            {
                "stage": "revise",
                "response": actor(REVISED, answer("i1"), answer("i2", "declined", REASON)),
            },
            {"stage": "critique", "response": PASS},  # raises neither, accepts no refusal
        )
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert run["rounds"][1]["critique"]["accepted_refusals"] == []
        assert run["rounds"][1]["adoption"] == 1.0
        assert adoption_counts(run) == [(2, 2)]

    async def test_a_persons_edit_is_not_measured(self, api):
        run_id = await start(api, task=ESCALATES, policy={"max_rounds": 1})
        escalated = await wait_for(api, run_id)
        assert escalated["rounds"][0]["critique"]["issues"]
        edit = "Tides: the Moon's gravity raises two bulges of water.\n(revised)"
        await decide_escalation(api, run_id, action="edit", output=edit)
        run = await wait_for(api, run_id, statuses=DONE)
        edited = run["rounds"][1]
        assert (edited["provenance"], edited["critique"] is not None) == ("human", True)
        assert edited["adoption"] is None
        assert (await stats(api))["adoption_rounds"] == 0


class TestAlertRules:
    async def test_every_alert_reads_metrics_the_orchestrator_exposes(self, api):
        await wait_for(api, await start(api, task=PASSES))
        published = await api.post("/v1/evaluations", json=intercept_summary(0.7))
        assert published.status_code == 201, published.text
        exposed = {
            line.split("{")[0].split(" ")[0]
            for line in (await api.get("/metrics")).text.splitlines()
            if line.startswith("crosscheck_")
        }
        rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
        for rule in rules:
            used = set(METRIC.findall(rule["expr"]))
            assert used, rule["alert"]
            assert used <= exposed, (rule["alert"], used - exposed)

    def test_the_bands_are_the_seeds(self):
        rules = {
            r["alert"]: r["expr"] for r in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
        }
        assert ") < 0.95" in rules["CrosscheckCritiqueTriggerRateLow"]
        assert ") < 0.15" in rules["CrosscheckAdoptionRateLow"]
        assert ") > 0.70" in rules["CrosscheckAdoptionRateHigh"]
        assert ") > 0.10" in rules["CrosscheckDegradedCritiquesHigh"]
        intercept = promql.parse(rules["CrosscheckInterceptRateLow"])
        assert isinstance(intercept, promql.Binary)
        assert intercept.op == "<"
        assert intercept.right == promql.Number(INTERCEPT_TARGET)

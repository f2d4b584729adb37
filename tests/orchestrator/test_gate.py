"""One gate out: whatever rule stops the loop, the version that ships is the one that was
checked (its evaluator passed when the run has one, and the Critic passed that very version),
or a person approved it. Each layer of the defence is tested on its own: the stop rules through
the API, the orchestrator's own check of a Critic that passes what is no pass, and the gate
where every run ends (``records.finalize``)."""

import json
from datetime import UTC, datetime

import httpx
import pytest
from sqlmodel import Session

from orchestrator.engine import gate, records
from orchestrator.engine.policy import Stop, output_hash
from orchestrator.tables import Round, Run, new_id
from shared.orchestration import Policy, ReviewMode, RunStatus, ShippedBy, StopReason
from tests.critic.conftest import JUSTIFICATION
from tests.orchestrator.conftest import FINAL, mint, start, wait_for
from tests.orchestrator.test_loop import LONG, actor_reply, critique
from tests.orchestrator.test_over_correction import RIGHT, TASK, WRONG

DONE = FINAL - {"awaiting_review"}


def passing(**extra) -> dict:
    return {"stage": "critique", "response": {**critique("pass"), **extra}}


def assert_checked(run: dict, decisions: list[dict]) -> None:
    """The gate, read from what a user sees: the shipped version was checked as it ships."""
    assert run["status"] == "succeeded"
    final = next(r for r in run["rounds"] if r["number"] == run["final_round"])
    assert final["output"] == run["final_output"]
    if run["shipped_by"] == "person":
        assert run["stop_reason"] == "review_approved"
        approved = [
            d
            for d in decisions
            if d["action"] == "approve"
            and d["round"] == final["number"]
            or d["action"] == "edit"
            and final["provenance"] == "human"
        ]
        assert approved, decisions
        return
    judged = final["critique"]
    assert judged["verdict"] == "pass"
    assert judged["output_hash"] == final["output_hash"] == output_hash(final["output"])
    assert not [i for i in judged["issues"] if i["severity"] in ("major", "critical")]
    assert all(c["satisfied"] for c in judged["binding_checks"])
    if run["evaluator"] == "none":
        assert run["shipped_by"] == "critic"
    else:
        assert run["shipped_by"] == "evaluator+critic"
        assert final["evaluation"]["passed"] is True
        assert final["evaluation"]["output_hash"] == final["output_hash"]


async def decisions_of(api, run_id: str) -> list[dict]:
    items = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    out = []
    for item in items:
        full = (await api.get(f"/v1/reviews/{item['id']}")).json()
        if full["decision"]:
            out.append({**full["decision"], "round": full["round"]})
    return out


async def review(api, run_id: str, **body) -> None:
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
    claimed = await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)
    assert claimed.status_code == 200, claimed.text
    decided = await api.post(f"/v1/reviews/{item['id']}/decision", json=body, headers=headers)
    assert decided.status_code == 200, decided.text


# ------------------------------------------------------------ every way to succeeded


async def by_critic_pass(api, fake_model) -> str:
    return await start(api, task="Explain why the sky is blue.")


async def by_convergence(api, fake_model) -> str:
    fake_model.script(
        {"stage": "draft", "response": actor_reply(LONG)},
        {"stage": "revise", "response": actor_reply(LONG + "!")},
        {"stage": "critique", "response": critique()},
        passing(),
    )
    return await start(api, task="Explain tides.")


async def by_evaluator_pass(api, fake_model) -> str:
    fake_model.script({"stage": "draft", "response": actor_reply("{}")}, passing())
    return await start(
        api,
        task="An empty JSON object.",
        json_schema={"type": "object"},
        policy={"stop_on_evaluator_pass": True},
    )


async def by_tests_and_critic(api, fake_model) -> str:
    fake_model.script({"stage": "draft", "response": actor_reply(RIGHT)}, passing())
    return await start(api, **TASK)


async def by_approval(api, fake_model) -> str:
    run_id = await start(api, task="Explain tides.", policy={"review": "first_round"})
    await wait_for(api, run_id)
    await review(api, run_id, action="approve")
    return run_id


async def by_edit(api, fake_model) -> str:
    run_id = await start(api, task="Explain tides.", policy={"review": "first_round"})
    await wait_for(api, run_id)
    await review(
        api, run_id, action="edit", output="The Moon's pull raises two bulges.", finish=True
    )
    return run_id


async def by_edit_then_critic(api, fake_model) -> str:
    # an edit that carries on is evaluated and critiqued like any version before it ships
    fake_model.script({"stage": "draft", "response": actor_reply("[1]")}, passing())
    run_id = await start(
        api,
        task="A JSON object.",
        json_schema={"type": "object"},
        policy={"review": "first_round"},
    )
    await wait_for(api, run_id)
    await review(api, run_id, action="edit", output='{"a": 1}')
    return run_id


async def by_expiry(api, fake_model) -> str:
    return await start(
        api, task="Explain tides.", policy={"review": "first_round", "review_deadline_s": 1}
    )


WAYS = {
    "critic_pass": (by_critic_pass, "critic_pass", "critic"),
    "converged": (by_convergence, "converged", "critic"),
    "evaluator_pass": (by_evaluator_pass, "evaluator_pass", "evaluator+critic"),
    "tests_and_critic": (by_tests_and_critic, "critic_pass", "evaluator+critic"),
    "approved": (by_approval, "review_approved", "person"),
    "edited": (by_edit, "review_approved", "person"),
    "edited_then_critiqued": (by_edit_then_critic, "critic_pass", "evaluator+critic"),
    "expired_then_critiqued": (by_expiry, "critic_pass", "critic"),
}


class TestEveryWayToSucceeded:
    @pytest.mark.parametrize("way", list(WAYS))
    async def test_the_shipped_version_was_checked(self, api, fake_model, way):
        make, reason, shipped_by = WAYS[way]
        run_id = await make(api, fake_model)
        run = await wait_for(api, run_id, statuses=DONE, timeout=60)
        assert (run["status"], run["stop_reason"], run["shipped_by"]) == (
            "succeeded",
            reason,
            shipped_by,
        ), run["detail"]
        assert_checked(run, await decisions_of(api, run_id))
        finished = [
            e
            for e in (await api.get("/v1/events", params={"run_id": run_id})).json()
            if e["type"] == "run.finished"
        ]
        assert finished[-1]["data"]["shipped_by"] == shipped_by

    async def test_an_edit_that_carries_on_was_evaluated_before_it_shipped(self, api, fake_model):
        run = await wait_for(api, await by_edit_then_critic(api, fake_model), statuses=DONE)
        edited = run["rounds"][-1]
        assert (edited["provenance"], edited["evaluation"]["passed"]) == ("human", True)
        assert [c["stage"] for c in fake_model.requests()] == ["draft", "critique"]

    async def test_a_run_that_escalates_shipped_nothing(self, api, fake_model):
        run = await wait_for(
            api, await start(api, task="Explain tides.", policy={"max_rounds": 1}), statuses=DONE
        )
        assert (run["status"], run["shipped_by"]) == ("escalated", None)


class TestAConvergedRevisionIsChecked:
    async def test_a_converged_code_revision_that_breaks_its_tests_does_not_succeed(
        self, api, fake_model
    ):
        # the revision drops n (candidate(2) == [2] fails) and changes under 2% of the text;
        # even a Critic that passes it cannot ship it, and the guard is off so nothing rolls
        # it back: the failing version is evaluated, and the run goes on by the usual rules
        fake_model.script(
            {"stage": "draft", "response": actor_reply(RIGHT)},
            {"stage": "critique", "response": critique("revise", reflection="Add a comment.")},
            {"stage": "revise", "response": actor_reply(WRONG)},
            passing(),
        )
        policy = {"over_correction_guard": False, "max_rounds": 2}
        run = await wait_for(api, await start(api, **TASK, policy=policy), statuses=DONE)
        second = run["rounds"][1]
        assert second["output"] == WRONG
        assert second["evaluation"]["passed"] is False
        assert (run["status"], run["stop_reason"], run["shipped_by"]) == (
            "escalated",
            "max_rounds",
            None,
        )


# ----------------------------------------------------- the orchestrator's own check


PASS_WITH_CRITICAL = {
    "verdict": "pass",
    "confidence": 0.95,
    "issues": [
        {
            "dimension": "accuracy",
            "severity": "critical",
            "quote": None,
            "suggestion": "no_problem",
        }
    ],
    "reflection": "Looks fine.",
    "error_class": "none",
    "dimensions": ["accuracy", "completeness"],
}
PASS_OFF_PROFILE = {
    **PASS_WITH_CRITICAL,
    "issues": [{"dimension": "vibes", "severity": "minor", "suggestion": "ok"}],
}
PASS_UNSURE = {**PASS_WITH_CRITICAL, "issues": [], "confidence": 0.0}
CLEAN_PASS = {
    **PASS_WITH_CRITICAL,
    "issues": [],
    "no_error_found": True,
    "justification": JUSTIFICATION,
}


def stub_critic(answers: list[dict]):
    """A Critic peer that answers whatever it is given, as a misbehaving deployment might
    (the real Critic re-asks its model and counts these as revise): only the orchestrator's
    own check stands between them and a run that ships."""
    seen: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/critique":
            return httpx.Response(404, json={"error": "NotFound", "detail": "stub"})
        seen.append(json.loads(request.read()))
        body = answers[min(len(seen), len(answers)) - 1]
        usage = {"provider": "anthropic", "model": "stub", "input_tokens": 1, "output_tokens": 1}
        return httpx.Response(200, json={**CLEAN_PASS, **body, "usage": usage})

    return httpx.MockTransport(handle), seen


@pytest.mark.sqlite_only
class TestTheOrchestratorChecksThePassAgain:
    @pytest.fixture
    def answers(self):
        return [PASS_WITH_CRITICAL, CLEAN_PASS]

    @pytest.fixture
    async def peers(self, peers, answers):
        transport, self.seen = stub_critic(answers)
        return {**peers, "critic": transport}

    async def test_a_pass_listing_a_critical_issue_does_not_end_the_run(self, api, fake_model):
        run = await wait_for(api, await start(api, task="Explain tides."), statuses=DONE)
        first, second = run["rounds"]
        assert first["critique"]["verdict"] == "revise"
        assert first["critique"]["refused_pass"] == [
            "issue 1 is critical (accuracy): a pass lists no major or critical issue"
        ]
        assert (run["status"], run["stop_reason"], run["final_round"]) == (
            "succeeded",
            "critic_pass",
            2,
        )
        assert "The critic's pass was not accepted" in run["reflections"][0]["content"]

    @pytest.mark.parametrize(
        ("answers", "why"),
        [
            ([PASS_OFF_PROFILE, CLEAN_PASS], "'vibes', which is not a dimension"),
            ([PASS_UNSURE, CLEAN_PASS], "confidence 0.00 is under the 0.60 a pass needs"),
        ],
    )
    async def test_an_off_profile_or_unsure_pass_is_no_pass(self, api, fake_model, answers, why):
        run = await wait_for(api, await start(api, task="Explain tides."), statuses=DONE)
        assert run["rounds"][0]["critique"]["verdict"] == "revise"
        assert why in run["rounds"][0]["critique"]["refused_pass"][0]
        assert run["final_round"] == 2
        # the orchestrator told the Critic which confidence a pass needs
        assert [s["min_pass_confidence"] for s in self.seen] == [0.6, 0.6]

    async def test_the_threshold_follows_the_run(self, api, fake_model):
        policy = {"review_confidence_threshold": 0.0}
        run = await wait_for(
            api, await start(api, task="Explain tides.", policy=policy), statuses=DONE
        )
        assert (run["status"], run["final_round"]) == ("succeeded", 2)  # the critical issue
        assert [s["min_pass_confidence"] for s in self.seen] == [0.0, 0.0]


# ----------------------------------------------------------- the gate where runs end


def policy_doc(**fields) -> dict:
    return Policy(**fields).model_dump(mode="json")


CHECKED = {"verdict": "pass", "confidence": 0.9, "issues": [], "binding_checks": []}


class TestTheGate:
    """``gate.check`` alone: each condition a shipped version must meet."""

    @staticmethod
    def check(**overrides):
        args = {
            "reason": StopReason.critic_pass,
            "output_hash": "h",
            "evaluator": "none",
            "evaluation": None,
            "critique": {**CHECKED, "output_hash": "h"},
            "citations": None,
            "unsourced": None,
            "binding_points": None,
            "policy": Policy(),
        }
        return gate.check(**{**args, **overrides})

    def test_a_critic_pass_on_this_version_ships(self):
        assert self.check().shipped_by is ShippedBy.critic

    def test_with_an_evaluator_both_must_pass_this_version(self):
        passed = {"passed": True, "output_hash": "h"}
        assert self.check(evaluator="python_tests", evaluation=passed).shipped_by is (
            ShippedBy.evaluator_critic
        )

    @pytest.mark.parametrize(
        ("overrides", "why"),
        [
            ({"critique": None}, "it has no critique"),
            ({"critique": {**CHECKED, "output_hash": "other"}}, "judged another version"),
            ({"critique": {**CHECKED}}, "judged another version"),  # no hash: not trusted
            ({"critique": {**CHECKED, "verdict": "revise", "output_hash": "h"}}, "'revise'"),
            (
                {
                    "critique": {
                        **CHECKED,
                        "output_hash": "h",
                        "issues": [{"severity": "major", "dimension": "d"}],
                    }
                },
                "no major or critical issue",
            ),
            ({"critique": {**CHECKED, "output_hash": "h", "confidence": 0.1}}, "under the 0.60"),
            (
                {
                    "critique": {
                        **CHECKED,
                        "output_hash": "h",
                        "binding_checks": [{"point": "p", "satisfied": False}],
                    }
                },
                "binding point",
            ),
            ({"binding_points": ["p"]}, "binding point"),
            ({"citations": {"ok": False}}, "citations"),
            ({"unsourced": [{"issue": "i1"}]}, "flagged as a hallucination without a source"),
            ({"evaluator": "python_tests"}, "did not run on this version"),
            (
                {"evaluator": "python_tests", "evaluation": {"passed": True, "output_hash": "x"}},
                "did not run on this version",
            ),
            (
                {"evaluator": "json_schema", "evaluation": {"passed": False, "output_hash": "h"}},
                "failed its json_schema evaluation",
            ),
        ],
    )
    def test_a_version_that_was_not_checked_as_it_ships_does_not(self, overrides, why):
        verdict = self.check(**overrides)
        assert verdict.shipped_by is None
        assert why in verdict.why_not

    def test_a_person_approving_is_a_gate_of_its_own(self):
        verdict = self.check(reason=StopReason.review_approved, critique=None)
        assert verdict.shipped_by is ShippedBy.person

    def test_under_on_low_confidence_a_person_judges_confidence(self):
        policy = Policy(review=ReviewMode.on_low_confidence)
        unsure = {**CHECKED, "output_hash": "h", "confidence": 0.1}
        assert self.check(critique=unsure, policy=policy).shipped_by is ShippedBy.critic


class TestFinalizeAppliesTheGate:
    """A ``succeeded`` stop for a version nobody checked, however it got there, escalates."""

    async def test_an_unchecked_version_escalates_instead_of_shipping(self, api, orchestrator_app):
        db = orchestrator_app.state.db  # served by the `api` fixture: migrated

        def work(session: Session) -> tuple[str, str | None, str | None, str | None]:
            run = Run(
                id=new_id("run"),
                status=RunStatus.critiquing.value,
                kind="text",
                task="Explain tides.",
                evaluator="none",
                policy=policy_doc(),
                created_by="test",
                rounds=1,
                created_at=datetime.now(UTC),
            )
            session.add(run)
            session.flush()
            session.add(Round(run_id=run.id, number=1, output="x", output_hash=output_hash("x")))
            session.flush()
            stop = Stop(RunStatus.succeeded, StopReason.converged, error_class="none")
            applied = records.finalize(session, run, stop, final_round=1)
            return applied.status.value, run.status, run.shipped_by, run.detail

        status, stored, shipped_by, detail = await db.run(work)
        assert (status, stored, shipped_by) == ("escalated", "escalated", None)
        assert "round 1 was not shipped: it has no critique (stop rule converged)" in detail

    async def test_a_checked_version_ships_through_the_fast_path(self, api, orchestrator_app):
        db = orchestrator_app.state.db

        def work(session: Session) -> tuple[str, str | None]:
            run = Run(
                id=new_id("run"),
                status=RunStatus.critiquing.value,
                kind="text",
                task="Explain tides.",
                evaluator="none",
                policy=policy_doc(),
                created_by="test",
                rounds=1,
            )
            session.add(run)
            session.flush()
            digest = output_hash("x")
            session.add(
                Round(
                    run_id=run.id,
                    number=1,
                    output="x",
                    output_hash=digest,
                    critique={**CHECKED, "output_hash": digest},
                )
            )
            session.flush()
            stop = Stop(RunStatus.succeeded, StopReason.critic_pass, error_class="none")
            finished, applied = records.finalize_fast(session, run.id, stop, final_round=1)
            return applied.status.value, finished.shipped_by

        assert await db.run(work) == ("succeeded", "critic")

"""Revision discipline through the API, with the fake model behind the real SDKs: the Actor
answers every critic issue point by point, declined issues go to the next critique, the
adaptive stop, and the routing of the Critic's error class."""

import pytest

from tests.critic.conftest import issue, scripted
from tests.orchestrator.conftest import start, wait_for
from tests.support.fakemodel import user_text

DRAFT = (
    "Tides rise twice a day. The Moon pulls the oceans toward it. "
    "Rome was founded in 753 BC, as an aside."
)
REVISED = (
    "Tides rise and fall twice a day, a semidiurnal rhythm. The Moon's gravity pulls the "
    "oceans into two bulges. Rome was founded in 753 BC, as an aside."
)
CHEESE = "The Moon is made of cheese."
REASON = "The task asks for one historical aside; this is it, and the date is right."

ONE = issue(
    severity="minor",
    dimension="completeness",
    quote="Tides rise twice a day.",
    suggestion="Name the semidiurnal rhythm.",
)
TWO = issue(
    severity="minor",
    dimension="structure",
    quote="Rome was founded in 753 BC, as an aside.",
    suggestion="Drop the aside about Rome.",
)
PASS = scripted(verdict="pass", confidence=0.9, reflection="Nothing to change.", error_class="none")


def actor(output: str, *responses: dict) -> dict:
    return {"output": output, "uncertainties": [], "responses": list(responses)}


def answer(issue_id: str, action: str = "applied", reason: str = "", **extra) -> dict:
    return {"issue": issue_id, "action": action, "reason": reason, "where": "sentence 1", **extra}


def calls(fake_model, stage: str) -> list[str]:
    return [user_text(c) for c in fake_model.requests() if c["stage"] == stage]


async def events(api, run_id: str) -> list[dict]:
    return (await api.get("/v1/events", params={"run_id": run_id})).json()


class TestPointByPoint:
    async def test_a_declined_issue_reaches_the_critic_who_accepts_the_refusal(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
            {
                "stage": "revise",
                "response": actor(REVISED, answer("i1"), answer("i2", "declined", REASON)),
            },
            {"stage": "critique", "response": {**PASS, "accepted_refusals": ["i2"]}},
        )
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert (run["status"], run["stop_reason"]) == ("succeeded", "critic_pass")

        [revise] = calls(fake_model, "revise")
        assert "[i1] (minor, completeness, other) Name the semidiurnal rhythm." in revise
        assert "[i2] (minor, structure, other) Drop the aside about Rome." in revise
        first, second = calls(fake_model, "critique")
        assert "<declined>" not in first
        declined = second.split("<declined>")[1].split("</declined>")[0]
        assert "[i2] Drop the aside about Rome." in declined
        assert f"Actor's reason: {REASON}" in declined
        assert "[i1]" not in declined  # applied issues are not the critic's to re-judge

        second_round = run["rounds"][1]
        assert [(r["issue"], r["action"]) for r in second_round["responses"]] == [
            ("i1", "applied"),
            ("i2", "declined"),
        ]
        assert second_round["critique"]["accepted_refusals"] == ["i2"]
        # i1 applied and not raised again; i2 declined and accepted: neither adopted nor counted
        assert second_round["adoption"] == 1.0

    async def test_a_refusal_the_critic_does_not_accept_counts_against_adoption(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
            {
                "stage": "revise",
                "response": actor(REVISED, answer("i1"), answer("i2", "declined", REASON)),
            },
            {"stage": "critique", "response": scripted(issues=[TWO])},  # raised again
        )
        run = await wait_for(api, await start(api, task="Explain tides.", policy={"max_rounds": 2}))
        assert run["stop_reason"] == "max_rounds"
        assert run["rounds"][1]["critique"]["accepted_refusals"] == []
        assert run["rounds"][1]["adoption"] == 0.5

    async def test_the_critic_cannot_accept_a_refusal_nobody_made(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": {**PASS, "accepted_refusals": ["i7"]}},
            {"stage": "critique", "response": PASS},
        )
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert run["status"] == "succeeded"
        assert run["rounds"][0]["critique"]["accepted_refusals"] == []
        _, repair = calls(fake_model, "critique")
        assert "`accepted_refusals` names 'i7', which is not a declined issue" in repair

    async def test_a_missing_answer_is_asked_for_again_and_the_reply_is_valid(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
            {"stage": "revise", "response": actor(REVISED, answer("i1"))},  # i2 unanswered
            {"stage": "revise", "response": actor(REVISED, answer("i1"), answer("i2"))},
            {"stage": "critique", "response": PASS},
        )
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert run["status"] == "succeeded"
        first, repair = calls(fake_model, "revise")
        assert "<repair>" not in first
        assert "`responses` has no entry for the critic issue i2" in repair
        assert [r["issue"] for r in run["rounds"][1]["responses"]] == ["i1", "i2"]
        assert run["rounds"][1]["adoption"] == 1.0


class TestAdaptiveStop:
    """A stop rule decides when to stop revising, never whether to check: a small revision
    is critiqued like any version, and the run ships only what the Critic passed."""

    async def test_a_small_revision_the_critic_passes_ends_succeeded_converged(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE, TWO])},
            {"stage": "revise", "response": actor(DRAFT + "!", answer("i1"), answer("i2"))},
            {"stage": "critique", "response": PASS},
        )
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert (run["status"], run["stop_reason"], run["shipped_by"]) == (
            "succeeded",
            "converged",
            "critic",
        )
        assert run["final_output"] == DRAFT + "!"
        assert "the critic passed it" in run["detail"]
        assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "pass"]

    async def test_a_small_fix_that_is_still_wrong_gets_a_second_critique(self, api, fake_model):
        # a critical wrong date "fixed" to another wrong date: a one-character revision that
        # says it applied the fix; the Critic raises it again, and nothing ships unchecked
        wrong = "Rome was founded in 754 BC, as an aside."
        critical = issue(
            severity="critical",
            dimension="accuracy",
            quote="Rome was founded in 753 BC, as an aside.",
            suggestion="Rome was founded in 753 BC is right; the task asks for 509 BC.",
        )
        again = issue(
            severity="critical",
            dimension="accuracy",
            quote=wrong,
            suggestion="Still wrong: the task asks for the republic, 509 BC.",
        )
        fixed = DRAFT.replace("753 BC", "509 BC")
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[critical])},
            {"stage": "revise", "response": actor(DRAFT.replace("753", "754"), answer("i1"))},
            {"stage": "critique", "response": scripted(issues=[again])},
            {"stage": "revise", "response": actor(fixed, answer("i1"))},
            {"stage": "critique", "response": PASS},
        )
        run = await wait_for(api, await start(api, task="Explain tides; date the republic."))
        assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "revise", "pass"]
        assert (run["status"], run["final_output"]) == ("succeeded", fixed)
        assert "754 BC" not in run["final_output"]

    async def test_a_stalled_loop_escalates_by_the_usual_rules(self, api, fake_model):
        major = {**ONE, "severity": "major"}
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[major, TWO])},
            {
                "stage": "revise",
                "response": actor(DRAFT + "!", answer("i1", "declined", REASON), answer("i2")),
            },
            {"stage": "critique", "response": scripted(issues=[major])},
        )
        run = await wait_for(api, await start(api, task="Explain tides.", policy={"max_rounds": 2}))
        assert (run["status"], run["stop_reason"], run["shipped_by"]) == (
            "escalated",
            "max_rounds",
            None,
        )
        assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "revise"]

    async def test_the_critic_values_another_round_too_little(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": scripted(issues=[ONE], continue_value=2)},
        )
        run = await wait_for(
            api, await start(api, task="Explain tides.", policy={"min_continue_value": 3})
        )
        # it did not pass: the loop stops revising and a person decides whether it ships
        assert (run["status"], run["stop_reason"], run["final_round"]) == (
            "escalated",
            "converged",
            1,
        )
        assert "2/10" in run["detail"]
        reviews = (await api.get("/v1/reviews", params={"run_id": run["id"]})).json()["items"]
        assert [r["kind"] for r in reviews] == ["escalation"]


ENVIRONMENT = scripted(
    issues=[issue(severity="major", suggestion="The evaluation could not run.")],
    error_class="environment",
    reflection="The sandbox was down; nothing in the output is at fault.",
)


class TestErrorClassRouting:
    async def test_an_environment_critique_is_retried_without_using_a_round(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            {"stage": "critique", "response": ENVIRONMENT},
            {"stage": "critique", "response": PASS},
        )
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        run = await wait_for(api, run_id)
        assert (run["status"], run["stop_reason"], run["final_round"]) == (
            "succeeded",
            "critic_pass",
            1,
        )
        assert len(run["rounds"]) == 1
        assert [c["stage"] for c in fake_model.requests()] == ["draft", "critique", "critique"]
        assert run["reflections"] == []  # nothing for the Actor to revise from
        seen = await events(api, run_id)
        retried = [e["data"] for e in seen if e["type"] == "round.critique_retried"]
        assert [(e["round"], e["attempt"], e["error_class"]) for e in retried] == [
            (1, 1, "environment")
        ]
        assert [e["data"]["verdict"] for e in seen if e["type"] == "round.critique"] == ["pass"]
        trajectory = (await api.get(f"/v1/runs/{run_id}/trajectory")).json()
        assert [c["role"] for c in trajectory["calls"]].count("critic") == 2  # both billed

    async def test_an_environment_critique_that_persists_escalates_environment(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT)},
            *[{"stage": "critique", "response": ENVIRONMENT}] * 3,
        )
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        assert (run["status"], run["stop_reason"], run["error_class"]) == (
            "escalated",
            "environment",
            "environment",
        )
        assert (len(run["rounds"]), run["final_round"]) == (1, 1)
        assert "3 time(s) on round 1" in run["detail"]
        assert [c["stage"] for c in fake_model.requests()].count("critique") == 3
        assert "revise" not in [c["stage"] for c in fake_model.requests()]
        seen = await events(api, run_id)
        assert [e["data"]["attempt"] for e in seen if e["type"] == "round.critique_retried"] == [
            1,
            2,
        ]

    async def test_a_hallucinated_claim_left_in_place_unsourced_yields_an_evaluator_fact(
        self, api, fake_model
    ):
        claim = issue(severity="major", quote=CHEESE, suggestion="Remove the invented claim.")
        hallucination = scripted(issues=[claim], error_class="hallucination")
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT + " " + CHEESE)},
            {"stage": "critique", "response": hallucination},
            {"stage": "revise", "response": actor(REVISED + " " + CHEESE, answer("i1"))},
            {"stage": "critique", "response": scripted(issues=[ONE])},
        )
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 2})
        run = await wait_for(api, run_id)
        [revise] = calls(fake_model, "revise")
        assert "[i1] (major, accuracy, other, hallucination)" in revise
        facts = [r for r in run["reflections"] if r["source"] == "evaluator"]
        assert len(facts) == 1
        assert facts[0]["round"] == 2
        assert "flagged as hallucinations, without a source" in facts[0]["content"]
        assert CHEESE in facts[0]["content"]
        seen = await events(api, run_id)
        assert [e["data"] for e in seen if e["type"] == "round.unsourced_claims"] == [
            {"round": 2, "issues": ["i1"]}
        ]

    async def test_a_removed_or_sourced_claim_yields_no_fact(self, api, fake_model):
        claim = issue(severity="major", quote=CHEESE, suggestion="Remove the invented claim.")
        hallucination = scripted(issues=[claim], error_class="hallucination")
        sourced = answer("i1", source='task: "the Moon is made of cheese"')
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT + " " + CHEESE)},
            {"stage": "critique", "response": hallucination},
            {"stage": "revise", "response": actor(REVISED + " " + CHEESE, sourced)},
            {"stage": "critique", "response": scripted(issues=[ONE])},
            {"stage": "revise", "response": actor(REVISED + " The Sun adds its pull.")},
            {"stage": "critique", "response": PASS},
        )
        task = "Explain tides to a child who believes the Moon is made of cheese."
        run = await wait_for(api, await start(api, task=task))
        assert run["status"] == "succeeded"
        assert [r for r in run["reflections"] if r["source"] == "evaluator"] == []


TIDES_ENTRY = {
    "kind": "rule_anchor",
    "title": "Tides follow the Moon",
    "body": "Two tides a day: the Moon's gravity and the Earth's rotation.",
}
TIDES_TASK = "Explain tides. Sailors say the Moon raises two tides a day."


class TestHallucinationSources:
    """A claim flagged as a hallucination and kept in the revision stays open unless the
    answer's `source` names a real source (here a knowledge entry the Actor received, or a
    span of the task) that states the claim's numbers and names."""

    @pytest.mark.sqlite_only
    @pytest.mark.parametrize(
        ("claim", "source", "refused"),
        [
            ("The Moon raises 2 tides a day.", "knowledge:{entry}", None),
            ("The Moon raises 2 tides a day.", 'task: "the Moon raises two tides a day"', None),
            (
                "The Moon raises 2 tides a day.",
                "knowledge:tides.made-up",
                "knowledge:tides.made-up is no entry this revision's Actor received",
            ),
            (
                "The Moon raises 2 tides a day.",
                'task: "the Moon raises 2 tides daily"',
                '"the Moon raises 2 tides daily" does not occur in the task',
            ),
            ("The Moon raises 2 tides a day.", 'task: "two tides"', "under 3 words"),
            (
                "The Moon raises 3 tides a day.",
                "knowledge:{entry}",
                "the named source does not state 3",
            ),
            (
                "The Moon and Venus raise 2 tides a day.",
                "knowledge:{entry}",
                "the named source does not mention venus",
            ),
            (
                "The Moon raises 2 tides a day.",
                "Apollo 11 sample analysis, NASA (1969)",
                "names no source in an accepted form",
            ),
            ("The Moon raises 2 tides a day.", "", "the answer names no source"),
        ],
    )
    async def test_only_a_real_supporting_source_closes_the_issue(
        self, api, fake_model, claim, source, refused
    ):
        entry = (await api.post("/v1/knowledge", json=TIDES_ENTRY)).json()
        flagged = issue(severity="major", quote=claim, suggestion="Remove the invented claim.")
        hallucination = scripted(issues=[flagged], error_class="hallucination")
        named = answer("i1", source=source.format(entry=entry["id"]), where=claim)
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT + " " + claim)},
            {"stage": "critique", "response": hallucination},
            {"stage": "revise", "response": actor(REVISED + " " + claim, named)},
            {"stage": "critique", "response": scripted(issues=[issue(severity="minor")])},
        )
        run_id = await start(api, task=TIDES_TASK, policy={"max_rounds": 2})
        run = await wait_for(api, run_id)
        assert run["actor_knowledge"] == [entry["id"]]
        [revise] = calls(fake_model, "revise")
        assert f"(knowledge:{entry['id']})" in revise  # the Actor can name the entry
        assert 'task: "<exact words of the task>"' in revise  # and knows the forms
        facts = [r["content"] for r in run["reflections"] if r["source"] == "evaluator"]
        opened = [
            e["data"] for e in await events(api, run_id) if e["type"] == "round.unsourced_claims"
        ]
        if refused is None:
            assert facts == []
            assert opened == []
        else:
            [fact] = facts
            assert "(source refused: " in fact
            assert refused in fact
            assert "`knowledge:<id>`" in fact
            assert opened == [{"round": 2, "issues": ["i1"]}]

    async def test_a_claim_kept_without_a_real_source_holds_back_a_pass(self, api, fake_model):
        # the Critic (wrongly) passes the revision; the unsourced claim still keeps it from
        # shipping, and the person who gets the escalation reads why
        claim = "The Moon raises 3 tides a day."
        flagged = issue(severity="major", quote=claim, suggestion="Remove the invented claim.")
        named = answer("i1", source='task: "the Moon raises two tides a day"', where=claim)
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT + " " + claim)},
            {
                "stage": "critique",
                "response": scripted(issues=[flagged], error_class="hallucination"),
            },
            {"stage": "revise", "response": actor(REVISED + " " + claim, named)},
            {"stage": "critique", "response": PASS},
        )
        run = await wait_for(api, await start(api, task=TIDES_TASK, policy={"max_rounds": 2}))
        assert (run["status"], run["stop_reason"], run["shipped_by"]) == (
            "escalated",
            "max_rounds",
            None,
        )
        second = run["rounds"][1]
        assert second["critique"]["verdict"] == "pass"
        [kept] = second["unsourced"]
        assert (kept["issue"], kept["quote"]) == ("i1", claim)
        assert "the named source does not state 3" in kept["reason"]
        assert (
            "round 2: the critic passed it, but its claim(s) flagged as hallucinations stayed "
            "without a supporting source: i1"
        ) in run["detail"]

    async def test_removing_the_claim_closes_it(self, api, fake_model):
        claim = "The Moon raises 3 tides a day."
        flagged = issue(severity="major", quote=claim, suggestion="Remove the invented claim.")
        fake_model.script(
            {"stage": "draft", "response": actor(DRAFT + " " + claim)},
            {
                "stage": "critique",
                "response": scripted(issues=[flagged], error_class="hallucination"),
            },
            {"stage": "revise", "response": actor(REVISED, answer("i1"))},
            {"stage": "critique", "response": PASS},
        )
        run = await wait_for(api, await start(api, task=TIDES_TASK, policy={"max_rounds": 2}))
        assert (run["status"], run["final_output"]) == ("succeeded", REVISED)
        assert run["rounds"][1]["unsourced"] == []

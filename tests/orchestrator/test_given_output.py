"""A run whose first version the caller gave (``given_output``): the Actor drafts nothing, a
person decides on the given text (after the Critic with ``critic_first``), and it never ships
without that person's approval (SQLite and Postgres)."""

import json

import pytest

from orchestrator.auth.service import Principal
from orchestrator.engine import records
from orchestrator.engine.launch import start_orphans
from orchestrator.engine.policy import Stop, output_hash
from orchestrator.readmodel.rounds import RoundState
from orchestrator.runs.service import RunService
from shared.contracts import MAX_OUTPUT_CHARS
from shared.orchestration import Policy, Role, RunCreate, RunStatus, ShippedBy, StopReason
from tests.orchestrator.conftest import mint, wait_for
from tests.orchestrator.test_decisions import PASS_CRITIQUE, claimed_by_reviewer, decide
from tests.support.fakemodel import user_text

TASK = "Explain tides to a ten-year-old."
GIVEN = "Tides happen because the Moon pulls on the sea, twice a day on every coast."
# the fake Critic passes a text whose last line is "(revised)"
PASSABLE = "The Moon's pull raises the oceans on the near and far sides.\n(revised)"
FINAL = {"succeeded", "escalated", "failed", "cancelled"}
POINT = "Mention the Sun as well."


async def given_run(api, text: str = GIVEN, **body) -> str:
    response = await api.post("/v1/runs", json={"task": TASK, "given_output": text, **body})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def items_of(api, run_id: str, headers: dict | None = None) -> list[dict]:
    listed = await api.get("/v1/reviews", params={"run_id": run_id}, headers=headers or {})
    assert listed.status_code == 200, listed.text
    return list(listed.json()["items"])


async def waiting_item(api, run_id: str) -> dict:
    run = await wait_for(api, run_id)
    assert run["status"] == "awaiting_review", run
    [item] = await items_of(api, run_id)
    return item


class TestBeforeTheCritique:
    async def test_the_given_text_waits_for_a_person_and_no_model_is_called(self, api, fake_model):
        run_id = await given_run(api)
        item = await waiting_item(api, run_id)
        assert fake_model.requests() == []  # no Actor draft, no critique before the person
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        [first] = run["rounds"]
        assert (first["number"], first["output"], first["provenance"]) == (1, GIVEN, "given")
        assert run["final_output"] is None
        assert (item["kind"], item["round"], item["status"]) == ("pre_critique", 1, "pending")

    async def test_a_reviewer_sees_the_item_in_the_queue_with_the_given_text(self, api):
        run_id = await given_run(api)
        item = await waiting_item(api, run_id)
        reviewer = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        queue = await api.get("/v1/reviews", params={"status": "pending"}, headers=reviewer)
        assert item["id"] in [entry["id"] for entry in queue.json()["items"]]
        shown = (await api.get(f"/v1/reviews/{item['id']}", headers=reviewer)).json()
        assert shown["context"]["output"] == GIVEN
        assert shown["context"]["provenance"] == "given"
        assert shown["context"]["task"] == TASK

    async def test_approve_ships_the_given_text_as_the_persons(self, api, fake_model):
        run_id = await given_run(api)
        item = await waiting_item(api, run_id)
        headers = await claimed_by_reviewer(api, item)
        decided = await decide(api, item, headers, action="approve")
        assert decided.status_code == 200, decided.text
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["stop_reason"]) == ("succeeded", "review_approved")
        assert (run["final_output"], run["final_round"]) == (GIVEN, 1)
        assert run["shipped_by"] == "person"
        assert fake_model.requests() == []
        # kept as data, marked as the creator's text, not a model's
        exported = await api.get("/v1/datasets/export", params={"kind": "chat"})
        [record] = [json.loads(line) for line in exported.text.splitlines()]
        assert (record["messages"][1]["content"], record["output_provenance"]) == (GIVEN, "given")

    async def test_edit_and_finish_ships_the_edit(self, api):
        run_id = await given_run(api)
        item = await waiting_item(api, run_id)
        headers = await claimed_by_reviewer(api, item)
        edited = GIVEN + " The Sun adds a smaller pull."
        await decide(api, item, headers, action="edit", output=edited, finish=True)
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["final_output"], run["shipped_by"]) == (
            "succeeded",
            edited,
            "person",
        )
        assert [r["provenance"] for r in run["rounds"]] == ["given", "human"]

    async def test_reject_fails_the_run_and_ships_nothing(self, api):
        run_id = await given_run(api)
        item = await waiting_item(api, run_id)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="reject", comment="Too vague for a child.")
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["stop_reason"]) == ("failed", "review_rejected")
        assert run["shipped_by"] is None  # nothing shipped (final_output: the version rejected)
        assert run["detail"] == "Too vague for a child."

    async def test_a_comment_has_the_actor_revise_the_given_text_by_the_point(
        self, api, fake_model
    ):
        run_id = await given_run(api)
        item = await waiting_item(api, run_id)
        headers = await claimed_by_reviewer(api, item)
        decided = await decide(api, item, headers, action="comment", comment=POINT)
        assert decided.json()["run_status"] == "revising"
        run = await wait_for(api, run_id, statuses=FINAL)
        assert [c["stage"] for c in fake_model.requests()] == ["revise", "critique"]
        revise_prompt = user_text(fake_model.requests()[0])
        assert GIVEN in revise_prompt  # the Actor revised the given text ...
        assert f"1. {POINT}" in revise_prompt  # ... by the reviewer's point
        assert (run["status"], run["final_round"], run["shipped_by"]) == ("succeeded", 2, "critic")
        assert f"Reviewer point applied: {POINT}" in run["final_output"]
        assert [r["provenance"] for r in run["rounds"]] == ["given", "actor"]

    async def test_with_an_evaluator_the_person_sees_its_result(self, api, fake_model):
        schema = {"type": "object", "required": ["tide"]}
        run_id = await given_run(api, text=json.dumps({"moon": 1}), json_schema=schema)
        item = await waiting_item(api, run_id)
        shown = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert shown["context"]["evaluation"]["passed"] is False
        assert fake_model.requests() == []


class TestTheCriticFirst:
    async def test_a_critic_pass_still_goes_to_a_person(self, api, fake_model):
        run_id = await given_run(api, text=PASSABLE, critic_first=True)
        item = await waiting_item(api, run_id)
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert [c["stage"] for c in fake_model.requests()] == ["critique"]
        assert run["rounds"][0]["critique"]["verdict"] == "pass"
        # the Critic passed it, yet nothing shipped: the run waits for a person
        assert (run["status"], run["shipped_by"]) == ("awaiting_review", None)
        assert (item["kind"], item["reason"], item["round"]) == ("pre_critique", "critiqued", 1)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="approve")
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["final_output"], run["shipped_by"]) == (
            "succeeded",
            PASSABLE,
            "person",
        )

    async def test_a_critique_that_asks_for_changes_goes_to_the_person_not_the_actor(
        self, api, fake_model
    ):
        run_id = await given_run(api, critic_first=True)
        item = await waiting_item(api, run_id)
        assert [c["stage"] for c in fake_model.requests()] == ["critique"]
        assert (item["kind"], item["reason"], item["round"]) == ("pre_critique", "critiqued", 1)
        shown = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert shown["context"]["output"] == GIVEN
        assert [c["verdict"] for c in shown["context"]["critiques"]] == ["revise"]

    async def test_a_scripted_pass_on_the_given_text_is_no_shipment(self, api, fake_model):
        fake_model.script({"stage": "critique", "response": PASS_CRITIQUE})
        run_id = await given_run(api, critic_first=True)
        await waiting_item(api, run_id)
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert (run["status"], run["shipped_by"]) == ("awaiting_review", None)
        assert run["rounds"][0]["critique"]["verdict"] == "pass"

    async def test_a_critic_that_stays_down_escalates_to_a_person(self, api, fake_model):
        fake_model.faults(*[{"status": 503}] * 6)  # the Critic gives up (2 attempts) 3 times
        run_id = await given_run(api, critic_first=True)
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["stop_reason"], run["shipped_by"]) == (
            "escalated",
            "environment",
            None,
        )
        [item] = await items_of(api, run_id)
        assert (item["kind"], item["status"]) == ("escalation", "pending")
        assert "draft" not in {c.get("stage") for c in fake_model.requests()}


@pytest.mark.sqlite_only
class TestRefused:
    @pytest.mark.parametrize(
        ("body", "field", "says"),
        [
            ({"given_output": ""}, "given_output", "at least 1 character"),
            ({"given_output": "  \n\t "}, "given_output", "is blank"),
            ({"given_output": "a\x00b"}, "given_output", "NUL"),
            ({"given_output": "x" * (MAX_OUTPUT_CHARS + 1)}, "given_output", "at most"),
            ({"given_output": 42}, "given_output", "valid string"),
            ({"critic_first": True}, None, "critic_first applies to a given_output"),
            ({"given_output": GIVEN, "critic_first": "yes"}, "critic_first", "true or false"),
            (
                {"given_output": GIVEN, "policy": {"drafts": 3}},
                None,
                "leave drafts at 1",
            ),
        ],
    )
    async def test_a_bad_given_run_is_a_422_that_says_why(self, api, body, field, says):
        refused = await api.post("/v1/runs", json={"task": TASK, **body})
        assert refused.status_code == 422, refused.text
        errors = refused.json()["detail"]
        if field is not None:
            assert [e["loc"][-1] for e in errors] == [field], errors
        assert says in json.dumps(errors), errors
        assert (await api.get("/v1/runs")).json()["items"] == []

    async def test_an_idempotency_key_reused_with_another_given_text_is_a_409(self, api):
        key = {"Idempotency-Key": "given-1"}
        body = {"task": TASK, "given_output": GIVEN}
        first = await api.post("/v1/runs", json=body, headers=key)
        again = await api.post("/v1/runs", json=body, headers=key)
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json()["id"] == first.json()["id"]
        other = await api.post(
            "/v1/runs", json={**body, "given_output": "Another text."}, headers=key
        )
        assert other.status_code == 409, other.text


class TestRecovery:
    async def test_a_given_run_never_started_resumes_as_a_given_run(
        self, api, orchestrator_app, fake_model
    ):
        """A crash between the commit and the start: the restart puts the text before a
        person (or the Critic), never asks the Actor for a draft."""
        db = orchestrator_app.state.db
        body = RunCreate(task=TASK, given_output=GIVEN)
        caller = Principal(id="tok_test", name="a test", role=Role.admin)
        run, _ = await db.run(lambda s: RunService().create(s, caller, body, None))
        assert await start_orphans(db.engine) >= 1
        item = await waiting_item(api, run.id)
        assert item["kind"] == "pre_critique"
        assert fake_model.requests() == []


class TestTheGateAlone:
    """The gate's own layer, without the critique step that pauses a given text first: a
    stop that would ship the given text is refused unless a person approved it."""

    @staticmethod
    def given_round(provenance: str = "given") -> RoundState:
        passed = {"verdict": "pass", "confidence": 95, "issues": [], "binding_checks": []}
        return RoundState(
            number=1,
            output=GIVEN,
            output_hash=output_hash(GIVEN),
            evaluation=None,
            critique={**passed, "output_hash": output_hash(GIVEN)},
            rolled_back=None,
            provenance=provenance,
        )

    def through(self, reason: StopReason, provenance: str = "given") -> tuple[Stop, object]:
        stop = Stop(RunStatus.succeeded, reason, error_class="none")
        return records.through_gate(
            stop,
            evaluator="none",
            policy=Policy().model_dump(mode="json"),
            binding_points=None,
            final=self.given_round(provenance),
        )

    def test_a_critic_pass_of_a_given_text_is_an_escalation(self):
        stop, shipped_by = self.through(StopReason.critic_pass)
        assert (stop.status, shipped_by) == (RunStatus.escalated, None)
        assert "ships only when a person approves it" in stop.detail

    def test_a_person_s_approval_ships_it(self):
        stop, shipped_by = self.through(StopReason.review_approved)
        assert (stop.status, shipped_by) == (RunStatus.succeeded, ShippedBy.person)

    def test_the_same_pass_of_the_actor_s_version_ships(self):
        stop, _ = self.through(StopReason.critic_pass, provenance="actor")
        assert stop.status is RunStatus.succeeded

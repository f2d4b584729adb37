"""AppTest: what became of a reviewer's points (the Actor's answer and the Critic's check per
point, with links to their rounds), the lease renewed while the reviewer works, the queue's
next item one key away, and one name per review kind."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from console.client import ApiError
from console.view import renew_due
from tests.ui.fakes import FakeClient, review_item
from tests.ui.test_app import all_text, assert_clean, make_app
from tests.ui.test_review import open_review

POINTS = ["Mention the Moon.", "Say why there are two tides a day."]


class CommentedFake(FakeClient):
    """rev-1 (round 2) was answered with two points; the run then made round 3."""

    rounds: list[dict[str, Any]]

    def get_review(self, review_id: str) -> dict:
        detail = super().get_review(review_id)
        if review_id == "rev-1":
            detail.update(
                status="resolved",
                decision={
                    "action": "comment",
                    "author": "ana",
                    "at": datetime.now(UTC).isoformat(),
                    "points": POINTS,
                    "comment": "\n".join(POINTS),
                },
            )
        return detail

    def get_run(self, run_id: str) -> dict:
        run = super().get_run(run_id)
        run.update(rounds=self.rounds, status=self.status)
        return run

    status = "critiquing"


def revised(*, checked: bool) -> list[dict[str, Any]]:
    third: dict[str, Any] = {
        "number": 3,
        "output": "The Moon pulls the sea. Two bulges: two tides.",
        "responses": [
            {"point": POINTS[0], "action": "applied", "where": "The Moon pulls the sea."},
            {"point": POINTS[1], "action": "applied", "where": "Two bulges: two tides."},
        ],
        "critique": None,
    }
    if checked:
        third["critique"] = {
            "verdict": "revise",
            "confidence": 0.8,
            "issues": [],
            "binding_checks": [
                {"point": POINTS[0], "satisfied": True, "quote": "The Moon pulls the sea."},
                {"point": POINTS[1], "satisfied": False, "quote": None},
            ],
        }
    return [{"number": 2, "output": "Rivers run"}, third]


def open_resolved(fake: CommentedFake) -> Any:
    at = make_app(fake)
    at.query_params["review"] = "rev-1"
    at.run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


class TestWhatBecameOfThePoints:
    def test_each_point_shows_the_actors_answer_and_the_critics_check(self):
        fake = CommentedFake()
        fake.rounds, fake.status = revised(checked=True), "awaiting_review"
        at = open_resolved(fake)
        text = all_text(at)
        assert "What became of your points" in text
        assert "The Actor applied it in round 3, at “The Moon pulls the sea.”." in text
        assert "The Critic found it applied in round 3: “The Moon pulls the sea.”." in text
        assert "The Critic found it NOT applied in round 3." in text
        links = at.get("page_link")
        assert {(link.proto.page, link.proto.query_string) for link in links} >= {
            ("runs", "run=run-1&round=3")
        }

    def test_before_the_critic_checks_the_page_says_what_is_pending(self):
        fake = CommentedFake()
        fake.rounds, fake.status = revised(checked=False), "critiquing"
        at = open_resolved(fake)
        text = all_text(at)
        assert "critiquing" in text
        assert text.count("The Critic has not checked it yet.") == 2
        # the run moves on: the next look (the fragment's timer in a browser) shows the checks
        fake.rounds, fake.status = revised(checked=True), "awaiting_review"
        at.run()
        assert_clean(at)
        assert "The Critic found it applied in round 3" in all_text(at)

    def test_the_runs_timeline_shows_the_same_per_point(self):
        fake = CommentedFake()
        fake.rounds, fake.status = revised(checked=True), "awaiting_review"
        at = make_app(fake)
        at.query_params["run"] = "run-1"
        at.run()
        at.switch_page("views/runs.py").run()
        assert_clean(at)
        text = all_text(at)
        assert "The Actor applied it in round 3, at “Two bulges: two tides.”." in text
        assert "The Critic found it NOT applied in round 3." in text


class TestTheClaimRenews:
    def test_renews_near_the_end_of_the_lease_while_the_reviewer_is_active(self):
        soon = (datetime.now(UTC) + timedelta(seconds=60)).isoformat()
        later = (datetime.now(UTC) + timedelta(seconds=250)).isoformat()
        now = time.time()
        assert renew_due(soon, active_at=now - 60, now=now)
        assert not renew_due(later, active_at=now - 60, now=now)  # not yet
        assert not renew_due(soon, active_at=now - 3600, now=now)  # the reviewer left
        lapsed = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
        assert not renew_due(lapsed, active_at=now, now=now)  # lapsed: claim again by hand

    def test_the_page_renews_a_lease_that_nears_its_end(self):
        fake = FakeClient([review_item("rev-1")])
        at = open_review(fake)
        at.button(key="review-claim").click().run()
        fake.reviews["rev-1"]["lease_expires_at"] = (
            datetime.now(UTC) + timedelta(seconds=30)
        ).isoformat()
        at.run()
        assert_clean(at)
        assert len(fake.called("claim")) == 2  # the claim, then the renewal
        assert any("it renews while you work on it" in c.value for c in at.caption)


class TestNextItem:
    def test_next_opens_the_queues_next_item(self):
        fake = FakeClient([review_item("rev-1"), review_item("rev-2")])
        at = open_review(fake)
        assert at.button(key="go-previous").disabled
        at.button(key="go-next").click().run()
        assert_clean(at)
        assert at.session_state["review_id"] == "rev-2"
        assert at.query_params["review"] == "rev-2"
        assert at.button(key="go-next").disabled  # the last one

    def test_send_and_open_next_decides_then_opens_the_next_item(self):
        fake = FakeClient([review_item("rev-1"), review_item("rev-2"), review_item("rev-3")])
        at = open_review(fake)
        at.button(key="review-claim").click().run()
        at.radio(key="decision-action").set_value("approve").run()
        at.button(key="decision-submit-next").click().run()
        assert_clean(at)
        ((args, kwargs),) = fake.called("decide")
        assert (args, kwargs["action"]) == (("rev-1",), "approve")
        assert at.session_state["review_id"] == "rev-2"  # the next in the queue's order
        assert at.query_params["review"] == "rev-2"
        said = " ".join(t.value for t in at.toast)
        assert "You approved the output." in said
        assert "Opened the next item." in said

    def test_send_and_open_next_on_the_last_item_stays_and_says_so(self):
        fake = FakeClient([review_item("rev-1")])
        at = open_review(fake)
        at.button(key="review-claim").click().run()
        at.radio(key="decision-action").set_value("approve").run()
        at.button(key="decision-submit-next").click().run()
        assert_clean(at)
        assert len(fake.called("decide")) == 1
        assert at.session_state["review_id"] == "rev-1"
        assert "nothing else waiting" in " ".join(t.value for t in at.toast)

    def test_a_refused_send_and_next_stays_on_the_item(self):
        fake = FakeClient([review_item("rev-1"), review_item("rev-2")])
        fake.fail_decision = ApiError(409, "Conflict", "you do not hold the claim")
        at = open_review(fake)
        at.button(key="review-claim").click().run()
        at.radio(key="decision-action").set_value("approve").run()
        at.button(key="decision-submit-next").click().run()
        assert at.session_state["review_id"] == "rev-1"
        assert "you do not hold the claim" in at.error[0].value


class TestDecisionKeys:
    def test_alt_and_a_number_choose_the_decision_shown_there(self):
        fake = FakeClient([review_item("rev-1", kind="escalation")])
        at = open_review(fake)
        at.button(key="review-claim").click().run()
        said = at.radio(key="decision-action").help
        assert "Keys: Alt+1 comment · Alt+2 retry · Alt+3 approve · Alt+4 edit" in said
        assert at.button(key="decision-key-approve").proto.shortcut == "alt+3"
        at.button(key="decision-key-approve").click().run()
        assert_clean(at)
        assert at.radio(key="decision-action").value == "approve"
        at.button(key="decision-key-comment").click().run()
        assert at.radio(key="decision-action").value == "comment"


def test_the_page_names_the_kind_as_the_queue_does():
    fake = FakeClient([review_item("rev-1", round=1, reason="before_critique")])
    at = open_review(fake)
    text = all_text(at)
    assert "pre-critique (first round)" in text
    assert "before_critique" not in text
    assert "the policy pauses the run here, before the Critic reads this round" in text


class TestMyDecisions:
    def test_lists_the_reviewers_own_items_with_their_points_outcome(self):
        fake = CommentedFake(
            [review_item("rev-1", status="resolved"), review_item("rev-2", status="resolved")]
        )
        fake.rounds, fake.status = revised(checked=True), "awaiting_review"
        at = make_app(fake).run()
        at.switch_page("views/decisions.py").run()
        assert_clean(at)
        rows = at.dataframe[0].value.to_dict("records")
        assert len(rows) == 1  # rev-2 has no decision by ana
        assert rows[0]["open"] == "review?review=rev-1"
        assert rows[0]["decision"] == "commented (low confidence)"
        assert rows[0]["points"] == "1 of 2 applied"
        assert rows[0]["run"] == "awaiting review"

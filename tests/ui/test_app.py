"""AppTest: every page of the console renders and the review flow works against a fake client."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from console.client import ApiError
from tests.ui.fakes import FakeClient, review_item

APP = Path(__file__).resolve().parents[2] / "ui" / "console" / "app.py"


def make_app(fake: FakeClient, *, token: str | None = "tok-123", **state) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=20)
    at.session_state["client"] = fake
    if token:
        at.session_state["token"] = token
        at.session_state["user"] = {"name": "ana", "role": "reviewer"}
    for key, value in state.items():
        at.session_state[key] = value
    return at


def all_text(at: AppTest) -> str:
    parts: list[str] = []
    for kind in ("markdown", "text", "caption", "code", "title", "subheader", "info"):
        parts.extend(str(e.value) for e in getattr(at, kind))
    return "\n".join(parts)


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


# ---------------------------------------------------------------- login
def test_login_page_when_no_token():
    fake = FakeClient()
    at = make_app(fake, token=None).run()
    assert_clean(at)
    assert at.title[0].value == "Crosscheck reviewer console"
    assert at.get_by_key("login-username") is not None


def test_password_login_keeps_token_in_session_only():
    fake = FakeClient()
    at = make_app(fake, token=None).run()
    at.text_input(key="login-username").input("ana")
    at.text_input(key="login-password-input").input("wrong")
    at.button(key="login-submit").click().run()  # the password form's submit button
    assert_clean(at)
    assert "bad username or password" in at.error[0].value
    assert "token" not in at.session_state

    at.text_input(key="login-password-input").input("secret")
    at.button(key="login-submit").click().run()
    assert_clean(at)
    assert at.session_state["token"] == "tok-123"
    assert fake.token == "tok-123"
    assert at.title[0].value == "Review queue"
    assert "tok-123" not in all_text(at)


def test_token_login_is_checked_against_the_api():
    fake = FakeClient()
    at = make_app(fake, token=None).run()
    at.text_input(key="login-token-input").input("bad-token")
    at.button(key="token-submit").click().run()
    assert "unknown token" in at.error[0].value
    at.text_input(key="login-token-input").input("good-token")
    at.button(key="token-submit").click().run()
    assert_clean(at)
    assert at.session_state["token"] == "good-token"
    assert at.title[0].value == "Review queue"


def test_logout_forgets_the_token():
    at = make_app(FakeClient()).run()
    at.button(key="logout").click().run()
    assert_clean(at)
    assert "token" not in at.session_state
    assert at.title[0].value == "Crosscheck reviewer console"


# ---------------------------------------------------------------- pages open
@pytest.mark.parametrize(
    ("page", "title"),
    [("views/queue.py", "Review queue"), ("views/review.py", "Review"), ("views/runs.py", "Runs")],
)
def test_every_page_opens(page, title):
    at = make_app(FakeClient(), review_id="rev-1").run()
    at.switch_page(page).run()
    assert_clean(at)
    assert at.title[0].value == title


def test_review_page_without_item_points_to_queue():
    at = make_app(FakeClient()).run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    assert "Claim an item" in at.info[0].value


def test_runs_page_shows_a_timeline():
    fake = FakeClient()
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    assert_clean(at)
    assert fake.called("get_run") == [(("run-1",), {})]
    assert any(e.label == "Round 1" for e in at.expander)
    at.selectbox(key="runs-status").set_value("succeeded").run()
    assert fake.called("list_runs")[-1][1] == {"status": "succeeded"}


# ---------------------------------------------------------------- queue
def test_queue_lists_items_and_refreshes_only_on_events():
    fake = FakeClient([review_item("rev-1"), review_item("rev-2", kind="escalation")])
    at = make_app(fake).run()
    assert_clean(at)
    text = all_text(at)
    assert "Write a haiku about rivers" in text
    assert at.button(key="claim-rev-1")
    assert at.button(key="claim-rev-2")
    loads = len(fake.called("list_reviews"))
    assert loads == 2  # pending + claimed

    at.run()  # no new event: the list is not read again
    assert len(fake.called("list_reviews")) == loads

    fake.reviews["rev-3"] = review_item("rev-3", task="Summarise the report")
    fake.seq += 1
    at.run()
    assert len(fake.called("list_reviews")) == loads + 2
    assert at.button(key="claim-rev-3")
    assert "Summarise the report" in all_text(at)


def test_claim_opens_the_review_page():
    fake = FakeClient()
    at = make_app(fake).run()
    at.button(key="claim-rev-1").click().run()
    assert_clean(at)
    assert fake.called("claim") == [(("rev-1",), {})]
    assert at.session_state["review_id"] == "rev-1"
    assert at.title[0].value == "Review"


def test_claim_conflict_is_shown():
    fake = FakeClient()

    def taken(review_id, lease_s=300):
        raise ApiError(409, "Conflict", "claimed by bob")

    fake.claim = taken  # type: ignore[method-assign]
    at = make_app(fake).run()
    at.button(key="claim-rev-1").click().run()
    assert_clean(at)
    assert "claimed by bob" in at.error[0].value
    assert at.title[0].value == "Review queue"


# ---------------------------------------------------------------- review
def open_review(fake: FakeClient, review_id: str = "rev-1") -> AppTest:
    fake.claim(review_id)
    at = make_app(fake, review_id=review_id).run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def test_review_shows_context():
    at = open_review(FakeClient())
    html = "\n".join(e.value for e in at.markdown)
    # the critic's quote is marked, and the output's own markup is escaped
    assert "<mark>stones &lt;b&gt;remember&lt;/b&gt; water</mark>" in html
    text = all_text(at)
    assert "use seven syllables" in text
    assert "syllables 5-6-5" in text
    assert "🧑 human" in text
    assert any("+stones <b>remember</b> water" in c.value for c in at.code)  # the diff
    assert "left" in at.caption[0].value or any("Lease" in c.value for c in at.caption)


def test_comment_decision_is_sent_with_an_idempotency_key():
    fake = FakeClient()
    at = open_review(fake)
    assert at.radio(key="decision-action").options == ["comment", "approve", "edit", "reject"]
    at.radio(key="decision-action").set_value("comment")
    at.text_area(key="decision-comment").input("Count the syllables again.")
    at.button(key="decision-submit").click().run()  # the form's one submit button
    assert_clean(at)
    ((args, kwargs),) = fake.called("decide")
    assert args == ("rev-1",)
    assert kwargs["action"] == "comment"
    assert kwargs["comment"] == "Count the syllables again."
    assert kwargs["idempotency_key"] == at.session_state["idem-rev-1"]
    assert "Decision 'comment' recorded" in at.success[0].value
    assert not at.get("form")  # resolved: no second form


def test_a_comment_can_become_a_scoped_lesson():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("comment")
    at.text_area(key="decision-comment").input("Syllables first, imagery second.")
    at.checkbox(key="decision-lesson").check()
    at.text_input(key="decision-scope").input("poetry")
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    ((_, kwargs),) = fake.called("decide")
    assert kwargs["lesson"] is True
    assert kwargs["lesson_scope"] == "poetry"


def test_a_lesson_needs_a_comment():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("approve")
    at.checkbox(key="decision-lesson").check()
    at.button(key="decision-submit").click().run()
    assert "lesson is made from the comment" in at.error[0].value
    assert fake.called("decide") == []


def test_comment_without_text_is_not_sent():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("comment")
    at.button(key="decision-submit").click().run()
    assert "needs the comment text" in at.error[0].value
    assert fake.called("decide") == []


def test_refused_decision_shows_the_detail_and_gets_a_new_key():
    fake = FakeClient()
    fake.fail_decision = ApiError(409, "Conflict", "you do not hold the claim")
    at = open_review(fake)
    first_key = at.session_state["idem-rev-1"]
    at.radio(key="decision-action").set_value("approve")
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    assert "you do not hold the claim" in at.error[0].value
    assert fake.called("decide")[0][1]["idempotency_key"] == first_key
    assert at.session_state["idem-rev-1"] != first_key


def test_edit_decision_sends_the_edited_output():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("edit")
    at.text_area(key="decision-output").input("A better haiku")
    at.checkbox(key="decision-finish").check()
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    kwargs = fake.called("decide")[0][1]
    assert (kwargs["action"], kwargs["output"], kwargs["finish"]) == (
        "edit",
        "A better haiku",
        True,
    )


def test_escalation_offers_retry_with_rounds():
    fake = FakeClient([review_item("esc-1", kind="escalation")])
    at = open_review(fake, "esc-1")
    assert at.radio(key="decision-action").options == ["retry", "approve", "edit", "reject"]
    assert "max_rounds" in all_text(at)
    at.radio(key="decision-action").set_value("retry")
    at.number_input(key="decision-rounds").set_value(3)
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    kwargs = fake.called("decide")[0][1]
    assert (kwargs["action"], kwargs["rounds"]) == ("retry", 3)


def test_release_returns_to_the_queue():
    fake = FakeClient()
    at = open_review(fake)
    at.button(key="release").click().run()
    assert_clean(at)
    assert fake.called("release") == [(("rev-1",), {})]
    assert "review_id" not in at.session_state
    assert at.title[0].value == "Review queue"

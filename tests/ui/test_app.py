"""AppTest: every page of the console renders and the review flow works against a fake client."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from console.client import ApiError
from console.server import SESSION_COOKIES
from tests.ui.fakes import (
    EMPTY_STATS,
    FakeClient,
    evaluation_body,
    evaluation_mode,
    intercept_body,
    lesson,
    provider,
    review_item,
    run_detail,
    run_summary,
    stats_body,
)

APP = Path(__file__).resolve().parents[2] / "ui" / "console" / "main.py"
# A bound on one script run, not a time it should take: a page renders in well under a second
# alone, but the first run imports the console and a loaded machine stretches that many times.
SCRIPT_TIMEOUT_S = 120


def make_app(fake: FakeClient, *, token: str | None = "tok-123", **state) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=SCRIPT_TIMEOUT_S)
    at.session_state["client"] = fake
    if token:
        at.session_state["token"] = token
        at.session_state["user"] = {"name": "ana", "role": "reviewer", "id": "tok_ana"}
    for key, value in state.items():
        at.session_state[key] = value
    return at


def shown(source: str) -> str:
    """What a reader sees of text that went through ``md_literal``: its backslash escapes
    read and the invisible word joiners dropped (the console's own Markdown is left as is)."""
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", source)
    return text.replace("\u2060", "").replace("\u00a0", " ")


def all_text(at: AppTest) -> str:
    parts: list[str] = []
    for kind in ("markdown", "text", "caption", "code", "title", "subheader", "info"):
        parts.extend(shown(str(e.value)) for e in getattr(at, kind))
    return "\n".join(parts)


def has_key(at: AppTest, key: str) -> bool:
    try:
        at.get_by_key(key)
    except KeyError:
        return False
    return True


def linked(at: AppTest) -> set[str]:
    """The query strings of the queue table's links to the Review page."""
    return {url.split("?", 1)[1] for url in table(at)["open"]}


def table(at: AppTest, which: str | int = 0) -> dict[str, list]:
    """A st.dataframe's columns (by key if it has a selection, else by position), as lists
    (missing values as None)."""
    if isinstance(which, int):
        frame = at.dataframe[which]
    else:
        [frame] = [d for d in at.dataframe if d.key == which]
    data = frame.value
    return {
        name: [None if v is None or v != v else v for v in data[name].tolist()] for name in data
    }


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
    assert "bad username or password" in shown(at.error[0].value)
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
    assert "unknown token" in shown(at.error[0].value)
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
PAGES = [
    ("views/queue.py", "Review queue"),
    ("views/review.py", "Review"),
    ("views/decisions.py", "My decisions"),
    ("views/escalations.py", "Escalations"),
    ("views/runs.py", "Runs"),
    ("views/lessons.py", "Lessons"),
    ("views/datasets.py", "Datasets"),
    ("views/knowledge.py", "Knowledge"),
    ("views/metrics.py", "Metrics"),
]


@pytest.mark.parametrize(("page", "title"), PAGES)
def test_every_page_opens(page, title):
    fake = FakeClient(lessons=[lesson()])
    at = make_app(fake, review_id="rev-1").run()
    at.switch_page(page).run()
    assert_clean(at)
    assert at.title[0].value == title
    assert not at.error


@pytest.mark.parametrize(("page", "title"), PAGES)
def test_every_page_opens_with_nothing_to_show(page, title):
    fake = FakeClient(runs=[], stats=EMPTY_STATS)
    fake.reviews.clear()
    at = make_app(fake).run()
    at.switch_page(page).run()
    assert_clean(at)
    assert at.title[0].value == title
    assert not at.error


UNREACHABLE = ApiError(0, "Unreachable", "http://orch: ConnectError")


def unreachable_client() -> FakeClient:
    """A client whose every call finds no orchestrator."""
    fake = FakeClient()

    def unreachable(*args, **kwargs):
        raise UNREACHABLE

    for name in (
        "events",
        "list_reviews",
        "get_review",
        "get_run",
        "list_runs",
        "list_lessons",
        "list_knowledge",
        "search_knowledge",
        "get_knowledge",
        "stats",
        "who_am_i",
        "login",
        "info",
    ):
        setattr(fake, name, unreachable)
    return fake


# the Datasets page reads nothing until asked to export (tests/ui/test_judgements.py)
READING_PAGES = [(page, title) for page, title in PAGES if page != "views/datasets.py"]


@pytest.mark.parametrize(("page", "title"), READING_PAGES)
def test_every_page_shows_an_unreachable_api(page, title):
    at = make_app(unreachable_client(), review_id="rev-1").run()
    at.switch_page(page).run()
    assert_clean(at)
    assert at.title[0].value == title
    assert "http://orch: ConnectError" in shown(at.error[0].value)


def test_the_login_says_when_the_api_is_unreachable():
    at = make_app(unreachable_client(), token=None).run()
    at.text_input(key="login-username").input("ana")
    at.text_input(key="login-password-input").input("secret")
    at.button(key="login-submit").click().run()
    assert_clean(at)
    assert "token" not in at.session_state
    assert shown(at.error[0].value) == "Login failed: http://orch: ConnectError"


def test_review_page_without_item_points_to_queue():
    at = make_app(FakeClient()).run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    assert "Open an item in the queue" in shown(at.info[0].value)


def select_row(at: AppTest, key: str, row: int) -> AppTest:
    at.session_state[key] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    return at.run()


def test_runs_page_shows_a_timeline():
    fake = FakeClient()
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    assert_clean(at)
    assert fake.called("get_run") == []  # nothing chosen yet
    assert "Select a run in the table" in all_text(at)
    select_row(at, "runs-table", 0)
    assert_clean(at)
    assert fake.called("get_run") == [(("run-1",), {})]
    assert any(e.label.startswith("Round 1") for e in at.expander)
    at.selectbox(key="runs-status").set_value("succeeded").run()
    assert fake.called("list_runs")[-1][1] == {"status": "succeeded", "q": None}


# ---------------------------------------------------------------- queue
def test_queue_lists_items_and_refreshes_only_on_events():
    fake = FakeClient([review_item("rev-1"), review_item("rev-2", kind="escalation")])
    at = make_app(fake).run()
    assert_clean(at)
    assert set(table(at)["task"]) == {"Write a haiku about rivers"}
    assert linked(at) == {"review=rev-1", "review=rev-2"}
    loads = len(fake.called("list_reviews"))
    assert loads == 2  # pending + claimed

    at.run()  # no new event: the list is not read again
    assert len(fake.called("list_reviews")) == loads

    fake.reviews["rev-3"] = review_item("rev-3", task="Summarise the report")
    fake.seq += 1
    at.run()
    assert len(fake.called("list_reviews")) == loads + 2
    assert "review=rev-3" in linked(at)
    assert "Summarise the report" in table(at)["task"]


def test_the_queue_polls_at_the_live_pace_only_once_it_moves():
    """Each poll reruns the list, about 40-85 ms of the console's CPU: a quiet queue is polled
    every IDLE_S, one that moves every LIVE_S (bench/queue_tab.py measures both)."""
    fake = FakeClient([review_item("rev-1")])
    at = make_app(fake).run()
    assert_clean(at)
    assert "queue_changed_at" not in at.session_state  # opening it is no sign of movement
    at.run()
    assert "queue_changed_at" not in at.session_state

    fake.reviews["rev-2"] = review_item("rev-2", task="Summarise the report")
    fake.seq += 1
    at.run()
    assert_clean(at)
    assert "queue_changed_at" in at.session_state  # the page reruns at the live pace
    assert "Summarise the report" in table(at)["task"]


def test_queue_shows_what_happens_at_the_deadline():
    fake = FakeClient([review_item("rev-1", on_expiry="escalate")])
    at = make_app(fake).run()
    assert_clean(at)
    [deadline] = table(at)["deadline"]
    assert deadline.startswith("soon: in 4 min")
    assert deadline.endswith(", then escalate")


def test_queue_table_says_what_each_item_is_in_plain_words():
    from datetime import UTC, datetime, timedelta

    day = (datetime.now(UTC) + timedelta(hours=23, minutes=59)).isoformat()
    fake = FakeClient(
        [
            review_item("rev-1", round=1, reason="before_critique", confidence=None),
            review_item("rev-2", round=3, reason="before_critique", confidence=0.8),
            review_item("rev-3", reason="low_confidence", confidence=0.42, on_expiry="continue"),
            review_item(
                "esc-1", kind="escalation", reason="max_rounds", confidence=0.3, deadline=None
            ),
            review_item(
                "rev-4",
                status="claimed",
                claimed_by="tok_1",
                claimed_by_name="bob",
                deadline=day,
                on_expiry="continue",
                reason="before_critique",
            ),
        ]
    )
    at = make_app(fake).run()
    assert_clean(at)
    rows = table(at)
    by_item = {url.split("=", 1)[1]: i for i, url in enumerate(rows["open"])}
    kinds = {key: rows["kind"][i] for key, i in by_item.items()}
    assert kinds == {
        "esc-1": "escalation: max_rounds",
        "rev-1": "pre-critique (first round)",
        "rev-2": "pre-critique (every round)",
        "rev-3": "low confidence",
        "rev-4": "pre-critique (every round)",
    }
    assert rows["open"][0] == "review?review=esc-1"  # escalations first
    conf = {key: rows["confidence"][i] for key, i in by_item.items()}
    assert conf == {"esc-1": 0.3, "rev-1": None, "rev-2": 0.8, "rev-3": 0.42, "rev-4": None}
    assert rows["deadline"][by_item["esc-1"]] == "none: waits for a person"
    assert rows["deadline"][by_item["rev-4"]] == "in 23 h, then continue with the AI critic"
    assert rows["claimed_by"][by_item["rev-4"]] == "bob"
    assert (
        rows["claimed_by"][by_item["rev-1"]] is None or rows["claimed_by"][by_item["rev-1"]] == ""
    )
    assert rows["waiting"][by_item["rev-1"]] == "2 min"
    assert rows["task"][0] == "Write a haiku about rivers"
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["confidence"]["type_config"]["type"] == "progress"
    assert config["open"]["type_config"]["type"] == "link"


def test_queue_rows_link_to_their_review_page():
    fake = FakeClient([review_item("rev-1"), review_item("rev-2", kind="escalation")])
    at = make_app(fake).run()
    assert_clean(at)
    assert linked(at) == {"review=rev-1", "review=rev-2"}
    assert not at.get("page_link")  # no second "Open..." link beside the table


def test_selecting_a_queue_row_opens_its_review_page():
    fake = FakeClient([review_item("rev-1"), review_item("rev-2", kind="escalation")])
    at = make_app(fake).run()
    # the escalation sorts first: the second row is rev-1
    at.session_state["queue-table"] = {"selection": {"rows": [1], "columns": [], "cells": []}}
    at.run()
    assert_clean(at)
    assert at.title[0].value == "Review"
    assert at.session_state["review_id"] == "rev-1"
    assert at.query_params["review"] == "rev-1"
    assert fake.called("claim") == []  # opening is not claiming


def test_the_reviewer_picks_the_queue_columns():
    fake = FakeClient([review_item("rev-1", deadline=None)])
    at = make_app(fake).run()
    # by default every column but the long deadline words: they fit at 1280 px
    assert at.multiselect(key="queue-columns").value == [
        "kind",
        "task",
        "round",
        "claimed_by",
        "confidence",
        "waiting",
    ]
    at.multiselect(key="queue-columns").set_value(["task", "deadline"]).run()
    assert_clean(at)
    [frame] = [d for d in at.dataframe if d.key == "queue-table"]
    order = list(frame.proto.column_order)
    assert order == ["open", "task", "deadline"]


def open_by_link(fake: FakeClient, review_id: str = "rev-1") -> AppTest:
    """What following a queue row's link does: the Review page with ?review=<id>."""
    at = make_app(fake)
    at.query_params["review"] = review_id
    at.run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def test_a_pending_item_is_claimed_on_its_review_page():
    fake = FakeClient()
    at = open_by_link(fake)
    assert at.session_state["review_id"] == "rev-1"
    assert "Claim this item to decide it" in shown(at.info[0].value)
    assert not at.get("form")  # nothing to decide before the claim
    at.button(key="review-claim").click().run()
    assert_clean(at)
    assert fake.called("claim") == [(("rev-1",), {})]
    assert at.title[0].value == "Review"
    assert at.get("form")  # claimed: the decision form is there
    assert any("You hold this item for" in c.value for c in at.caption)  # the holder's view
    assert "tok_ana" not in all_text(at)  # never the token id
    assert at.radio(key="decision-action").options == ["comment", "approve", "edit", "reject"]


def test_a_click_sent_with_the_cookie_confirmation_still_acts():
    """Just after a login the browser confirms the session cookie; a click the reviewer made
    meanwhile travels in the same message and must act (a rerun on the confirmation dropped
    it, and the Claim button did nothing)."""
    fake = FakeClient()
    at = open_by_link(fake)
    at.session_state["cookie"] = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    ticket = SESSION_COOKIES.set({"crosscheck_session": "tok-123"}, 3600)
    at.session_state["cookie-ticket"] = ticket
    assert SESSION_COOKIES.redeem(ticket)  # the browser posted it: the cookie is written
    at.button(key="review-claim").click().run()
    assert_clean(at)
    assert fake.called("claim") == [(("rev-1",), {})]
    assert at.get("form")  # the decision form is there
    with pytest.raises(KeyError):
        at.session_state["cookie"]  # the cookie is written: its script is gone for good
    assert not [h for h in at.get("html") if ticket in str(h.proto.body)]


def test_claim_conflict_is_shown():
    fake = FakeClient()

    def taken(review_id, lease_s=300):
        raise ApiError(409, "Conflict", "claimed by bob")

    fake.claim = taken  # type: ignore[method-assign]
    at = open_by_link(fake)
    at.button(key="review-claim").click().run()
    assert_clean(at)
    assert "claimed by bob" in shown(at.error[0].value)
    assert not at.get("form")


# ---------------------------------------------------------------- review
def open_review(fake: FakeClient, review_id: str = "rev-1") -> AppTest:
    fake.claim(review_id)
    at = make_app(fake, review_id=review_id).run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def test_review_shows_context():
    at = open_review(FakeClient())
    html = "\n".join(e.value for e in at.html)
    # the critic's quote is marked and numbered, and the output's own markup is escaped
    assert '<sup class="cc-q">1</sup>stones &lt;b&gt;remember&lt;/b&gt; water</mark>' in html
    text = all_text(at)
    assert "use seven syllables" in text
    assert "syllables 5-6-5" in text
    assert "person (ana)" in text
    assert any("+stones <b>remember</b> water" in c.value for c in at.code)  # the diff
    assert any('class="diff_chg"' in h.value or 'class="diff_add"' in h.value for h in at.html)
    assert any("You hold this item for" in c.value for c in at.caption)


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
    assert kwargs["points"] == ["Count the syllables again."]
    assert shown(at.success[0].value) == (
        "Your comment is recorded. The run continues: the Actor revises next."
    )
    assert not at.get("form")  # resolved: no second form


def test_a_comment_can_become_a_scoped_lesson():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("comment").run()
    at.text_area(key="decision-comment").input("Syllables first, imagery second.")
    at.checkbox(key="decision-lesson").check()
    at.text_input(key="decision-scope").input("poetry")
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    ((_, kwargs),) = fake.called("decide")
    assert kwargs["lesson"] is True
    assert kwargs["lesson_scope"] == "poetry"


def test_only_a_comment_offers_a_lesson():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("approve").run()
    assert not has_key(at, "decision-lesson")
    at.radio(key="decision-action").set_value("comment").run()
    assert has_key(at, "decision-lesson")


def test_reject_without_a_reason_is_not_sent():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("reject").run()
    at.button(key="decision-submit").click().run()
    assert "A reject needs the reason" in shown(at.error[0].value)
    assert not fake.called("decide")


def test_a_comment_over_the_point_limit_is_not_sent_and_says_the_limit():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("comment").run()
    at.text_area(key="decision-comment").input("\n".join(f"- point {n}" for n in range(21)))
    at.button(key="decision-submit").click().run()
    assert "at most 20 points; this one has 21" in shown(at.error[0].value)
    assert fake.called("decide") == []
    at.text_area(key="decision-comment").input("\n".join(f"- point {n}" for n in range(20)))
    at.button(key="decision-submit").click().run()  # the boundary: sent whole
    assert_clean(at)
    assert fake.called("decide")[0][1]["points"] == [f"point {n}" for n in range(20)]


def test_a_point_over_the_length_limit_is_not_sent_or_cut():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("comment").run()
    at.text_area(key="decision-comment").input("Keep it short.\n" + "x" * 2001)
    at.button(key="decision-submit").click().run()
    assert "at most 2000 characters" in shown(at.error[0].value)
    assert fake.called("decide") == []


def test_comment_without_text_is_not_sent():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("comment").run()
    at.button(key="decision-submit").click().run()
    assert "A comment needs at least one point" in shown(at.error[0].value)
    assert fake.called("decide") == []


def test_refused_decision_shows_the_detail_and_gets_a_new_key():
    fake = FakeClient()
    fake.fail_decision = ApiError(409, "Conflict", "you do not hold the claim")
    at = open_review(fake)
    first_key = at.session_state["idem-rev-1"]
    at.radio(key="decision-action").set_value("approve").run()
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    assert "you do not hold the claim" in shown(at.error[0].value)
    assert fake.called("decide")[0][1]["idempotency_key"] == first_key
    assert at.session_state["idem-rev-1"] != first_key


def test_edit_decision_sends_the_edited_output():
    fake = FakeClient()
    at = open_review(fake)
    at.radio(key="decision-action").set_value("edit").run()
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
    options = ["comment", "retry", "approve", "edit", "reject"]
    assert at.radio(key="decision-action").options == options
    assert "max_rounds" in all_text(at)
    at.radio(key="decision-action").set_value("retry").run()
    at.number_input(key="decision-rounds").set_value(3)
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    kwargs = fake.called("decide")[0][1]
    assert (kwargs["action"], kwargs["rounds"]) == ("retry", 3)


def test_release_puts_the_item_back_and_stays_on_it():
    fake = FakeClient()
    at = open_review(fake)
    at.button(key="release").click().run()
    assert_clean(at)
    assert fake.called("release") == [(("rev-1",), {})]
    assert at.title[0].value == "Review"  # no page switch while the lease countdown ticks
    assert "status **pending**" in all_text(at)
    assert at.button(key="review-claim")  # anyone, this reviewer included, can claim it again
    assert not at.get("form")


# ---------------------------------------------------------------- runs search
def test_runs_search_filters_what_is_listed():
    fake = FakeClient(
        runs=[
            run_summary("run-2", task="Explain ocean tides", status="succeeded"),
            run_summary("run-1", task="Write a haiku about rivers"),
        ]
    )
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    assert_clean(at)
    assert list(at.dataframe[0].value["run"]) == ["run-2", "run-1"]

    at.text_input(key="runs-q").input("  TIDES ").run()
    assert_clean(at)
    assert fake.called("list_runs")[-1][1] == {"status": None, "q": "TIDES"}
    assert list(at.dataframe[0].value["task"]) == ["Explain ocean tides"]

    at.text_input(key="runs-q").input("run-1").run()
    assert list(at.dataframe[0].value["run"]) == ["run-1"]

    at.text_input(key="runs-q").input("volcanoes").run()
    assert_clean(at)
    assert not at.dataframe
    assert shown(at.info[0].value) == "No runs match “volcanoes”."

    at.text_input(key="runs-q").input("").run()
    assert fake.called("list_runs")[-1][1] == {"status": None, "q": None}
    assert len(at.dataframe[0].value) == 2


def runs_fake() -> FakeClient:
    fake = FakeClient(
        [review_item("rev-8", status="resolved", round=1, reason="before_critique")],
        runs=[
            run_summary("run_0187aaaabbbbcccc11112222333344445555", task="Explain tides"),
            run_summary("run-1", status="succeeded", kind="code", stop_reason="human_approved"),
        ],
    )
    detail = run_detail("run-1")

    def get_run(run_id):
        fake._log("get_run", run_id)
        return detail if run_id == "run-1" else FakeClient.get_run(fake, run_id)

    def get_review(review_id):
        fake._log("get_review", review_id)
        decision = {"action": "comment", "author": "ana", "comment": "use the + operator"}
        return {**fake.reviews[review_id], "context": {}, "decision": decision}

    fake.get_run = get_run  # type: ignore[method-assign]
    fake.get_review = get_review  # type: ignore[method-assign]
    return fake


def test_runs_table_fits_and_says_no_none():
    at = make_app(runs_fake()).run()
    at.switch_page("views/runs.py").run()
    assert_clean(at)
    rows = table(at, "runs-table")
    assert list(rows) == ["run", "status", "kind", "task", "rounds", "stop_reason", "updated"]
    assert rows["run"] == ["run_…44445555", "run-1"]  # short ids
    assert rows["stop_reason"] == ["", "human_approved"]
    assert "None" not in all_text(at)
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["updated"]["type_config"]["type"] == "datetime"
    # the full id of a chosen run is shown whole, in a copyable code block
    select_row(at, "runs-table", 0)
    assert_clean(at)
    assert "run_0187aaaabbbbcccc11112222333344445555" in [c.value for c in at.code]
    assert "None" not in all_text(at)


def test_a_run_chosen_in_the_table_shows_each_round_with_its_reflections_and_decision():
    fake = runs_fake()
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    select_row(at, "runs-table", 1)
    assert_clean(at)
    assert fake.called("get_run") == [(("run-1",), {})]
    labels = [e.label for e in at.expander]
    assert labels == [
        "Round 1 · critic: revise (0.35) · evaluation failed · ana commented",
        "Round 2 · edited by a person · evaluation passed",
    ]
    first, second = at.expander
    html = "\n".join(str(getattr(h, "value", "")) for h in first.get("html"))
    assert "return a - b" in html
    assert "cc-code" in html  # code kept as code, with line numbers
    tables = [d.value for d in first.dataframe]
    tests, issues, usage = tables
    assert list(tests["test"]) == ["test_add", "test_zero"]
    assert list(issues["suggestion"]) == ["add, do not subtract"]
    assert list(usage["role"]) == ["actor", "critic"]
    assert list(usage["cost"]) == ["$0.0012", "unpriced"]
    assert list(usage["latency"]) == ["0.85 s", "1.50 s"]
    texts = [t.value for t in first.text]
    assert "subtraction bug" in texts
    assert "use the + operator" in texts
    marks = "\n".join(m.value for m in first.markdown)
    assert "**Reflection** (human, ana):" in marks
    assert "**Human decision**: ana commented" in marks
    assert "**Edited by bob** (from round 1)" in "\n".join(m.value for m in second.markdown)
    assert "Reflection" not in "\n".join(m.value for m in second.markdown)
    assert "stopped: human_approved" in all_text(at)


def test_a_round_the_run_s_creator_gave_says_so_not_actor():
    fake = runs_fake()
    detail = run_detail("run-1")
    detail["rounds"][0]["provenance"] = "given"
    fake.get_run = lambda run_id: detail  # type: ignore[method-assign]
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    select_row(at, "runs-table", 1)
    assert_clean(at)
    first = at.expander[0]
    assert first.label.startswith("Round 1 · given by the run's creator · ")
    assert "**Given by the run's creator**" in "\n".join(m.value for m in first.markdown)


def test_a_run_named_in_the_link_opens_without_a_pick():
    fake = runs_fake()
    at = make_app(fake)
    at.query_params["run"] = "run-1"
    at.run()
    at.switch_page("views/runs.py").run()
    assert_clean(at)
    assert fake.called("get_run") == [(("run-1",), {})]


# ---------------------------------------------------------------- escalations
def escalations_fake() -> FakeClient:
    return FakeClient(
        [
            review_item("rev-1", task="A pre-critique item"),
            review_item(
                "esc-1",
                kind="escalation",
                run_id="run-esc-1",
                reason="max_rounds",
                task="Explain tides",
                deadline=None,
            ),
            review_item(
                "esc-2",
                kind="escalation",
                run_id="run-esc-2",
                status="claimed",
                claimed_by="bob",
                reason="converged",
                task="Summarise the report",
                deadline=None,
            ),
            review_item(
                "esc-3",
                kind="escalation",
                run_id="run-esc-3",
                status="resolved",
                reason="budget_exceeded",
                task="Translate the manual",
            ),
        ]
    )


def open_escalations(fake: FakeClient) -> AppTest:
    at = make_app(fake).run()
    at.switch_page("views/escalations.py").run()
    assert_clean(at)
    return at


def decided(fake: FakeClient) -> FakeClient:
    """esc-3 approved by carol; a fourth escalation expired undecided."""
    fake.reviews["esc-4"] = review_item(
        "esc-4", kind="escalation", run_id="run-esc-4", status="expired", reason="stalled"
    )
    plain = fake.get_review

    def get_review(review_id):
        body = plain(review_id)
        if review_id == "esc-3":
            body["decision"] = {"action": "approve", "author": "carol", "at": "2026-11-30T10:00Z"}
        return body

    fake.get_review = get_review  # type: ignore[method-assign]
    return fake


def test_escalations_show_open_items_first_then_settled_ones():
    fake = decided(escalations_fake())
    fake.reviews["esc-1"]["confidence"] = 0.25
    at = open_escalations(fake)
    assert [h.value for h in at.subheader] == ["Open (2)", "Recently settled"]
    live = table(at, "esc-open-table")
    assert live["open"] == ["review?review=esc-1", "review?review=esc-2"]
    assert live["run"] == ["runs?run=run-esc-1", "runs?run=run-esc-2"]  # full ids in the links
    assert live["task"] == ["Explain tides", "Summarise the report"]
    assert live["reason"] == ["max_rounds", "converged"]
    assert live["confidence"] == [0.25, None]
    assert live["deadline"] == ["none: waits for a person"] * 2
    assert live["claimed_by"] == ["", "bob"]
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["run"]["type_config"]["type"] == "link"
    settled = table(at, 1)
    assert set(settled["task"]) == {"Translate the manual", "Write a haiku about rivers"}
    pairs = zip(settled["decided"], settled["by"], strict=True)
    by_reason = dict(zip(settled["reason"], pairs, strict=True))
    assert by_reason == {
        "budget_exceeded": ("approved the output", "carol"),
        "stalled": ("expired: nobody decided in time", ""),
    }
    shown = {*live["task"], *settled["task"]}
    assert "A pre-critique item" not in shown  # the queue has those
    # nothing selected: no buttons yet
    assert not has_key(at, "esc-claim")
    kinds = {k.get("kind") for _, k in fake.called("list_reviews")}
    assert kinds == {None, "escalation"}  # None: the start page's queue
    # decisions are read once per resolved item, then kept
    at.run()
    assert fake.called("get_review") == [(("esc-3",), {})]


def test_a_claimed_escalation_can_only_be_opened():
    at = open_escalations(escalations_fake())
    select_row(at, "esc-open-table", 1)
    assert_clean(at)
    assert not has_key(at, "esc-claim")
    assert at.button(key="esc-open")


def test_an_escalation_opens_in_the_review_page_without_claiming():
    fake = escalations_fake()
    at = open_escalations(fake)
    select_row(at, "esc-open-table", 0)
    at.button(key="esc-open").click().run()
    assert_clean(at)
    assert at.title[0].value == "Review"
    assert at.session_state["review_id"] == "esc-1"
    assert fake.called("claim") == []
    assert "Stop reason: **max_rounds**" in all_text(at)


def test_claim_and_open_takes_the_escalation_to_a_decision():
    fake = escalations_fake()
    at = open_escalations(fake)
    select_row(at, "esc-open-table", 0)
    assert at.button(key="esc-claim").proto.label == "Claim and open"
    at.button(key="esc-claim").click().run()
    assert_clean(at)
    assert fake.called("claim") == [(("esc-1",), {})]
    assert at.title[0].value == "Review"
    options = ["comment", "retry", "approve", "edit", "reject"]
    assert at.radio(key="decision-action").options == options


def test_escalation_claim_conflict_stays_on_the_page():
    fake = escalations_fake()

    def taken(review_id, lease_s=300):
        raise ApiError(409, "Conflict", "claimed by carol")

    fake.claim = taken  # type: ignore[method-assign]
    at = open_escalations(fake)
    select_row(at, "esc-open-table", 0)
    at.button(key="esc-claim").click().run()
    assert_clean(at)
    assert at.title[0].value == "Escalations"
    assert "claimed by carol" in shown(at.error[0].value)


def test_no_escalations_says_so():
    at = open_escalations(FakeClient([review_item("rev-1")]))
    assert shown(at.info[0].value) == "No open escalations."
    assert "No settled escalations yet." in all_text(at)


# ---------------------------------------------------------------- lessons
def lessons_fake() -> FakeClient:
    return FakeClient(
        lessons=[
            lesson("les-1"),
            lesson("les-2", content="Cite NOAA for tide data.", scope="oceanography", uses=1),
            lesson("les-3", content="Old advice.", retired=True, author="bob"),
        ]
    )


def open_lessons(fake: FakeClient, **state) -> AppTest:
    at = make_app(fake, **state).run()
    at.switch_page("views/lessons.py").run()
    assert_clean(at)
    return at


def test_lessons_list_content_scope_author_uses_and_source_run():
    at = open_lessons(lessons_fake())
    text = all_text(at)
    assert "Count the syllables before submitting a haiku." in text
    assert "Cite NOAA for tide data." in text
    assert "Old advice." not in text  # active only by default
    assert "scope oceanography · by ana · used 1 time · from run run-1" in text
    assert "used 3 times" in text
    assert "2 lessons" in text


def test_lessons_filter_by_scope_and_retired():
    fake = lessons_fake()
    at = open_lessons(fake)
    at.text_input(key="lessons-scope").input("oceanography").run()
    assert_clean(at)
    assert fake.called("list_lessons")[-1][1] == {"scope": "oceanography", "include_retired": False}
    text = all_text(at)
    assert "Cite NOAA" in text
    assert "Count the syllables" not in text

    at.text_input(key="lessons-scope").input("").run()
    at.selectbox(key="lessons-show").set_value("retired").run()
    assert_clean(at)
    text = all_text(at)
    assert "Old advice." in text
    assert "**retired**" in text
    assert "Count the syllables" not in text
    assert not has_key(at, "retire-les-3")  # already retired

    at.selectbox(key="lessons-show").set_value("all").run()
    assert "3 lessons" in all_text(at)

    at.text_input(key="lessons-scope").input("nowhere").run()
    assert shown(at.info[0].value) == "No lessons in scope “nowhere”."


def test_retiring_a_lesson_asks_first_then_confirms():
    fake = lessons_fake()
    at = open_lessons(fake)
    at.button(key="retire-les-1").click().run()
    assert_clean(at)
    assert fake.called("retire_lesson") == []
    assert "Retire this lesson?" in shown(at.warning[0].value)

    at.button(key="retire-no-les-1").click().run()
    assert not at.warning
    assert fake.called("retire_lesson") == []

    at.button(key="retire-les-1").click().run()
    at.button(key="retire-yes-les-1").click().run()
    assert_clean(at)
    assert fake.called("retire_lesson") == [(("les-1",), {})]
    assert "Retired lesson les-1" in shown(at.success[0].value)
    assert "Count the syllables" not in all_text(at)  # gone from the active list
    assert "1 lesson" in all_text(at)


def test_a_refused_retire_shows_the_reason():
    fake = lessons_fake()
    fake.fail_retire = ApiError(403, "Forbidden", "this needs the role reviewer")
    at = open_lessons(fake)
    at.button(key="retire-les-2").click().run()
    at.button(key="retire-yes-les-2").click().run()
    assert_clean(at)
    assert "Could not retire: this needs the role reviewer" in shown(at.error[0].value)
    assert "Cite NOAA" in all_text(at)
    assert not at.warning


def test_service_tokens_cannot_retire():
    at = open_lessons(lessons_fake(), user={"name": "ci", "role": "service"})
    assert at.button(key="retire-les-1").disabled


def test_no_lessons_yet():
    at = open_lessons(FakeClient())
    assert shown(at.info[0].value) == "No lessons yet."
    for show in ("retired", "all"):
        at.selectbox(key="lessons-show").set_value(show).run()
        assert_clean(at)
        assert shown(at.info[0].value) == "No lessons yet."


def test_all_lessons_retired_is_not_no_lessons():
    fake = FakeClient(lessons=[lesson("les-1", retired=True), lesson("les-2", retired=True)])
    at = open_lessons(fake)
    assert shown(at.info[0].value) == (
        "No active lessons: all 2 lessons are retired. Show “Retired only” or “All” to read them."
    )
    at.selectbox(key="lessons-show").set_value("retired").run()
    assert_clean(at)
    assert "2 lessons" in all_text(at)
    assert not at.info


def test_no_retired_lessons_says_every_lesson_is_active():
    at = open_lessons(FakeClient(lessons=[lesson("les-1")]))
    at.selectbox(key="lessons-show").set_value("retired").run()
    assert_clean(at)
    assert shown(at.info[0].value) == "No retired lessons: every lesson is active."
    at.text_input(key="lessons-scope").input("poetry").run()
    assert shown(at.info[0].value) == "No retired lessons in scope “poetry”."


# ---------------------------------------------------------------- metrics
def charts(at: AppTest) -> list:
    return list(at.get("vega_lite_chart"))


def chart_rows(chart) -> list[dict]:
    from streamlit import dataframe_util

    frame = dataframe_util.convert_arrow_bytes_to_pandas_df(chart.proto.datasets[0].data.data)
    return frame.to_dict("records")


def open_metrics(fake: FakeClient) -> AppTest:
    at = make_app(fake).run()
    at.switch_page("views/metrics.py").run()
    assert_clean(at)
    return at


def test_metrics_chart_outcomes_rounds_adoption_latency_and_cost():
    at = open_metrics(FakeClient())
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {
        "Runs": "5",
        "Finished": "4",
        "Model cost": "$0.0423",
        "Trigger rate": "100%",
        "Adoption rate": "45%",
        "Degraded critiques": "17%",
        "Critiques": "6",
    }
    assert [h.value for h in at.subheader] == [
        "Reflection health",
        "Runs by status",
        "Finished runs by stop reason",
        "Rounds per finished run",
        "A person and the Critic",
        "Model calls by provider",
        "Latency (ms)",
        "Cost (USD)",
    ]
    assert "No reviewer has decided on a version the Critic had judged yet." in [
        c.value for c in at.caption
    ]
    depth, status, stop, rounds, latency, cost = charts(at)
    assert chart_rows(depth) == [{"depth": "L1", "critiques": 4}, {"depth": "L2", "critiques": 2}]
    assert chart_rows(status) == [
        {"status": "succeeded", "runs": 3},
        {"status": "escalated", "runs": 1},
        {"status": "revising", "runs": 1},
    ]
    assert chart_rows(stop) == [
        {"stop reason": "critic_pass", "runs": 3},
        {"stop reason": "max_rounds", "runs": 1},
    ]
    assert chart_rows(rounds) == [{"rounds": "1", "runs": 1}, {"rounds": "2", "runs": 3}]
    assert {(r["provider"], r["cost"]) for r in chart_rows(cost)} == {
        ("anthropic (critic)", 0.03),
        ("openai (actor)", 0.0123),
    }
    assert latency.proto.spec  # p50 and p95 side by side
    table = at.dataframe[0].value
    assert list(table["provider"]) == ["anthropic", "openai"]
    assert list(table["p50 ms"]) == [420.0, 180.0]
    assert list(table["p95 ms"]) == [390.0, 390.0]
    assert list(table["models"]) == ["claude-sonnet-4-6", "gpt-5-mini"]


def health(at: AppTest) -> dict[str, tuple[str, str | None, str]]:
    """The reflection-health figures: value, delta text and its colour."""
    return {
        m.label: (
            m.value,
            m.proto.delta or None,
            m.proto.DESCRIPTOR.fields_by_name["color"]
            .enum_type.values_by_number[m.proto.color]
            .name.lower(),
        )
        for m in at.metric
        if m.label in ("Trigger rate", "Adoption rate")
    }


def test_reflection_health_inside_its_targets_raises_no_alert():
    at = open_metrics(FakeClient())
    assert not at.error
    figures = health(at)
    assert figures["Trigger rate"][:2] == ("100%", "target 95%")
    assert figures["Adoption rate"][:2] == ("45%", "band 15%–70%")
    assert "red" not in figures["Trigger rate"][2] + figures["Adoption rate"][2]


@pytest.mark.parametrize(
    ("rate", "alert"),
    [
        (0.14, "Adoption 14% is outside the healthy 15%–70% band: the revisions ignore"),
        (0.71, "Adoption 71% is outside the healthy 15%–70% band: the drafts are poor"),
    ],
)
def test_adoption_outside_its_band_is_an_alert(rate, alert):
    at = open_metrics(FakeClient(stats=stats_body(adoption_rate=rate, adoption_in_band=False)))
    [error] = at.error
    assert shown(error.value).startswith(alert)
    assert "red" in health(at)["Adoption rate"][2]


@pytest.mark.parametrize("rate", [0.15, 0.70])
def test_adoption_on_the_band_edges_is_inside(rate):
    at = open_metrics(FakeClient(stats=stats_body(adoption_rate=rate, adoption_in_band=True)))
    assert not at.error
    assert "red" not in health(at)["Adoption rate"][2]


def test_trigger_rate_below_target_is_an_alert_and_at_target_is_not():
    below = stats_body(versions=20, versions_judged=18, versions_critiqued=16, trigger_rate=0.9)
    at = open_metrics(FakeClient(stats=below))
    [error] = at.error
    assert shown(error.value) == (
        "Trigger rate 90% is below the 95% target: 2 versions were revised or shipped "
        "without a critique or a person's decision."
    )
    assert "red" in health(at)["Trigger rate"][2]
    [trigger] = [m for m in at.metric if m.label == "Trigger rate"]
    assert "(18 of 20; the Critic 16)" in trigger.proto.help
    one = stats_body(versions=20, versions_judged=19, trigger_rate=0.95)
    at = open_metrics(FakeClient(stats=one))
    assert not at.error
    one = stats_body(versions=10, versions_judged=9, trigger_rate=0.9)
    assert shown(open_metrics(FakeClient(stats=one)).error[0].value).startswith(
        "Trigger rate 90% is below the 95% target: 1 version was revised or shipped"
    )


def test_reflection_health_without_critiques_shows_dashes():
    stats = stats_body(
        trigger_rate=None,
        adoption_rate=None,
        adoption_in_band=None,
        degraded_rate=None,
        critiques=0,
        critiques_by_depth={},
    )
    at = open_metrics(FakeClient(stats=stats))
    assert not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Trigger rate"], metrics["Adoption rate"], metrics["Degraded critiques"]) == (
        "—",
        "—",
        "—",
    )


def test_metrics_labels_read_across_and_small_costs_show():
    stats = stats_body(
        providers=[
            provider("anthropic", "critic", cost_usd=0.00002, unpriced_calls=1),
            provider("openai", "actor", cost_usd=0.0),
        ]
    )
    at = open_metrics(FakeClient(stats=stats))
    depth, status, stop, rounds, latency, cost = charts(at)
    assert chart_rows(depth) == [{"depth": "L1", "critiques": 4}, {"depth": "L2", "critiques": 2}]
    for chart in (status, stop, rounds):
        spec = json.loads(chart.proto.spec)
        assert spec["encoding"]["x"]["axis"]["labelAngle"] == 0
    for chart in (latency, cost):  # providers on the y axis: long labels read across
        layer = json.loads(chart.proto.spec)["layer"][0]
        assert layer["encoding"]["y"]["field"] == "provider"
    assert {(r["provider"], r["cost"]) for r in chart_rows(cost)} == {
        ("anthropic (critic)", 0.00002),
        ("openai (actor)", 0.0),
    }
    text_layer = json.loads(cost.proto.spec)["layer"][1]
    assert text_layer["mark"]["type"] == "text"  # each bar says its value, however small
    assert "1 of 8 calls have no price and count as $0." in all_text(at)


def test_metrics_say_when_no_call_is_priced():
    stats = stats_body(
        providers=[
            provider("fakemodel", "critic", cost_usd=0.0, unpriced_calls=4),
            provider("fakemodel", "actor", cost_usd=0.0, unpriced_calls=4),
        ]
    )
    at = open_metrics(FakeClient(stats=stats))
    assert len(charts(at)) == 5  # critiques by depth, status, stop, rounds, latency: no cost
    assert "No priced calls" in all_text(at)


def test_metrics_show_how_often_reviewers_agreed_with_the_critic():
    agreement = {
        "provider": "anthropic",
        "profile": "default",
        "decisions": 4,
        "agreed": 3,
        "overruled": 1,
        "rate": 0.75,
    }
    at = open_metrics(FakeClient(stats=stats_body(critic_agreement=[agreement])))
    table = at.dataframe[0].value
    assert list(table["critic provider"]) == ["anthropic"]
    assert (list(table["overruled"]), list(table["agreement"])) == ([1], ["75%"])


def test_metrics_without_data_says_so():
    at = open_metrics(FakeClient(stats=EMPTY_STATS))
    assert "No runs in this period yet" in shown(at.info[0].value)
    assert not charts(at)
    assert not at.metric


def test_metrics_with_runs_but_no_model_calls_yet():
    stats = stats_body(
        runs_total=1,
        runs_by_status={"drafting": 1},
        runs_by_stop_reason={},
        rounds_per_run=[],
        adoption_rate=None,
        adoption_rounds=0,
        providers=[],
        versions=0,
        versions_critiqued=0,
        trigger_rate=None,
        critiques=0,
        critiques_degraded=0,
        degraded_rate=None,
        critiques_by_depth={},
        adoption_in_band=None,
    )
    at = open_metrics(FakeClient(stats=stats))
    assert {m.label: m.value for m in at.metric}["Adoption rate"] == "—"
    assert len(charts(at)) == 1
    text = all_text(at)
    assert "No run has finished yet." in text
    assert "No model calls yet." in text


def test_metrics_period_is_sent_as_since():
    from datetime import UTC, datetime, timedelta

    fake = FakeClient()
    at = open_metrics(fake)
    assert fake.called("stats")[-1][1] == {"since": None}
    at.selectbox(key="metrics-period").set_value("7d").run()
    assert_clean(at)
    since = fake.called("stats")[-1][1]["since"]
    assert abs(since - (datetime.now(UTC) - timedelta(days=7))) < timedelta(minutes=1)


def test_metrics_error_is_shown():
    fake = FakeClient()
    fake.fail_stats = ApiError(422, "ValidationError", "query.since: bad datetime")
    at = open_metrics(fake)
    assert "Could not load the metrics: query.since: bad datetime" in shown(at.error[0].value)
    assert not charts(at)


# ---------------------------------------------------------------- the latest evaluation
def deltas(at: AppTest) -> dict[str, tuple[str, str | None]]:
    return {m.label: (m.value, m.proto.delta or None) for m in at.metric if ": " in str(m.label)}


def test_the_latest_evaluation_shows_beside_the_live_metrics():
    at = open_metrics(FakeClient(evaluation=evaluation_body()))
    assert [t.label for t in at.tabs] == ["Live", "Latest evaluation", "Intercept rate"]
    assert {m.label: m.value for m in at.metric}["Runs"] == "5"  # the live figures stay
    assert at.subheader[-1].value == "Latest evaluation"
    facts = shown(at.markdown[-1].value)
    for fact in (
        "dataset **text**",
        "items **40**",
        "limit **40**",
        "seed **1**",
        "Actor **openai/gpt-5-mini**",
        "Critic **anthropic/claude-sonnet-4-6**",
        "finished **2026-11-30 10:12 UTC**",
        "commit **c90963e01234**",
        "published by **eval-ci**",
    ):
        assert fact in facts, fact
    assert deltas(at) == {
        "cross: score": ("50.0%", "+25.0 pts"),
        "cross: cost": ("$0.0080", "+$0.0060 (×4.0)"),
        "cross: latency p50": ("6.00 s", "+4.50 s"),
        "cross: rounds": ("2.5", "+1.5"),
    }
    rows = table(at, -1)
    assert rows["mode"] == ["single", "cross"]
    assert rows["score"] == ["25.0%", "50.0%"]
    assert rows["cost"] == ["$0.0020", "$0.0080"]
    assert (rows["p50"], rows["p95"]) == (["1.50 s", "6.00 s"], ["3.00 s", "11.00 s"])
    assert rows["rounds"] == ["1.0", "2.5"]
    assert rows["escalations"] == ["—", "3"]
    assert rows["person saw"] == ["—", "12.5%"]
    assert rows["critic"] == ["—", "anthropic/claude-sonnet-4-6"]
    assert "judge" not in rows  # no judge configured: no judge column


def test_a_worse_mode_shows_negative_deltas_and_self_beside_cross():
    cheap = evaluation_mode("self", score=0.2, cost_usd=0.001, latency_p50_s=1.0, rounds=1.0)
    body = evaluation_body()
    body["modes"] = [body["modes"][1], cheap, body["modes"][0]]  # any order: single first
    at = open_metrics(FakeClient(evaluation=body))
    assert table(at, -1)["mode"] == ["single", "self", "cross"]
    found = deltas(at)
    assert found["self: score"] == ("20.0%", "−5.0 pts")
    assert found["self: cost"] == ("$0.0010", "−$0.0010 (×0.5)")
    assert found["self: latency p50"] == ("1.00 s", "−0.50 s")
    assert found["cross: score"] == ("50.0%", "+25.0 pts")


def test_an_evaluation_without_single_has_nothing_to_compare():
    body = evaluation_body(modes=[evaluation_mode("cross", judge=0.8, escalations=0)])
    at = open_metrics(FakeClient(evaluation=body))
    assert not deltas(at)
    assert "No single mode in this evaluation" in all_text(at)
    assert table(at, -1)["judge"] == ["80.0%"]


def test_no_evaluation_yet_says_how_to_make_one():
    fake = FakeClient()
    at = open_metrics(fake)
    assert fake.called("latest_evaluation")
    said = [shown(i.value) for i in at.info]
    assert any("No evaluation has been published yet" in i for i in said)
    assert any("crosscheck eval text --mode cross" in i for i in said)
    assert not deltas(at)


def test_the_evaluation_shows_when_the_period_has_no_runs():
    at = open_metrics(FakeClient(stats=EMPTY_STATS, evaluation=evaluation_body()))
    assert "No runs in this period yet" in shown(at.info[0].value)
    assert deltas(at)["cross: score"] == ("50.0%", "+25.0 pts")


def test_an_evaluation_that_cannot_load_is_a_warning_and_the_live_metrics_stay():
    fake = FakeClient()
    fake.fail_evaluation = ApiError(0, "Unreachable", "http://127.0.0.1:8000: ConnectError")
    at = open_metrics(fake)
    assert "Could not load the latest evaluation" in shown(at.warning[0].value)
    assert not at.error
    assert {m.label: m.value for m in at.metric}["Runs"] == "5"


def test_figures_the_page_cannot_read_show_as_dashes():
    odd = evaluation_mode(
        "cross", score="high", cost_usd=None, latency_p50_s=True, rounds=[], actor="x"
    )
    body = evaluation_body(modes=[evaluation_mode("single"), odd, {"mode": "quad"}, "junk"])
    body.pop("finished_at")
    at = open_metrics(FakeClient(evaluation=body))
    rows = table(at, -1)
    assert rows["mode"] == ["single", "cross"]
    assert (rows["score"][1], rows["cost"][1], rows["p50"][1]) == ("—", "—", "—")
    assert rows["actor"][1] == "—"
    assert deltas(at)["cross: score"] == ("—", None)
    assert "finished **—**" in shown(at.markdown[-1].value)


# ---------------------------------------------------------------- the intercept rate
INTERCEPTS = [  # newest first, as the API lists them
    intercept_body(0.7, "2026-11-30T10:00:00Z"),
    intercept_body(0.5, "2026-11-29T10:00:00Z", published_by="ana"),
    intercept_body(0.6, "2026-11-28T10:00:00Z"),
]


def intercept_metrics(at: AppTest) -> dict[str, tuple[str, str | None, str]]:
    return {
        m.label: (
            m.value,
            m.proto.delta or None,
            m.proto.DESCRIPTOR.fields_by_name["color"]
            .enum_type.values_by_number[m.proto.color]
            .name.lower(),
        )
        for m in at.metric
        if m.label in ("Intercept rate", "Items", "Published results")
    }


def test_the_intercept_rate_history_shows_against_its_target():
    fake = FakeClient(intercepts=INTERCEPTS)
    at = open_metrics(fake)
    assert fake.called("intercept_history")
    assert "Critical-error intercept rate" in [h.value for h in at.subheader]
    found = intercept_metrics(at)
    assert found["Intercept rate"][:2] == ("70%", "target 65%")
    assert "red" not in found["Intercept rate"][2]
    assert (found["Items"][0], found["Published results"][0]) == ("10", "3")
    assert not at.error
    [history] = [c for c in charts(at) if "rate" in chart_rows(c)[0]]
    rows = chart_rows(history)
    assert [r["rate"] for r in rows] == [0.6, 0.5, 0.7]  # oldest first, along time
    assert {r["target"] for r in rows} == {0.65}
    layers = json.loads(history.proto.spec)["layer"]
    assert [layer["mark"]["type"] for layer in layers] == ["line", "rule"]
    rates = table(at, -1)
    assert rates["finished"] == [
        "2026-11-30 10:00 UTC",
        "2026-11-29 10:00 UTC",
        "2026-11-28 10:00 UTC",
    ]
    assert rates["rate"] == ["70%", "50%", "60%"]
    assert rates["intercepted"] == ["7 of 10", "5 of 10", "6 of 10"]
    assert rates["published by"] == ["eval-ci", "ana", "eval-ci"]
    assert "The dashed line is the 65% target." in all_text(at)
    assert {m.label: m.value for m in at.metric}["Runs"] == "5"  # the live figures stay


def test_a_latest_intercept_rate_below_the_target_is_an_alert():
    at = open_metrics(FakeClient(intercepts=[intercept_body(0.6, "2026-12-01T00:00:00Z")]))
    [error] = at.error
    assert shown(error.value) == (
        "The latest intercept rate (6 of 10), 60%, is below the 65% target: the Critic lets "
        "planted critical errors through."
    )
    assert "red" in intercept_metrics(at)["Intercept rate"][2]
    at = open_metrics(FakeClient(intercepts=[intercept_body(0.65, "2026-12-01T00:00:00Z")]))
    assert not at.error  # on the target is met


def test_no_intercept_rate_yet_says_how_to_publish_one():
    at = open_metrics(FakeClient())
    said = [shown(i.value) for i in at.info]
    assert any("No intercept rate has been published yet" in i for i in said)
    assert any("crosscheck eval intercept" in i for i in said)
    assert not intercept_metrics(at)


def test_intercept_entries_the_page_cannot_read_are_left_out():
    good = intercept_body(0.7, "2026-11-30T10:00:00Z")
    odd: list[object] = [
        intercept_body(0.9, "not a time"),
        {**intercept_body(0.9, "2026-11-29T00:00:00Z"), "modes": "junk"},
        {**intercept_body(0.9, "2026-11-28T00:00:00Z"), "modes": [{"mode": "cross"}]},
        intercept_body(0.9, "2026-11-27T00:00:00Z", modes=[{"mode": "critic", "score": "high"}]),
        intercept_body(0.9, "2026-11-26T00:00:00Z", modes=[{"mode": "critic", "score": 1.5}]),
        intercept_body(0.9, "2026-11-25T00:00:00Z", modes=[{"mode": "critic", "score": True}]),
        "junk",
    ]
    partial = intercept_body(
        0.4, "2026-11-20T00:00:00Z", modes=[{"mode": "critic", "score": 0.4, "items": "ten"}]
    )
    at = open_metrics(FakeClient(intercepts=[good, *odd, partial]))
    rates = table(at, -1)
    assert rates["rate"] == ["70%", "40%"]
    assert rates["intercepted"] == ["7 of 10", "—"]
    assert rates["critic"] == ["anthropic/claude-sonnet-4-6", "—"]


def test_an_intercept_history_that_cannot_load_is_a_warning_and_the_rest_stays():
    fake = FakeClient(evaluation=evaluation_body())
    fake.fail_intercepts = ApiError(403, "Forbidden", "needs a reviewer")
    at = open_metrics(fake)
    assert "Could not load the intercept rate: needs a reviewer" in shown(at.warning[0].value)
    assert not at.error
    assert {m.label: m.value for m in at.metric}["Runs"] == "5"
    assert deltas(at)["cross: score"] == ("50.0%", "+25.0 pts")

"""AppTest: the Review page as a reviewer reads and decides it, and sessions that survive a
reload or a shared link (the cookie is read through ``console.views.login.read_cookies``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from console.client import ApiError
from console.server import SESSION_COOKIES
from tests.ui.fakes import FakeClient, review_detail, review_item
from tests.ui.test_app import APP, all_text, assert_clean, has_key, make_app, shown

CODE = (
    'def tides(day):\n    """Two a day."""\n    if day < 0:\n        return  -1\n\n    return 2\n'
)
PREVIOUS_CODE = "def tides(day):\n    return 1\n"


class CodeFake(FakeClient):
    """A code task, with a quote spanning lines and an edited round in the run."""

    edited: bool = False

    def get_review(self, review_id: str) -> dict:
        detail = super().get_review(review_id)
        detail["context"].update(
            kind="code",
            output=CODE,
            previous_output=PREVIOUS_CODE,
            evaluation={
                "passed": False,
                "summary": "1/2 test(s) passed",
                "status": "failed",
                "tests": [
                    {"name": "test_two", "status": "passed", "message": ""},
                    {"name": "test_negative", "status": "failed", "message": "expected 0"},
                ],
                "stdout": "",
                "stderr": "AssertionError",
            },
            critiques=[
                {
                    "round": 1,
                    "verdict": "revise",
                    "confidence": 0.6,
                    "issues": [
                        {
                            "dimension": "correctness",
                            "severity": "major",
                            "quote": "return 1",
                            "suggestion": "two tides",
                        }
                    ],
                    "binding_checks": [],
                    "reflection": "",
                    "error_class": "none",
                },
                {
                    "round": 2,
                    "verdict": "revise",
                    "confidence": 0.7,
                    "issues": [
                        {
                            "dimension": "correctness",
                            "severity": "critical",
                            "quote": "if day < 0:\n        return  -1",
                            "suggestion": "no negative days: raise ValueError",
                        },
                        {
                            "dimension": "style",
                            "severity": "minor",
                            "quote": '"""Two a day."""',
                            "suggestion": "say why",
                        },
                    ],
                    "binding_checks": [
                        {"point": "Explain the Moon", "satisfied": False, "quote": None},
                    ],
                    "reflection": "",
                    "error_class": "none",
                },
            ],
        )
        return detail

    def get_run(self, run_id: str) -> dict:
        run = super().get_run(run_id)
        run["rounds"] = [
            {"number": 2, "output": CODE, "provenance": "actor", "review": None, "usage": {}},
        ]
        if self.edited:
            run["rounds"].append(
                {
                    "number": 3,
                    "output": "def tides(day):\n    return 2\n",
                    "provenance": "human",
                    "review": {"review_id": "rev-1", "edited_by": "ana", "from_round": 2},
                    "usage": {},
                }
            )
        return run


def open_review(fake: FakeClient, review_id: str = "rev-1", **state) -> AppTest:
    at = make_app(fake, review_id=review_id, **state).run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def claimed(fake: FakeClient, by: str = "ana", review_id: str = "rev-1") -> FakeClient:
    fake.claim(review_id)
    fake.reviews[review_id].update(claimed_by=f"tok_{by}", claimed_by_name=by)
    return fake


def html_of(at: AppTest) -> str:
    return "\n".join(h.value for h in at.html)


# ---------------------------------------------------------------- output as it ships
def test_code_keeps_its_lines_and_indentation_with_each_quote_marked_and_numbered():
    at = open_review(claimed(CodeFake()))
    html = html_of(at)
    # line by line, indentation kept, the two-line quote marked on both of its lines
    assert '<span class="cc-ln">3</span>    <mark data-issue="1"><sup class="cc-q">1</sup>' in html
    assert 'if day &lt; 0:</mark>\n<span class="cc-ln">4</span><mark data-issue="1">' in html
    assert "        return  -1</mark>" in html  # eight spaces and the double space kept
    assert '<sup class="cc-q">2</sup>&quot;&quot;&quot;Two a day.&quot;&quot;&quot;' in html
    assert '<span class="cc-ln">5</span>\n<span class="cc-ln">6</span>    return 2' in html
    # long lines wrap inside the box (spaces kept), never cut at its edge
    assert "monospace; white-space: pre-wrap;" in html
    # the numbered issue cards, with the quote kept as code
    cards = [m.value for m in at.markdown if re.match(r"\*\*\d\.\*\*", str(m.value))]
    assert cards == [
        "**1.** :red-badge[critical] · correctness",
        "**2.** :yellow-badge[minor] · style",
    ]
    assert "if day < 0:\n        return  -1" in [c.value for c in at.code]
    assert "Suggestion: no negative days: raise ValueError" in all_text(at)
    # highlighted too, with the language and line numbers
    [highlighted] = [c for c in at.code if c.value.rstrip() == CODE.rstrip()]
    assert highlighted.language == "python"
    assert highlighted.proto.show_line_numbers
    # the previous round beside it, marked with its own critique's quote
    assert '<mark data-issue="1"><sup class="cc-q">1</sup>return 1</mark>' in html


def test_evidence_is_tables_and_no_raw_json_outside_the_raw_expander():
    at = open_review(claimed(CodeFake()))
    tests = next(d for d in at.dataframe if "test" in d.value.columns)
    assert list(tests.value["status"]) == ["passed", "failed"]
    checks = next(d for d in at.dataframe if "point" in d.value.columns)
    assert list(checks.value["applied"]) == [False]
    [raw] = [e for e in at.expander if e.label == "Raw"]
    assert len(at.json) == len(raw.json) == 1
    assert "{" not in "\n".join(str(m.value) for m in at.markdown if "<style>" not in m.value)


def test_an_edit_shows_beside_the_version_it_replaced():
    fake = CodeFake()
    fake.edited = True
    fake.reviews["rev-1"].update(status="resolved")
    at = open_review(fake)
    assert "Edited by ana (round 3)" in [s.value for s in at.subheader]
    html = html_of(at)
    assert "Original (round 2)" in all_text(at)
    edited = 'def tides(day):\n<span class="cc-ln">2</span>    return 2\n'
    assert edited in html
    # across the page's whole width (not inside the output's column), with the changed lines
    top = {getattr(node, "key", None) for node in at.main.children.values()}
    assert "edit-beside" in top
    assert 'class="diff_chg"' in html or 'class="diff_sub"' in html
    assert "Changed lines" in [e.label for e in at.expander]


def test_earlier_rounds_critiques_are_listed_as_tables():
    at = open_review(CodeFake())
    assert "Earlier rounds" in [s.value for s in at.subheader]
    [history] = [e for e in at.expander if e.label.startswith("Round 1")]
    assert shown(history.label) == "Round 1 · verdict revise (0.60) · 1 issue"
    [issues] = history.dataframe
    assert list(issues.value["suggestion"]) == ["two tides"]
    assert list(issues.value["quote"]) == ["return 1"]
    assert not history.get("json")  # a table, not JSON


def test_no_earlier_critique_means_no_round_history():
    at = open_review(FakeClient())  # only round 2's critique is known, and nothing before it
    assert "Earlier rounds" not in [s.value for s in at.subheader]


# ---------------------------------------------------------------- who may decide
def test_the_holder_sees_the_decision_panel():
    at = open_review(claimed(FakeClient()))
    assert at.radio(key="decision-action").options == ["comment", "approve", "edit", "reject"]
    assert has_key(at, "renew")
    assert has_key(at, "release")
    assert any("You hold this item for" in c.value for c in at.caption)


def test_another_reviewer_reads_only_and_sees_who_holds_it_until_when():
    at = open_review(claimed(FakeClient(), by="bob"))
    assert not has_key(at, "decision-action")
    assert not at.get("form")
    for key in ("renew", "release", "review-claim"):
        assert not has_key(at, key)
    [info] = [i.value for i in at.info if "bob" in i.value]
    assert re.search(r"bob holds this item for [45] more minutes", info), info
    assert "only they can decide it" in info
    assert "use seven syllables" in all_text(at)  # the context is all there to read


def reopened(fake: FakeClient) -> AppTest:
    """A new browser session on the item's shared link, logged in by the session cookie."""
    at = make_app(fake, token=None)
    at.query_params["review"] = "rev-1"
    at.run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def test_a_token_reviewer_still_holds_their_claim_after_a_reload(cookies):
    """The claim is recorded on the token's id: the console asks GET /v1/auth/me whose token
    the session cookie is, so a token login (no account name) keeps its decision panel."""
    fake = claimed(FakeClient(), by="ci")  # held by the API token ci-reviewer (id tok_ci)
    cookies.update(crosscheck_session="good-token")
    at = reopened(fake)
    assert at.session_state["user"]["id"] == "tok_ci"
    assert at.radio(key="decision-action").options == ["comment", "approve", "edit", "reject"]
    assert has_key(at, "release")
    assert not [i for i in at.info if "holds this item" in i.value]


def test_another_session_reads_a_token_holders_claim_only(cookies):
    fake = claimed(FakeClient(), by="ci")
    fake.reviews["rev-1"]["claimed_by_name"] = "ci-reviewer"
    cookies.update(crosscheck_session="rita-session", crosscheck_who="rita%7Creviewer")
    at = reopened(fake)
    assert not has_key(at, "decision-action")
    assert any("ci-reviewer holds this item" in shown(i.value) for i in at.info)


def test_the_same_name_on_another_token_does_not_hold_the_claim():
    """Only the claiming token can decide (the orchestrator checks its id), so a claim made
    under another session of the same account is read-only here."""
    fake = claimed(FakeClient(), by="ana")
    fake.reviews["rev-1"]["claimed_by"] = "tok_ana_laptop"
    at = open_review(fake)
    assert not has_key(at, "decision-action")
    assert any("ana holds this item" in shown(i.value) for i in at.info)


def test_a_claim_conflict_says_until_when_in_words():
    fake = FakeClient()
    until = (datetime.now(UTC) + timedelta(minutes=4, seconds=35)).isoformat()

    def taken(review_id, lease_s=300):
        raise ApiError(409, "Conflict", f"review rev-1 is claimed by bob until {until}")

    fake.claim = taken  # type: ignore[method-assign]
    at = open_review(fake)
    at.button(key="review-claim").click().run()
    assert_clean(at)
    assert (
        shown(at.error[0].value)
        == "Could not claim: review rev-1 is claimed by bob for 5 more minutes"
    )
    assert not re.search(r"\d{4}-\d{2}-\d{2}T", shown(at.error[0].value))


# ---------------------------------------------------------------- the decisions
def test_reject_needs_a_reason_and_a_confirmation():
    fake = claimed(FakeClient())
    at = open_review(fake)
    at.radio(key="decision-action").set_value("reject").run()
    at.button(key="decision-submit").click().run()
    assert "A reject needs the reason" in shown(at.error[0].value)
    at.text_area(key="decision-reason").input("Off topic: it is about lakes.")
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    assert fake.called("decide") == []  # not yet: it asks first
    assert "Reject this run?" in shown(at.warning[0].value)
    assert "Off topic: it is about lakes." in shown(at.warning[0].value)
    at.button(key="decision-reject-cancel").click().run()
    assert not at.warning
    assert fake.called("decide") == []

    at.button(key="decision-submit").click().run()
    at.button(key="decision-reject-confirm").click().run()
    assert_clean(at)
    ((_, kwargs),) = fake.called("decide")
    assert (kwargs["action"], kwargs["comment"]) == ("reject", "Off topic: it is about lakes.")
    assert shown(at.success[0].value).startswith("You rejected the run.")


def test_a_comment_is_sent_as_points_one_per_line():
    fake = claimed(FakeClient())
    at = open_review(fake)
    at.text_area(key="decision-comment").input("- Mention the Moon.\n\n2. Say why two tides.\n")
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    ((_, kwargs),) = fake.called("decide")
    assert kwargs["action"] == "comment"
    assert kwargs["points"] == ["Mention the Moon.", "Say why two tides."]


def test_the_editor_is_filled_with_the_output_only_for_edit():
    fake = claimed(FakeClient())
    output = review_detail(fake.reviews["rev-1"])["context"]["output"]
    at = open_review(fake)
    assert at.text_area(key="decision-comment").value == ""
    assert not has_key(at, "decision-output")
    at.radio(key="decision-action").set_value("edit").run()
    assert at.text_area(key="decision-output").value == output
    assert not has_key(at, "decision-comment")


def test_a_decided_item_reads_in_words():
    fake = FakeClient([review_item(status="resolved")])

    def decided(review_id: str) -> dict:
        detail = review_detail(fake.reviews[review_id])
        detail["decision"] = {
            "action": "comment",
            "author": "ana",
            "by": "tok_secret_id",
            "at": (datetime.now(UTC) - timedelta(minutes=3)).isoformat(),
            "comment": "a\nb",
            "points": ["a", "b"],
            "idempotency_key": "idem-xyz",
            "critic_verdict": "revise",
            "agreed_with_critic": False,
            "lesson_id": None,
            "rounds": None,
        }
        return detail

    fake.get_review = decided  # type: ignore[method-assign]
    at = open_review(fake)
    text = all_text(at)
    assert "**Comment** by ana, 3 minutes ago." in text
    assert "1. a\n2. b" in text
    assert "tok_secret_id" not in text
    assert "idem-xyz" not in text
    assert "idem-xyz" not in str(at.json[0].value)


# ---------------------------------------------------------------- sessions and links
def session_scripts(at: AppTest) -> list[str]:
    """The page's scripts that post a session ticket to the console's cookie route."""
    return [str(h.proto.body) for h in at.get("html") if "/_console/session" in str(h.proto.body)]


@pytest.fixture
def cookies(monkeypatch):
    jar: dict[str, str] = {}
    monkeypatch.setattr("console.views.login.read_cookies", lambda: jar)
    return jar


def test_a_reload_with_the_session_cookie_stays_logged_in_on_the_item(cookies):
    cookies.update(crosscheck_session="rita-session", crosscheck_who="rita%7Creviewer")
    fake = FakeClient()
    at = make_app(fake, token=None)
    at.query_params["review"] = "rev-1"
    at.run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    assert at.title[0].value == "Review"
    assert at.session_state["token"] == "rita-session"
    assert "Signed in as rita (reviewer)" in [c.value for c in at.sidebar.caption]
    assert fake.called("get_review") == [(("rev-1",), {})]


def test_a_revoked_cookie_shows_the_login(cookies):
    cookies.update(crosscheck_session="revoked")
    at = make_app(FakeClient(), token=None).run()
    assert_clean(at)
    assert at.title[0].value == "Crosscheck reviewer console"
    assert "token" not in at.session_state


def test_a_shared_link_logged_out_logs_in_then_opens_the_item(cookies):
    fake = FakeClient()
    at = make_app(fake, token=None)
    at.query_params["review"] = "rev-1"
    at.run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    assert at.title[0].value == "Crosscheck reviewer console"  # the login, in the page's place
    assert "Log in to open review rev-1." in all_text(at)
    at.text_input(key="login-username").input("rita")
    at.text_input(key="login-password-input").input("secret")
    at.button(key="login-submit").click().run()
    assert_clean(at)
    assert at.title[0].value == "Review"
    assert at.session_state["review_id"] == "rev-1"
    assert at.session_state["cookie"]  # the cookie is written (12 h) on this run
    # by the console's route, HttpOnly: the page gets a one-use ticket, never the token
    ticket = at.session_state["cookie-ticket"]
    scripts = session_scripts(at)
    assert any(ticket in body for body in scripts), scripts
    assert not any("document.cookie" in body or "tok-123" in body for body in scripts)
    order = SESSION_COOKIES.redeem(ticket)
    assert order is not None
    assert order.values == {"crosscheck_session": "tok-123", "crosscheck_who": "rita%7Creviewer"}
    at.run()
    assert "cookie-ticket" not in at.session_state  # written: no script on later runs
    assert not session_scripts(at)


def test_logging_out_ignores_the_old_cookie(cookies):
    cookies.update(crosscheck_session="good-token")
    at = make_app(FakeClient(), token=None).run()
    assert at.title[0].value == "Review queue"
    at.button(key="logout").click().run()
    assert_clean(at)
    assert at.title[0].value == "Crosscheck reviewer console"
    assert "token" not in at.session_state
    # the HttpOnly cookie is cleared by the console's route, which a page script cannot do
    ticket = at.session_state["cookie-drop"]
    assert any(ticket in body for body in session_scripts(at))
    order = SESSION_COOKIES.redeem(ticket)
    assert order is not None
    assert order.values is None
    at.run()
    assert not session_scripts(at)


def test_token_login_shows_the_role_from_the_api(cookies):
    at = make_app(FakeClient(), token=None).run()
    at.text_input(key="login-token-input").input("good-token")
    at.button(key="token-submit").click().run()
    assert_clean(at)
    assert "Signed in with the API token “ci-reviewer” (reviewer)" in [
        shown(c.value) for c in at.sidebar.caption
    ]


def test_no_page_icon_loads_a_web_font():
    assert "icon=" not in Path(APP).read_text()

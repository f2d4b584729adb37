"""AppTest: text from models, reviewers and users shows as itself on every page. Each field a
model, a reviewer or a user writes carries Markdown that would fetch an image, link, style or
rewrite; no Markdown slot of the page renders any of it, and the text is on the page."""

from __future__ import annotations

from typing import Any

from streamlit.testing.v1 import AppTest

from tests.ui.fakes import (
    FakeClient,
    evaluation_body,
    evaluation_mode,
    lesson,
    review_detail,
    review_item,
    run_detail,
)
from tests.ui.test_app import all_text, assert_clean, make_app, shown
from tests.ui.untrusted import read


def evil(where: str) -> str:
    return f"{where} ![x](http://evil.example/{where}.png) **loud** [go](http://evil.example/)"


class HostileFake(FakeClient):
    """Every free-text field, as a model, a reviewer or a user could have written it."""

    def __init__(self) -> None:
        super().__init__(
            [
                review_item(
                    "rev-1",
                    kind="escalation",
                    status="claimed",
                    claimed_by="tok_evil",
                    claimed_by_name=evil("token-name"),
                    reason=evil("reason"),
                    task=evil("task"),
                ),
                review_item("rev-2", status="resolved", task=evil("task")),
            ],
            runs=[run_detail("run-1")],
            lessons=[lesson(content=evil("lesson"), scope=evil("scope"), author=evil("author"))],
        )

    def get_review(self, review_id: str) -> dict:
        detail = review_detail(self.reviews[review_id])
        ctx = detail["context"]
        ctx["task"] = evil("task")
        ctx["critiques"][0].update(verdict=evil("verdict"))
        ctx["critiques"][0]["issues"][0].update(
            dimension=evil("dimension"), severity=evil("severity"), suggestion=evil("suggestion")
        )
        ctx["reflections"] = [
            {"round": 1, "source": "critic", "author": evil("critic"), "content": evil("refl")},
            {"round": 1, "source": "human", "author": evil("human"), "content": evil("comment")},
        ]
        ctx["stop_reason"] = evil("stop-reason")
        ctx["error_class"] = evil("error-class")
        if review_id == "rev-2":
            detail["decision"] = {
                "action": "comment",
                "author": evil("decider"),
                "points": [evil("point-1"), evil("point-2")],
                "comment": evil("decision-comment"),
                "critic_verdict": evil("critic-verdict"),
                "agreed_with_critic": False,
                "at": ctx.get("created_at"),
            }
        return detail

    def get_run(self, run_id: str) -> dict:
        run: dict[str, Any] = run_detail(run_id)
        run.update(
            task=evil("run-task"),
            stop_reason=evil("run-stop"),
            detail=evil("run-detail"),
            error_class=evil("run-error"),
        )
        first, second = run["rounds"]
        first["critique"].update(verdict=evil("round-verdict"), error_class=evil("round-error"))
        first["critique"]["issues"][0].update(suggestion=evil("round-suggestion"))
        second["review"].update(edited_by=evil("editor"))
        run["reflections"] = [
            {"round": 1, "source": "human", "author": evil("refl-author"), "content": evil("rc")}
        ]
        return run


MARKDOWN_SLOTS = ("markdown", "caption", "error", "info", "warning", "success", "subheader")


def assert_inert(at: AppTest) -> list[str]:
    """No Markdown slot on the page renders an image, a link, raw HTML or a rewrite; returns
    the sources, to check what made it onto the page."""
    assert_clean(at)
    sources = [str(e.value) for kind in MARKDOWN_SLOTS for e in getattr(at, kind)]
    sources += [str(e.value) for kind in MARKDOWN_SLOTS for e in getattr(at.sidebar, kind)]
    sources += [str(e.label) for e in at.expander]
    for source in sources:
        reading = read(source)
        rendered = [t for t in reading.styled if t in ("image", "link_open", "html_inline")]
        assert rendered == [], source
        assert reading.rewritten == [], source
        assert "heading_open" not in reading.blocks, source
    return sources


def visible(at: AppTest) -> str:
    texts = [shown(s) for s in assert_inert(at)]
    return "\n".join([all_text(at), *texts, *(str(t.value) for t in at.text)])


def open_page(page: str, fake: FakeClient | None = None, **state: Any) -> AppTest:
    at = make_app(fake or HostileFake(), **state).run()
    at.switch_page(page).run()
    return at


def test_a_review_read_by_another_reviewer_shows_model_and_user_text_as_text():
    at = open_page("views/review.py", review_id="rev-1")
    text = visible(at)
    for where in (
        "task",
        "reason",
        "token-name",
        "dimension",
        "severity",
        "suggestion",
        "refl",
        "critic",
        "comment",
        "verdict",
        "stop-reason",
        "error-class",
    ):
        assert evil(where) in text, where


def test_a_decided_review_shows_the_reviewers_text_as_text():
    at = open_page("views/review.py", review_id="rev-2")
    text = visible(at)
    for where in ("decider", "point-1", "point-2", "critic-verdict"):
        assert evil(where) in text, where


def test_the_decision_panel_repeats_a_reject_reason_as_text():
    fake = HostileFake()
    fake.reviews["rev-1"].update(claimed_by="tok_ana", claimed_by_name="ana")
    at = open_page("views/review.py", fake, review_id="rev-1")
    at.radio(key="decision-action").set_value("reject").run()
    at.text_area(key="decision-reason").input(evil("reject-reason"))
    at.button(key="decision-submit").click().run()
    assert evil("reject-reason") in visible(at)


def test_a_runs_timeline_shows_model_and_reviewer_text_as_text():
    at = open_page("views/runs.py")
    at.query_params["run"] = "run-1"
    at.run()
    text = visible(at)
    for where in ("run-task", "run-stop", "run-detail", "run-error", "round-verdict", "editor"):
        assert evil(where) in text, where
    assert evil("rc") in text


def test_lessons_show_their_text_scope_and_author_as_text():
    text = visible(open_page("views/lessons.py"))
    for where in ("lesson", "scope", "author"):
        assert evil(where) in text, where


def test_a_hostile_shared_link_and_account_name_show_as_text():
    at = make_app(FakeClient(), token=None)
    at.query_params["review"] = evil("link")
    at.run()
    assert evil("link") in visible(at)
    signed_in = make_app(FakeClient(), user={"name": evil("account"), "role": "reviewer"}).run()
    assert evil("account") in visible(signed_in)


def test_the_latest_evaluation_shows_its_names_as_text():
    """Token names, model names and the dataset come from whoever published the summary."""
    hostile = evaluation_body(
        dataset=evil("dataset"),
        published_by=evil("publisher"),
        commit=evil("commit"),
        finished_at=evil("finished"),
        modes=[
            evaluation_mode("single", actor=[evil("actor")]),
            evaluation_mode("cross", critic=[evil("critic")], score=evil("score")),
        ],
    )
    fake = FakeClient(evaluation=hostile)
    text = visible(open_page("views/metrics.py", fake))
    for where in ("dataset", "publisher", "actor", "critic", "finished"):
        assert evil(where) in text, where
    assert evil("commit")[:12] in text


def test_a_hostile_error_loading_the_evaluation_shows_as_text():
    from console.client import ApiError

    fake = FakeClient()
    fake.fail_evaluation = ApiError(500, "Boom", evil("evaluation-error"))
    assert evil("evaluation-error") in visible(open_page("views/metrics.py", fake))

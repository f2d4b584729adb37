"""AppTest: every page says which models answer the platform's calls (``GET /v1/info``'s
``model_mode``), and in demo mode the Review page says how the scripted Actor "applies" a
reviewer's points."""

from __future__ import annotations

import pytest

from console import mode
from console.client import ApiError
from tests.ui.fakes import FakeClient
from tests.ui.test_app import PAGES, all_text, assert_clean, make_app, shown
from tests.ui.untrusted import read

CAPTIONS = {
    "demo": "Models: demo (scripted fake model)",
    "local": "Models: local model (SmolLM2-135M on this machine)",
    "providers": "Models: providers (real model APIs)",
}


def sidebar_captions(at) -> list[str]:
    return [shown(c.value) for c in at.sidebar.caption]


class TestSidebar:
    @pytest.mark.parametrize(("page", "title"), PAGES)
    def test_every_page_names_the_mode(self, page, title):
        at = make_app(FakeClient(model_mode="local"), review_id="rev-1").run()
        at.switch_page(page).run()
        assert_clean(at)
        assert at.title[0].value == title
        assert CAPTIONS["local"] in sidebar_captions(at)

    @pytest.mark.parametrize("models", list(CAPTIONS))
    def test_each_mode_in_its_own_words(self, models):
        at = make_app(FakeClient(model_mode=models)).run()
        assert_clean(at)
        assert CAPTIONS[models] in sidebar_captions(at)
        others = {words for name, words in CAPTIONS.items() if name != models}
        assert not others & set(sidebar_captions(at))

    def test_the_mode_is_asked_once_per_session(self):
        fake = FakeClient(model_mode="demo")
        at = make_app(fake).run()
        for page, _ in PAGES:
            at.switch_page(page).run()
        assert CAPTIONS["demo"] in sidebar_captions(at)
        assert len(fake.called("info")) == 1

    def test_an_orchestrator_that_reports_no_mode_gets_no_caption(self):
        at = make_app(FakeClient(model_mode=None)).run()
        assert_clean(at)
        assert not [c for c in sidebar_captions(at) if c.startswith("Models:")]
        assert at.title[0].value == "Review queue"

    def test_an_unknown_mode_is_named_as_sent_and_renders_nothing(self):
        at = make_app(FakeClient(model_mode="**gpu** ![x](http://evil.example/p.png)")).run()
        assert_clean(at)
        assert "Models: **gpu** ![x](http://evil.example/p.png)" in sidebar_captions(at)
        [raw] = [c.value for c in at.sidebar.caption if "gpu" in c.value]
        reading = read(raw)  # what Streamlit makes of it: no bold, no image, no link
        assert (reading.styled, reading.rewritten) == ([], [])

    def test_an_unreachable_orchestrator_is_asked_again_on_the_next_run(self):
        fake = FakeClient(model_mode="local")
        answer = fake.info

        def unreachable():
            fake._log("info")
            raise ApiError(0, "Unreachable", "http://orch: ConnectError")

        fake.info = unreachable  # type: ignore[method-assign]
        at = make_app(fake).run()
        assert_clean(at)
        assert not [c for c in sidebar_captions(at) if c.startswith("Models:")]
        fake.info = answer  # type: ignore[method-assign]
        at.run()
        assert CAPTIONS["local"] in sidebar_captions(at)

    def test_the_login_page_names_the_mode_before_anyone_logs_in(self):
        fake = FakeClient(model_mode="demo")
        at = make_app(fake, token=None).run()
        assert_clean(at)
        assert at.title[0].value == "Crosscheck reviewer console"
        assert CAPTIONS["demo"] in [shown(c.value) for c in at.caption]
        assert fake.token is None  # asked without a token


def open_claimed_review(models: str | None):
    fake = FakeClient(model_mode=models)
    fake.claim("rev-1")
    at = make_app(fake, review_id="rev-1").run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


class TestDemoNoteOnTheReviewPage:
    def test_demo_mode_says_how_the_scripted_actor_applies_points(self):
        at = open_claimed_review("demo")
        at.radio(key="decision-action").set_value("comment").run()
        text = all_text(at)
        assert "Reviewer point applied: <your point>" in text
        assert "scripted Actor" in text
        assert mode.DEMO_POINTS in [c.value for c in at.caption]

    @pytest.mark.parametrize("models", ["local", "providers", None])
    def test_other_modes_do_not(self, models):
        at = open_claimed_review(models)
        at.radio(key="decision-action").set_value("comment").run()
        assert at.text_area(key="decision-comment") is not None
        assert "scripted Actor" not in all_text(at)

    def test_only_the_comment_form_carries_it(self):
        at = open_claimed_review("demo")
        at.radio(key="decision-action").set_value("approve").run()
        assert "scripted Actor" not in all_text(at)


class TestCaptionWords:
    @pytest.mark.parametrize(("models", "words"), list(CAPTIONS.items()))
    def test_known_modes(self, models, words):
        assert mode.caption(models) == words

    @pytest.mark.parametrize("missing", [None, ""])
    def test_no_mode_no_caption(self, missing):
        assert mode.caption(missing) is None

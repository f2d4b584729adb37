"""AppTest: agree / dismiss on each Critic issue on the Review page, and the Datasets page's
export, against the fake client (with the two calls they add)."""

from __future__ import annotations

from typing import Any

from console.client import ApiError
from tests.ui.fakes import FakeClient
from tests.ui.test_app import all_text, assert_clean, make_app
from tests.ui.test_review import claimed, open_review

REASON = "The count is right: seven."


class JudgingFake(FakeClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.words: dict[str, list[dict]] = {}
        self.exported = b'{"messages": []}\n{"messages": []}\n'
        self.fail_export: ApiError | None = None

    def get_review(self, review_id: str) -> dict:
        detail = super().get_review(review_id)
        detail["judgements"] = self.words.get(review_id, [])
        return detail

    def judge_critic(self, review_id: str, judgements: list[dict]) -> list[dict]:
        self._log("judge_critic", review_id, judgements)
        self.words[review_id] = [{**j, "round": 2, "author": "ana"} for j in judgements]
        return self.words[review_id]

    def export_dataset(self, kind: str = "chat", **filters: Any) -> bytes:
        self._log("export_dataset", kind, **filters)
        if self.fail_export:
            raise self.fail_export
        return self.exported


def form_keys(review_id: str = "rev-1") -> tuple[str, str]:
    return f"judge-{review_id}-0", f"judge-{review_id}-0-reason"


class TestJudgeTheCritic:
    def test_the_holder_dismisses_an_issue_with_a_reason(self):
        fake = claimed(JudgingFake())
        at = open_review(fake)
        verdict, reason = form_keys()
        at.radio(key=verdict).set_value("dismiss")  # a form: sent with its submit
        at.text_input(key=reason).input(REASON)
        [save] = [b for b in at.button if b.label == "Save judgements"]
        save.click().run()
        assert_clean(at)
        assert fake.called("judge_critic") == [
            (("rev-1", [{"issue": 0, "verdict": "dismiss", "reason": REASON}]), {})
        ]
        assert "Saved your word on 1 issue." in [s.value for s in at.success]

    def test_dismissing_without_a_reason_sends_nothing(self):
        fake = claimed(JudgingFake())
        at = open_review(fake)
        at.radio(key=form_keys()[0]).set_value("dismiss")
        [save] = [b for b in at.button if b.label == "Save judgements"]
        save.click().run()
        assert fake.called("judge_critic") == []
        assert "Say why you dismiss issue 1." in [e.value for e in at.error]

    def test_a_refusal_is_shown_in_words(self):
        fake = JudgingFake()
        claimed(fake)

        def refuse(review_id: str, judgements: list[dict]) -> list[dict]:
            raise ApiError(409, "Conflict", "claim review rev-1 before judging")

        fake.judge_critic = refuse  # type: ignore[method-assign]
        at = open_review(fake)
        at.radio(key=form_keys()[0]).set_value("agree")
        [save] = [b for b in at.button if b.label == "Save judgements"]
        save.click().run()
        assert any("before judging" in e.value for e in at.error)

    def test_someone_elses_item_shows_the_words_without_controls(self):
        fake = JudgingFake()
        claimed(fake, by="bo")
        fake.words["rev-1"] = [{"issue": 0, "verdict": "agree", "reason": None}]
        at = open_review(fake)
        assert not [r for r in at.radio if r.key == form_keys()[0]]
        text = all_text(at)
        assert "Claim the item to agree with or dismiss the Critic's issues." in text
        assert "**agree**" in text


class TestDatasetsPage:
    def open(self, fake: JudgingFake):
        at = make_app(fake).run()
        at.switch_page("views/datasets.py").run()
        assert_clean(at)
        return at

    def test_prepares_the_chosen_kind_and_offers_the_download(self):
        fake = JudgingFake()
        at = self.open(fake)
        assert at.title[0].value == "Datasets"
        assert fake.called("export_dataset") == []  # nothing fetched before asked
        at.radio(key="datasets-kind").set_value("preference").run()
        at.selectbox(key="datasets-decision").set_value("edit").run()
        at.text_input(key="datasets-tag").input("docs").run()
        at.button(key="datasets-prepare").click().run()
        assert_clean(at)
        [(args, kwargs)] = fake.called("export_dataset")
        assert args == ("preference",)
        assert kwargs == {
            "since": None,
            "until": None,
            "profile": None,
            "tag": "docs",
            "decision": "edit",
        }
        assert "2 preference records ready." in all_text(at)
        assert at.get("download_button")

    def test_a_refused_export_says_why(self):
        fake = JudgingFake()
        fake.fail_export = ApiError(422, "ValidationError", "tag: String should match pattern")
        at = self.open(fake)
        at.button(key="datasets-prepare").click().run()
        assert any("String should match pattern" in e.value for e in at.error)
        assert not at.get("download_button")

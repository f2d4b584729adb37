"""AppTest: the Knowledge page as an admin writes it and a reviewer reads it."""

from __future__ import annotations

import re
from typing import Any

from streamlit.testing.v1 import AppTest

from console.client import ApiError
from console.view import md_literal
from tests.ui.fakes import FakeClient, knowledge_entry
from tests.ui.test_app import all_text, assert_clean, has_key, make_app, shown
from tests.ui.test_untrusted import visible

ADMIN = {"name": "root", "role": "admin", "id": "tok_root"}
PAGE = "views/knowledge.py"


def entries() -> list[dict]:
    return [
        knowledge_entry("kn_rule1", created_at="2026-11-30T10:00:00+00:00"),
        knowledge_entry(
            "kn_pit1",
            kind="logic_pitfall",
            title="Dosage units",
            body="mg and mcg differ a thousandfold; check the unit of every dose.",
            profiles=["medical"],
            created_at="2026-11-30T11:00:00+00:00",
        ),
        knowledge_entry(
            "general.weights",
            kind="evidence_hierarchy",
            title="Evidence weights",
            body="A statute outweighs a commentary.",
            profiles=[],
            pack="general",
            weight=0.8,
            created_at="2026-11-30T09:00:00+00:00",
        ),
        knowledge_entry(
            "kn_old",
            title="Old rule",
            retired=True,
            created_at="2026-11-29T09:00:00+00:00",
        ),
    ]


def open_knowledge(fake: FakeClient, *, admin: bool = True, **state: Any) -> AppTest:
    if admin:
        state["user"] = ADMIN
    at = make_app(fake, **state).run()
    at.switch_page(PAGE).run()
    assert_clean(at)
    if admin:
        at.toggle(key="knowledge-new-open").set_value(True).run()  # open the "New entry" form
    return at


def titles(at: AppTest) -> list[str]:
    """The entries' titles as listed, in order (the bold first line of each card)."""
    return [
        shown(m.value).replace("**", "").replace(":blue-badge[linked] ", "")
        for m in at.markdown
        if m.value.startswith(("**", ":blue-badge"))
    ]


def test_a_reviewer_reads_every_active_entry_newest_first_without_a_way_to_write():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake, admin=False)
    assert at.title[0].value == "Knowledge"
    assert titles(at) == ["Dosage units", "Statutes: cite the jurisdiction", "Evidence weights"]
    text = all_text(at)
    assert "mg and mcg differ a thousandfold; check the unit of every dose." in text
    assert "logic pitfall · profiles medical · weight 1.00 · from api · by admin" in text
    assert "every profile · weight 0.80 · from general" in text
    assert "Reading only: creating, editing and retiring entries needs the admin role." in text
    assert not has_key(at, "knowledge-new-open")  # no "New entry" form
    assert not [b for b in at.button if b.key and b.key.startswith("knowledge-")]
    assert not fake.called("create_knowledge")
    assert not fake.called("retire_knowledge")


def test_an_admin_creates_an_entry_and_sees_it_listed():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake)
    at.selectbox(key="knowledge-new-kind").set_value("rule_anchor")
    at.text_input(key="knowledge-new-title").input("Cite the statute's year")
    at.text_area(key="knowledge-new-body").input("A statute named without its year is ambiguous.")
    at.text_input(key="knowledge-new-profiles").input("legal, general")
    at.number_input(key="knowledge-new-weight").set_value(0.9)
    at.button(key="knowledge-create").click().run()
    assert_clean(at)
    [(_, sent)] = fake.called("create_knowledge")
    assert sent == {
        "kind": "rule_anchor",
        "title": "Cite the statute's year",
        "profiles": ["legal", "general"],
        "weight": 0.9,
    }
    assert shown(at.success[0].value) == "Created kn_new5: Cite the statute's year."
    assert titles(at)[0] == "Cite the statute's year"
    assert "profiles legal, general · weight 0.90 · from api · by root" in all_text(at)
    # the form is empty again for the next entry
    assert at.text_input(key="knowledge-new-title").value == ""


def test_the_apis_422_shows_next_to_the_form_and_keeps_what_was_typed():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake)
    at.text_input(key="knowledge-new-title").input("   ")
    at.text_area(key="knowledge-new-body").input("Body kept.")
    at.button(key="knowledge-create").click().run()
    assert_clean(at)
    [error] = at.error
    assert shown(error.value) == (
        "Could not create the entry: title: String should have at least 1 character"
    )
    assert at.text_area(key="knowledge-new-body").value == "Body kept."
    assert len(fake.knowledge) == 4
    assert not at.success


def test_an_admin_edits_an_entry_and_only_the_changed_fields_are_sent():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake)
    at.button(key="knowledge-edit-button-kn_pit1").click().run()
    at.text_input(key="knowledge-edit-kn_pit1-title").input("Dosage units (mg, mcg)")
    at.button(key="knowledge-edit-kn_pit1-save").click().run()
    assert_clean(at)
    assert fake.called("update_knowledge") == [(("kn_pit1",), {"title": "Dosage units (mg, mcg)"})]
    assert shown(at.success[0].value) == "Saved kn_pit1."
    assert "Dosage units (mg, mcg)" in titles(at)
    assert not has_key(at, "knowledge-edit-kn_pit1-title")  # the form closed


def test_an_edit_the_api_refuses_keeps_the_form_open_with_its_message():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake)
    at.button(key="knowledge-edit-button-kn_pit1").click().run()
    at.text_area(key="knowledge-edit-kn_pit1-body").input("  ")
    at.button(key="knowledge-edit-kn_pit1-save").click().run()
    assert shown(at.error[0].value) == (
        "Could not save: body: String should have at least 1 character"
    )
    assert has_key(at, "knowledge-edit-kn_pit1-body")
    assert fake.knowledge["kn_pit1"]["body"].startswith("mg and mcg")


def test_an_admin_retires_after_confirming_and_brings_it_back():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake)
    at.button(key="knowledge-retire-kn_rule1").click().run()
    assert "Retire this entry?" in at.warning[0].value
    assert not fake.called("retire_knowledge")
    at.button(key="knowledge-retire-yes-kn_rule1").click().run()
    assert_clean(at)
    assert fake.called("retire_knowledge") == [(("kn_rule1",), {})]
    assert shown(at.success[0].value) == "Retired kn_rule1: no new call receives it."
    assert "Statutes: cite the jurisdiction" not in titles(at)

    at.selectbox(key="knowledge-show").set_value("retired").run()
    assert titles(at) == ["Statutes: cite the jurisdiction", "Old rule"]
    at.button(key="knowledge-restore-kn_rule1").click().run()
    assert fake.called("update_knowledge") == [(("kn_rule1",), {"retired": False})]
    assert titles(at) == ["Old rule"]


def test_cancelling_a_retire_changes_nothing():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake)
    at.button(key="knowledge-retire-kn_rule1").click().run()
    at.button(key="knowledge-retire-no-kn_rule1").click().run()
    assert not fake.called("retire_knowledge")
    assert not at.warning
    assert "Statutes: cite the jurisdiction" in titles(at)


def test_filters_by_kind_profile_and_retired_reach_the_api():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake, admin=False)
    at.selectbox(key="knowledge-kind").set_value("logic_pitfall").run()
    assert titles(at) == ["Dosage units"]
    at.selectbox(key="knowledge-kind").set_value("").run()
    at.text_input(key="knowledge-profile").input("legal").run()
    # an entry for every profile applies to legal too
    assert titles(at) == ["Statutes: cite the jurisdiction", "Evidence weights"]
    assert fake.called("list_knowledge")[-1][1] == {
        "kind": None,
        "profile": "legal",
        "include_retired": False,
    }
    at.selectbox(key="knowledge-show").set_value("all").run()
    assert titles(at) == ["Statutes: cite the jurisdiction", "Evidence weights", "Old rule"]
    assert "**retired**" in " ".join(c.value for c in at.caption)


def test_search_shows_what_a_call_would_receive_best_first_with_scores():
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake, admin=False)
    at.text_input(key="knowledge-search").input("check the dosage unit of each dose").run()
    assert_clean(at)
    assert fake.called("search_knowledge")[-1] == (
        ("check the dosage unit of each dose",),
        {"profile": None},
    )
    assert titles(at)[0] == "Dosage units"
    scores = [float(x) for x in re.findall(r"score ([\d.]+)", all_text(at))]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == 5  # the fake's score: words shared with the text
    assert at.selectbox(key="knowledge-show").disabled  # search never offers retired entries
    at.text_input(key="knowledge-search").input("zebra crossing").run()
    assert "No entry matches this text." in at.info[0].value


def test_a_link_from_the_review_page_shows_that_entry_first():
    fake = FakeClient(knowledge=entries())
    at = make_app(fake, user=ADMIN).run()
    at.switch_page(PAGE)
    at.query_params["entry"] = "general.weights"
    at.run()
    assert_clean(at)
    assert [s.value for s in at.subheader] == ["Linked entry"]
    assert titles(at) == [
        "Evidence weights",
        "Dosage units",
        "Statutes: cite the jurisdiction",
    ]


def test_a_link_to_an_unknown_entry_says_so_and_lists_the_rest():
    fake = FakeClient(knowledge=entries())
    at = make_app(fake).run()
    at.switch_page(PAGE)
    at.query_params["entry"] = "kn_gone"
    at.run()
    assert "The linked entry kn\\_gone: no knowledge entry kn\\_gone" == at.warning[0].value
    assert len(titles(at)) == 3


def test_empty_states_say_why():
    at = open_knowledge(FakeClient(), admin=False)
    assert at.info[0].value == "No knowledge entries yet."
    fake = FakeClient(knowledge=entries())
    at = open_knowledge(fake, admin=False)
    at.selectbox(key="knowledge-kind").set_value("lesson").run()
    assert at.info[0].value == "No entries match these filters."


def test_a_listing_error_is_shown():
    fake = FakeClient(knowledge=entries())
    fake.fail_knowledge = ApiError(403, "Forbidden", "this needs the role reviewer")
    at = open_knowledge(fake, admin=False)
    assert shown(at.error[0].value) == "Could not list the entries: this needs the role reviewer"


def test_untrusted_entry_text_shows_as_text():
    evil = "x ![p](http://evil.example/p.png) **loud** [go](http://evil.example/)"
    fake = FakeClient(
        knowledge=[knowledge_entry(title=evil, body=evil, author=evil, pack=evil, profiles=[])]
    )
    at = open_knowledge(fake, admin=False)
    text = visible(at)  # no Markdown slot renders a link, image or rewrite
    assert shown(f"**{md_literal(evil)}**").strip("*") in text
    assert [t.value for t in at.text] == [evil]
    assert f"by {evil}" in text
    assert f"from {evil}" in text

"""Knowledge packs and entries: the API (admins write, reviewers read), pack files, ranking
by the database's text index, and what the Critic receives and records."""

import random

import pytest

from orchestrator.app import create_app
from orchestrator.db import session_scope
from orchestrator.knowledge.service import PackError
from orchestrator.tables import KnowledgeEntry
from tests.orchestrator.conftest import ADMIN_TOKEN, mint, start, wait_for
from tests.support.apps import serving
from tests.support.fakemodel import user_text

ENTRY = {
    "kind": "logic_pitfall",
    "title": "Unsigned is not void",
    "body": "A contract without a handwritten signature can still bind: check whether a "
    "qualified electronic signature was used before calling it invalid.",
    "profiles": ["legal"],
}


class TestApi:
    async def test_admin_writes_reviewer_reads(self, api):
        created = await api.post("/v1/knowledge", json=ENTRY)
        assert created.status_code == 201, created.text
        entry = created.json()
        assert (entry["pack"], entry["retired"], entry["weight"]) == ("api", False, 1.0)
        reviewer = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        listed = await api.get("/v1/knowledge", headers=reviewer)
        assert [e["id"] for e in listed.json()] == [entry["id"]]
        one = await api.get(f"/v1/knowledge/{entry['id']}", headers=reviewer)
        assert one.json()["title"] == "Unsigned is not void"
        refused = await api.post("/v1/knowledge", json=ENTRY, headers=reviewer)
        assert refused.status_code == 403
        patch = await api.patch(
            f"/v1/knowledge/{entry['id']}", json={"weight": 0.4}, headers=reviewer
        )
        assert patch.status_code == 403

    async def test_patch_changes_only_what_is_sent_and_delete_retires(self, api):
        entry = (await api.post("/v1/knowledge", json=ENTRY)).json()
        patched = await api.patch(f"/v1/knowledge/{entry['id']}", json={"weight": 0.4})
        assert patched.status_code == 200, patched.text
        assert (patched.json()["weight"], patched.json()["title"]) == (0.4, ENTRY["title"])
        retired = await api.delete(f"/v1/knowledge/{entry['id']}")
        assert retired.json()["retired"] is True
        assert (await api.get("/v1/knowledge")).json() == []
        kept = (await api.get("/v1/knowledge", params={"include_retired": True})).json()
        assert [e["id"] for e in kept] == [entry["id"]]
        back = await api.patch(f"/v1/knowledge/{entry['id']}", json={"retired": False})
        assert back.json()["retired"] is False

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({**ENTRY, "kind": "rumour"}, "kind"),
            ({**ENTRY, "title": "  "}, "title"),
            ({**ENTRY, "weight": 1.5}, "weight"),
            ({**ENTRY, "profiles": ["Legal!"]}, "profiles"),
            ({**ENTRY, "colour": "red"}, "colour"),
            ({k: v for k, v in ENTRY.items() if k != "body"}, "body"),
        ],
    )
    async def test_bad_entries_are_422_naming_the_field(self, api, body, field):
        response = await api.post("/v1/knowledge", json=body)
        assert response.status_code == 422
        assert field in [str(p) for p in response.json()["detail"][0]["loc"]]

    async def test_bad_patches_are_422_and_unknown_ids_404(self, api):
        entry = (await api.post("/v1/knowledge", json=ENTRY)).json()
        empty = await api.patch(f"/v1/knowledge/{entry['id']}", json={})
        assert empty.status_code == 422
        assert "send at least one field" in empty.text
        null = await api.patch(f"/v1/knowledge/{entry['id']}", json={"title": None})
        assert null.status_code == 422
        assert "title cannot be null" in null.text
        assert (await api.get("/v1/knowledge/kn_nope")).status_code == 404
        assert (await api.delete("/v1/knowledge/kn_nope")).status_code == 404

    async def test_no_token_is_401(self, api):
        response = await api.get("/v1/knowledge", headers={"Authorization": ""})
        assert response.status_code == 401


WORDS = (
    "contract tenant landlord deposit court appeal notice payment invoice refund damages "
    "clause liability employer employee salary dismissal warranty delivery seller buyer "
    "lease rent property insurance claim policy premium tax audit filing company board"
).split()


class TestRanking:
    async def test_the_right_entry_comes_first_among_a_thousand(self, api, orchestrator_app):
        rng = random.Random(7)
        with session_scope(orchestrator_app.state.engine) as session:
            for n in range(999):
                session.add(
                    KnowledgeEntry(
                        id=f"filler.{n:04d}",
                        kind="rule_anchor",
                        title=" ".join(rng.sample(WORDS, 3)),
                        body=" ".join(rng.choices(WORDS, k=25)) + " signature contract.",
                        profiles=[],
                    )
                )
            session.add(
                KnowledgeEntry(
                    id="legal.esign",
                    kind="logic_pitfall",
                    title="Electronic signatures",
                    body="A qualified electronic signature satisfies the written form; an "
                    "unsigned paper contract is not automatically void.",
                    profiles=[],
                )
            )
        task = "Is my rental contract void because I only signed it with an electronic signature?"
        response = await api.get("/v1/knowledge/search", params={"q": task})
        assert response.status_code == 200, response.text
        found = response.json()
        assert [m["entry"]["id"] for m in found][0] == "legal.esign"
        assert len(found) == 3
        assert found[0]["score"] > found[1]["score"] >= found[2]["score"] > 0

    async def test_retired_and_other_profile_entries_are_not_offered(self, api):
        legal = (await api.post("/v1/knowledge", json=ENTRY)).json()
        anywhere = (
            await api.post(
                "/v1/knowledge", json={**ENTRY, "profiles": [], "title": "Electronic signature"}
            )
        ).json()
        q = {"q": "electronic signature contract"}
        for_general = await api.get("/v1/knowledge/search", params={**q, "profile": "general"})
        assert [m["entry"]["id"] for m in for_general.json()] == [anywhere["id"]]
        await api.delete(f"/v1/knowledge/{anywhere['id']}")
        for_legal = await api.get("/v1/knowledge/search", params={**q, "profile": "legal"})
        assert [m["entry"]["id"] for m in for_legal.json()] == [legal["id"]]

    async def test_a_text_without_words_finds_nothing(self, api):
        await api.post("/v1/knowledge", json=ENTRY)
        response = await api.get("/v1/knowledge/search", params={"q": "?! -- ..."})
        assert response.json() == []


class TestThreshold:
    async def test_entries_under_the_score_threshold_are_not_offered(
        self, orchestrator_settings, peers
    ):
        settings = orchestrator_settings.model_copy(update={"knowledge_min_score": 1000.0})
        app = create_app(settings, peer_transports=peers)
        async with serving(app, ADMIN_TOKEN) as api:
            await api.post("/v1/knowledge", json={**ENTRY, "profiles": []})
            found = await api.get("/v1/knowledge/search", params={"q": "electronic signature"})
        assert found.json() == []

    async def test_at_most_three_are_offered(self, api):
        for n in range(5):
            await api.post("/v1/knowledge", json={**ENTRY, "profiles": [], "title": f"Sig {n}"})
        found = await api.get("/v1/knowledge/search", params={"q": "electronic signature"})
        assert len(found.json()) == 3


class TestTheCriticReceivesThem:
    async def test_a_critique_gets_and_records_the_relevant_entries(self, api, fake_model):
        tides = (
            await api.post(
                "/v1/knowledge",
                json={
                    "kind": "rule_anchor",
                    "title": "Tides follow the Moon",
                    "body": "Two tides a day: the Moon's gravity and the Earth's rotation.",
                },
            )
        ).json()
        legal = (await api.post("/v1/knowledge", json={**ENTRY, "body": "Tides law."})).json()
        run = await wait_for(api, await start(api, task="Explain tides.", policy={"max_rounds": 1}))
        critique = run["rounds"][0]["critique"]
        assert critique["knowledge_used"] == [tides["id"]]
        [call] = [c for c in fake_model.requests() if c["stage"] == "critique"]
        text = user_text(call)
        assert f"[knowledge:{tides['id']}] (rule_anchor) Tides follow the Moon:" in text
        assert legal["id"] not in text
        assert text.index("<knowledge>") < text.index("<candidate_output>")


PACK = """
pack = "lease"

[[entries]]
key = "deposit"
kind = "rule_anchor"
title = "Deposit return"
body = "A landlord must return the deposit within the period the lease law sets."
profiles = ["legal"]

[[entries]]
key = "blogs"
kind = "evidence_hierarchy"
title = "Personal blogs"
body = "A lawyer's personal blog is weak evidence of what the law says."
weight = 0.2
"""


class TestPacks:
    async def test_packs_load_at_start_and_again_without_duplicates(
        self, tmp_path, orchestrator_settings, peers
    ):
        (tmp_path / "lease.toml").write_text(PACK)
        settings = orchestrator_settings.model_copy(update={"knowledge_dir": tmp_path})
        for _ in range(2):
            async with serving(create_app(settings, peer_transports=peers), ADMIN_TOKEN) as api:
                entries = (await api.get("/v1/knowledge")).json()
        by_id = {e["id"]: e for e in entries}
        assert set(by_id) == {"lease.deposit", "lease.blogs"}
        assert by_id["lease.blogs"]["weight"] == 0.2
        assert by_id["lease.deposit"]["pack"] == "lease"

    @pytest.mark.parametrize(
        ("text", "field"),
        [
            (PACK.replace('kind = "rule_anchor"', 'kind = "rumour"'), "entries.0.kind"),
            (PACK.replace("weight = 0.2", "weight = 2"), "entries.1.weight"),
            (PACK.replace('key = "blogs"', 'key = "deposit"'), "entries"),
            (PACK.replace('pack = "lease"', ""), "pack"),
        ],
    )
    async def test_a_bad_pack_stops_the_start_naming_file_and_field(
        self, tmp_path, orchestrator_settings, text, field
    ):
        path = tmp_path / "lease.toml"
        path.write_text(text)
        settings = orchestrator_settings.model_copy(update={"knowledge_dir": tmp_path})
        app = create_app(settings)
        starting = app.router.lifespan_context(app)
        with pytest.raises(PackError) as caught:
            await starting.__aenter__()
        assert str(caught.value).startswith(f"knowledge pack {path}: field `{field}`")

"""Knowledge packs and entries: the API (admins write, reviewers read), pack files, ranking
by the database's text index (and by embeddings when on), and what the Actor and the Critic
receive and record."""

import math
import random
import struct

import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from fakemodel.embeddings import embed
from orchestrator.app import create_app
from orchestrator.db import session_scope
from orchestrator.engine.steps import act, critique
from orchestrator.knowledge.embeddings import cosine, entry_text
from orchestrator.knowledge.service import PackError
from orchestrator.tables import KnowledgeEntry
from tests.critic.conftest import scripted
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

TIDES = {
    "kind": "rule_anchor",
    "title": "Tides follow the Moon",
    "body": "Two tides a day: the Moon's gravity and the Earth's rotation.",
}
NEAP_TIDES = {"kind": "lesson", "title": "Neap tides", "body": "Mention neap tides."}


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
    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_bad_entries_are_422_naming_the_field(self, api, body, field):
        response = await api.post("/v1/knowledge", json=body)
        assert response.status_code == 422
        assert field in [str(p) for p in response.json()["detail"][0]["loc"]]

    @pytest.mark.sqlite_only  # a validation: the database plays no part
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
        tides = (await api.post("/v1/knowledge", json=TIDES)).json()
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


class TestTheActorReceivesThem:
    async def test_every_actor_call_gets_the_entries_chosen_at_the_draft_and_records_them(
        self, api, fake_model
    ):
        tides = (await api.post("/v1/knowledge", json=TIDES)).json()
        lesson = (await api.post("/v1/knowledge", json=NEAP_TIDES)).json()
        fake_model.script(
            {"stage": "critique", "response": scripted(verdict="revise")},
            {"stage": "critique", "response": PASS},
        )
        run_id = await start(api, task="Explain the tides.", policy={"max_rounds": 2})
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", run
        chosen = set(run["actor_knowledge"])
        assert chosen == {tides["id"], lesson["id"]}
        assert run["lessons_used"] == [lesson["id"]]
        assert [set(r["actor_knowledge"]) for r in run["rounds"]] == [chosen, chosen]
        assert set(run["rounds"][0]["critique"]["knowledge_used"]) == chosen
        actor_calls = [c for c in fake_model.requests() if c["stage"] in ("draft", "revise")]
        assert [c["stage"] for c in actor_calls] == ["draft", "revise"]
        for call in actor_calls:
            text = user_text(call)
            lesson_at = text.index("[lesson from a reviewer] Mention neap tides.")
            anchor_at = text.index("[rule_anchor] Tides follow the Moon: Two tides a day")
            assert text.index("<knowledge>") < lesson_at < anchor_at  # lessons first
        uses = {e["id"]: e["uses"] for e in (await api.get("/v1/knowledge")).json()}
        assert uses == {tides["id"]: 1, lesson["id"]: 1}  # one run, counted once

    async def test_a_task_with_no_relevant_entry_gets_no_knowledge_block(self, api, fake_model):
        await api.post("/v1/knowledge", json={**ENTRY, "profiles": []})
        run = await wait_for(
            api, await start(api, task="Summarise the French revolution.", policy={"max_rounds": 1})
        )
        assert run["actor_knowledge"] == []
        assert run["rounds"][0]["actor_knowledge"] == []
        [draft] = [c for c in fake_model.requests() if c["stage"] == "draft"]
        assert "<knowledge>" not in user_text(draft)


PASS = scripted(verdict="pass", confidence=0.9, reflection="Nothing to change.", error_class="none")
QUERY = "What dosage of medicine should a physician give to kids?"
DECOY = {
    "kind": "rule_anchor",
    "title": "Give medicine only on prescription",
    "body": "Should a pharmacy give medicine without a prescription? Never.",
}
PARAPHRASE = {
    "kind": "logic_pitfall",
    "title": "Doctors and children",
    "body": "A doctor must set the medication amount for children by their weight.",
}


def received_cosine(query: str, entry: dict) -> float:
    """The cosine the orchestrator computes: the fake's vectors, sent as float32 (base64)."""

    def as_sent(text: str) -> list[float]:
        vector = embed(text)
        return list(struct.unpack(f"<{len(vector)}f", struct.pack(f"<{len(vector)}f", *vector)))

    return cosine(as_sent(query), as_sent(entry_text(entry["title"], entry["body"], "")))


def embedding_calls(fake_model) -> list[dict]:
    return [c for c in fake_model.requests() if c["stage"] == "embeddings"]


@pytest.fixture
def embeddings_on(orchestrator_settings, fake_model, peers):
    def build(**extra):
        settings = orchestrator_settings.model_copy(
            update={
                "knowledge_embeddings": True,
                "knowledge_embedding_base_url": fake_model.openai_base_url,
                "knowledge_embedding_api_key": SecretStr("sk-test-embeddings"),
                **extra,
            }
        )
        return serving(create_app(settings, peer_transports=peers), ADMIN_TOKEN)

    return build


class TestEmbeddings:
    async def test_off_the_text_index_ranks_and_no_embedding_request_is_sent(self, api, fake_model):
        decoy = (await api.post("/v1/knowledge", json=DECOY)).json()
        await api.post("/v1/knowledge", json=PARAPHRASE)
        found = (await api.get("/v1/knowledge/search", params={"q": QUERY})).json()
        assert [m["entry"]["id"] for m in found] == [decoy["id"]]
        await wait_for(api, await start(api, task=QUERY, policy={"max_rounds": 1}))
        assert embedding_calls(fake_model) == []

    async def test_on_a_paraphrase_ranks_first_for_the_search_and_for_the_actor(
        self, embeddings_on, fake_model
    ):
        async with embeddings_on() as api:
            await api.post("/v1/knowledge", json=DECOY)
            paraphrase = (await api.post("/v1/knowledge", json=PARAPHRASE)).json()
            found = (await api.get("/v1/knowledge/search", params={"q": QUERY})).json()
            run = await wait_for(api, await start(api, task=QUERY, policy={"max_rounds": 1}))
        assert [m["entry"]["id"] for m in found] == [paraphrase["id"]]
        assert found[0]["score"] == pytest.approx(received_cosine(QUERY, PARAPHRASE), abs=1e-5)
        assert run["actor_knowledge"] == [paraphrase["id"]]
        assert run["rounds"][0]["critique"]["knowledge_used"] == [paraphrase["id"]]
        [draft] = [c for c in fake_model.requests() if c["stage"] == "draft"]
        assert "Doctors and children: A doctor must set the medication amount" in user_text(draft)
        calls = embedding_calls(fake_model)
        assert calls
        assert all(c["model"] == "text-embedding-3-small" for c in calls)
        embedded = [t for c in calls for t in c["body"]["input"]]
        assert embedded.count(entry_text(PARAPHRASE["title"], PARAPHRASE["body"], "")) == 1

    async def test_an_edited_entry_is_embedded_again(self, embeddings_on, fake_model):
        async with embeddings_on() as api:
            paraphrase = (await api.post("/v1/knowledge", json=PARAPHRASE)).json()
            first = (await api.get("/v1/knowledge/search", params={"q": QUERY})).json()
            await api.patch(
                f"/v1/knowledge/{paraphrase['id']}",
                json={"body": "Lease deposits are returned within thirty days."},
            )
            second = (await api.get("/v1/knowledge/search", params={"q": QUERY})).json()
        assert [m["entry"]["id"] for m in first] == [paraphrase["id"]]
        assert second == []
        embedded = [t for c in embedding_calls(fake_model) for t in c["body"]["input"]]
        assert "Doctors and children\nLease deposits are returned within thirty days." in embedded

    async def test_the_similarity_threshold_is_inclusive(self, embeddings_on):
        exact = received_cosine(QUERY, PARAPHRASE)
        assert 0.6 < exact < 1.0
        for threshold, expected in ((exact, 1), (math.nextafter(exact, 1.0), 0)):
            async with embeddings_on(knowledge_min_similarity=threshold) as api:
                await api.post("/v1/knowledge", json=PARAPHRASE)
                found = (await api.get("/v1/knowledge/search", params={"q": QUERY})).json()
                for entry in (await api.get("/v1/knowledge")).json():
                    await api.delete(f"/v1/knowledge/{entry['id']}")
            assert len(found) == expected, threshold

    async def test_provider_down_falls_back_to_the_text_index_and_the_run_succeeds(
        self, embeddings_on, fake_model
    ):
        fake_model.faults(*[{"stage": "embeddings", "status": 503}] * 20)
        fake_model.script({"stage": "critique", "response": PASS})
        with capture_logs() as logs:  # whatever an earlier test configured logging to print
            async with embeddings_on() as api:
                decoy = (await api.post("/v1/knowledge", json=DECOY)).json()
                await api.post("/v1/knowledge", json=PARAPHRASE)
                found = (await api.get("/v1/knowledge/search", params={"q": QUERY})).json()
                run = await wait_for(api, await start(api, task=QUERY, policy={"max_rounds": 1}))
        assert [m["entry"]["id"] for m in found] == [decoy["id"]]
        assert run["status"] == "succeeded"
        assert run["actor_knowledge"] == [decoy["id"]]
        assert {c["status"] for c in embedding_calls(fake_model)} == {503}
        assert "knowledge embeddings unavailable: ranking by the text index alone" in [
            entry["event"] for entry in logs
        ]


class TestReRunSteps:
    """A step cut off after its peer answered runs again on recovery with the same
    idempotency key; the peer replays its answer only for a byte-identical request. An entry
    edited in between must not change what the re-run sends: each run keeps the entries its
    calls received, content included."""

    async def test_a_re_run_critique_after_an_entry_was_edited_still_gets_its_verdict(
        self, api, fake_model
    ):
        tides = (await api.post("/v1/knowledge", json=TIDES)).json()
        run_id = await start(
            api, task="Explain tides.", policy={"max_rounds": 1, "review": "before_critique"}
        )
        await wait_for(api, run_id, statuses={"awaiting_review"})
        fake_model.script({"stage": "critique", "response": PASS})
        first = await critique(run_id, 1, None, None)
        edited = await api.patch(
            f"/v1/knowledge/{tides['id']}",
            json={"body": "Tides: the Moon and, less, the Sun."},
        )
        assert edited.status_code == 200, edited.text
        again = await critique(run_id, 1, None, None)  # the re-run: same key, same body
        assert again.verdict == first.verdict == "pass"
        calls = [c for c in fake_model.requests() if c["stage"] == "critique"]
        assert len(calls) == 1  # the Critic replayed its answer: billed once
        assert "the Moon's gravity" in user_text(calls[0])

    async def test_a_re_run_draft_after_an_entry_was_edited_still_gets_its_answer(
        self, api, fake_model
    ):
        lesson = (await api.post("/v1/knowledge", json=NEAP_TIDES)).json()
        run_id = await start(
            api, task="Explain the tides.", policy={"max_rounds": 1, "review": "before_critique"}
        )
        await wait_for(api, run_id, statuses={"awaiting_review"})
        edited = await api.patch(
            f"/v1/knowledge/{lesson['id']}", json={"body": "Mention spring tides."}
        )
        assert edited.status_code == 200, edited.text
        again = await act(run_id, 1, "draft", 1, [])  # the re-run of the draft step
        assert again.stop is None, again
        drafts = [c for c in fake_model.requests() if c["stage"] == "draft"]
        assert len(drafts) == 1  # the Actor replayed its answer
        assert "Mention neap tides." in user_text(drafts[0])

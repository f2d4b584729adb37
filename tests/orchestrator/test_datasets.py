"""Judging the Critic issue by issue, and reviewed runs exported as datasets (SQLite and
Postgres): what a person approved, edited, commented on or rejected, and their agree /
dismiss on the Critic's issues, come back as JSONL that Hugging Face `datasets` loads."""

import importlib
import json

import pytest

from tests.orchestrator.conftest import mint, start, wait_for
from tests.orchestrator.test_decisions import IGNORED, IGNORED_AGAIN, MOON, actor_says

ESCALATES = "Explain tides."  # with max_rounds 1: escalated, the Critic wants round 1 revised
FINAL = {"succeeded", "escalated", "failed", "cancelled"}


async def escalated(api, *, task: str = ESCALATES, **body) -> tuple[str, dict]:
    run_id = await start(api, task=task, policy={"max_rounds": 1}, **body)
    await wait_for(api, run_id)
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    assert item["kind"] == "escalation"
    return run_id, item


async def claimed(api, item, headers=None) -> dict:
    headers = headers or {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
    response = await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)
    assert response.status_code == 200, response.text
    return headers


async def judge(api, item, headers, *judgements):
    return await api.post(
        f"/v1/reviews/{item['id']}/judgements",
        json={"judgements": list(judgements)},
        headers=headers,
    )


async def decide(api, item, headers, **body) -> dict:
    response = await api.post(f"/v1/reviews/{item['id']}/decision", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def export(api, headers=None, **params) -> list[dict]:
    response = await api.get("/v1/datasets/export", params=params, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


DISMISS = {"issue": 0, "verdict": "dismiss", "reason": "The draft already says this."}


class TestJudgements:
    async def test_dismissing_an_issue_changes_the_agreement_figures(self, api):
        _, item = await escalated(api)
        headers = await claimed(api, item)
        critique = (await api.get(f"/v1/reviews/{item['id']}")).json()["context"]["critiques"][0]
        issue = critique["issues"][0]
        before = (await api.get("/v1/stats")).json()["critic_issue_agreement"]
        assert before == []
        response = await judge(api, item, headers, {"issue": 0, "verdict": "agree"})
        assert response.status_code == 200, response.text
        row = {
            "profile": "default",
            "error_type": issue["error_type"],
            "dimension": issue["dimension"],
            "judged": 1,
        }
        agreed = (await api.get("/v1/stats")).json()["critic_issue_agreement"]
        assert agreed == [{**row, "agreed": 1, "dismissed": 0, "rate": 1.0}]
        # a second word on the same issue replaces the first
        [judged] = (await judge(api, item, headers, DISMISS)).json()
        assert (judged["verdict"], judged["reason"], judged["round"]) == (
            "dismiss",
            DISMISS["reason"],
            1,
        )
        dismissed = (await api.get("/v1/stats")).json()["critic_issue_agreement"]
        assert dismissed == [{**row, "agreed": 0, "dismissed": 1, "rate": 0.0}]
        shown = (await api.get(f"/v1/reviews/{item['id']}")).json()["judgements"]
        assert [(j["issue"], j["verdict"]) for j in shown] == [(0, "dismiss")]

    async def test_judgements_ride_on_the_decision(self, api):
        _, item = await escalated(api)
        headers = await claimed(api, item)
        await decide(api, item, headers, action="approve", critic_judgements=[DISMISS])
        shown = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert shown["status"] == "resolved"
        assert [(j["issue"], j["verdict"]) for j in shown["judgements"]] == [(0, "dismiss")]
        # the reviewer who decided may still change their word afterwards
        again = await judge(api, item, headers, {"issue": 0, "verdict": "agree"})
        assert again.status_code == 200, again.text
        assert again.json()[0]["verdict"] == "agree"

    async def test_a_decision_with_a_bad_judgement_changes_nothing(self, api):
        _, item = await escalated(api)
        headers = await claimed(api, item)
        response = await api.post(
            f"/v1/reviews/{item['id']}/decision",
            json={"action": "approve", "critic_judgements": [{**DISMISS, "issue": 7}]},
            headers=headers,
        )
        assert response.status_code == 422
        assert "issue 7 does not exist" in response.json()["detail"]
        shown = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert (shown["status"], shown["judgements"]) == ("claimed", [])


@pytest.mark.sqlite_only
class TestJudgementInputs:
    @pytest.mark.parametrize(
        ("judgements", "said"),
        [
            ([{"issue": 3, "verdict": "agree"}], "issue 3 does not exist"),
            ([{"issue": 0, "verdict": "dismiss"}], "dismissing issue 0 needs a short reason"),
            ([{"issue": 0, "verdict": "dismiss", "reason": "x" * 301}], "at most 300"),
            ([{"issue": 0, "verdict": "agree"}] * 2, "issue 0 is judged twice"),
            ([{"issue": -1, "verdict": "agree"}], "greater than or equal to 0"),
            ([{"issue": 0, "verdict": "maybe"}], "agree"),
            ([], "at least 1"),
        ],
    )
    async def test_bad_judgements_are_a_422_that_names_the_problem(self, api, judgements, said):
        _, item = await escalated(api)
        headers = await claimed(api, item)
        response = await judge(api, item, headers, *judgements)
        assert response.status_code == 422, response.text
        assert said in json.dumps(response.json()["detail"])

    async def test_only_the_holder_or_an_admin_judges(self, api):
        _, item = await escalated(api)
        other = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        unclaimed = await judge(api, item, other, {"issue": 0, "verdict": "agree"})
        assert unclaimed.status_code == 409
        assert "claim review" in unclaimed.json()["detail"]
        await claimed(api, item)
        held = await judge(api, item, other, {"issue": 0, "verdict": "agree"})
        assert held.status_code == 409
        service = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        assert (
            await judge(api, item, service, {"issue": 0, "verdict": "agree"})
        ).status_code == 403
        admin = await judge(api, item, None, {"issue": 0, "verdict": "agree"})
        assert admin.status_code == 200, admin.text
        missing = await api.post(
            "/v1/reviews/rev_missing/judgements",
            json={"judgements": [{"issue": 0, "verdict": "agree"}]},
        )
        assert missing.status_code == 404

    async def test_an_item_without_a_critique_has_nothing_to_judge(self, api):
        run_id = await start(api, task=ESCALATES, policy={"review": "before_critique"})
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = await claimed(api, item)
        response = await judge(api, item, headers, {"issue": 0, "verdict": "agree"})
        assert response.status_code == 422
        assert "has no critique to judge" in response.json()["detail"]


async def reviewed_runs(api, fake_model) -> dict[str, str]:
    """One run decided each way: approve, edit (finish), reject, and a comment whose
    revisions missed the point and escalated, then approved."""
    ids: dict[str, str] = {}
    ids["approve"], item = await escalated(api, tags=["tides"])
    await decide(api, item, await claimed(api, item), action="approve")
    ids["edit"], item = await escalated(api)
    headers = await claimed(api, item)
    await decide(
        api,
        item,
        headers,
        action="edit",
        output="Tides: the Moon's pull.",
        finish=True,
        critic_judgements=[DISMISS],
    )
    ids["reject"], item = await escalated(api)
    await decide(api, item, await claimed(api, item), action="reject", comment="Off topic.")
    # a comment before the critique; the Actor ignores it twice, the run escalates again
    fake_model.script(actor_says(IGNORED), actor_says(IGNORED_AGAIN))
    ids["comment"] = await start(api, task=ESCALATES, policy={"review": "first_round"})
    await wait_for(api, ids["comment"])
    [item] = (await api.get("/v1/reviews", params={"run_id": ids["comment"]})).json()["items"]
    await decide(api, item, await claimed(api, item), action="comment", comment=MOON)
    await wait_for(api, ids["comment"], statuses=FINAL)
    reviews = (await api.get("/v1/reviews", params={"run_id": ids["comment"]})).json()["items"]
    [again] = [r for r in reviews if r["status"] == "pending"]
    await decide(api, again, await claimed(api, again), action="approve")
    return ids


class TestExport:
    async def test_each_kind_holds_what_people_decided(self, api, fake_model):
        ids = await reviewed_runs(api, fake_model)
        runs = {name: (await api.get(f"/v1/runs/{run_id}")).json() for name, run_id in ids.items()}
        draft = {name: run["rounds"][0]["output"] for name, run in runs.items()}

        chat = await export(api)  # chat is the default kind
        assert {r["run_id"]: r["messages"][1]["content"] for r in chat} == {
            ids["approve"]: draft["approve"],
            ids["edit"]: "Tides: the Moon's pull.",
            ids["comment"]: IGNORED_AGAIN,
        }
        assert all(r["messages"][0] == {"role": "user", "content": ESCALATES} for r in chat)
        assert {r["run_id"]: r["output_provenance"] for r in chat} == {
            ids["approve"]: "actor",
            ids["edit"]: "human",
            ids["comment"]: "actor",
        }

        pairs = await export(api, kind="preference")
        assert {(r["run_id"], r["decision"]): (r["rejected"], r["chosen"]) for r in pairs} == {
            (ids["edit"], "edit"): (draft["edit"], "Tides: the Moon's pull."),
            (ids["comment"], "comment"): (draft["comment"], IGNORED_AGAIN),
        }

        critiques = await export(api, kind="critique")
        words = {
            r["run_id"]: [i["judgement"] for i in r["issues"]]
            for r in critiques
            if r["critiqued_round"] == 1
        }
        assert words[ids["edit"]][0] == {"verdict": "dismiss", "reason": DISMISS["reason"]}
        assert words[ids["reject"]][0] is None
        assert {r["decision"] for r in critiques} == {
            "approve",
            "edit",
            "reject",
        }  # the comment came before any critique
        assert all(r["output"] for r in critiques)

        # nothing secret: no token, hash or exchange of any kind
        everything = json.dumps([chat, pairs, critiques])
        for secret in ("idempotency_key", "request_hash", "exchanges", "token", "Bearer"):
            assert secret not in everything

    async def test_filters_keep_what_they_say(self, api, fake_model):
        ids = await reviewed_runs(api, fake_model)
        edits = await export(api, decision="edit")
        assert [r["run_id"] for r in edits] == [ids["edit"]]
        tagged = await export(api, tag="tides", kind="critique")
        assert {r["run_id"] for r in tagged} == {ids["approve"]}
        assert await export(api, profile="no-such-profile") == []
        assert len(await export(api, profile="default")) == 3
        everything = await export(api, kind="critique")
        middle = sorted(r["decided_at"] for r in everything)[2]
        later = await export(api, kind="critique", since=middle)
        earlier = await export(api, kind="critique", until=middle)
        assert len(later) + len(earlier) == len(everything)
        assert all(r["decided_at"] >= middle for r in later)
        assert all(r["decided_at"] < middle for r in earlier)

    async def test_a_service_exports_its_own_runs_only(self, api):
        own = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        other = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        response = await api.post(
            "/v1/runs", json={"task": ESCALATES, "policy": {"max_rounds": 1}}, headers=own
        )
        run_id = response.json()["id"]
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = await claimed(api, item)
        await decide(api, item, headers, action="approve", critic_judgements=[DISMISS])
        _, admins = await escalated(api)
        await decide(api, admins, await claimed(api, admins), action="approve")
        assert [r["run_id"] for r in await export(api, own)] == [run_id]
        assert await export(api, other) == []
        assert await export(api, other, kind="critique") == []
        assert len(await export(api)) == 2  # an admin exports everyone's
        hidden = await api.get(f"/v1/reviews/{item['id']}", headers=other)
        assert hidden.status_code == 404  # nor are its judgements shown to another tenant


@pytest.mark.sqlite_only
class TestExportInputs:
    @pytest.mark.parametrize(
        ("params", "status", "said"),
        [
            ({"kind": "sft"}, 422, "chat"),
            ({"decision": "maybe"}, 422, "approve"),
            ({"since": "yesterday"}, 422, "since"),
            ({"tag": "Not A Tag"}, 422, "tag"),
            ({"profile": "x" * 101}, 422, "profile"),
            (
                {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
                400,
                "must be after since",
            ),
        ],
    )
    async def test_bad_filters_are_a_clear_4xx(self, api, params, status, said):
        response = await api.get("/v1/datasets/export", params=params)
        assert response.status_code == status, response.text
        assert said in json.dumps(response.json()["detail"])

    async def test_no_token_is_401(self, api):
        response = await api.get("/v1/datasets/export", headers={"Authorization": ""})
        assert response.status_code == 401


class TestHuggingFaceLayout:
    async def test_every_kind_loads_with_datasets(self, api, fake_model, tmp_path, monkeypatch):
        monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        datasets = importlib.import_module("datasets")  # a dev dependency: never skipped
        ids = await reviewed_runs(api, fake_model)
        loaded = {}
        for kind in ("chat", "preference", "critique"):
            response = await api.get("/v1/datasets/export", params={"kind": kind})
            path = tmp_path / f"{kind}.jsonl"
            path.write_bytes(response.content)
            loaded[kind] = datasets.load_dataset(
                "json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
            )
        [edited] = [r for r in loaded["chat"] if r["decision"] == "edit"]
        assert edited["messages"][1] == {"role": "assistant", "content": "Tides: the Moon's pull."}
        [pair] = [r for r in loaded["preference"] if r["run_id"] == ids["edit"]]
        assert pair["chosen"] == "Tides: the Moon's pull."
        assert pair["rejected"] != pair["chosen"]
        [critique] = [r for r in loaded["critique"] if r["run_id"] == ids["edit"]]
        assert critique["issues"][0]["judgement"] == {
            "verdict": "dismiss",
            "reason": DISMISS["reason"],
        }

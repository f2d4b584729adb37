"""The diff lock: hunks outside the flagged lines are reverted, locked regions survive, the
off switch keeps the revision; unit tests of the hunk logic and runs through the API."""

import asyncio
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine import difflock
from orchestrator.engine.difflock import LockRules, apply, diff, enforce
from tests.orchestrator.conftest import start, wait_for
from tests.orchestrator.test_loop import actor_reply, critique

PREVIOUS = (
    "Tides rise twice a day.\n"
    "The Moon pulls the oceans towards it.\n"
    "The Sun pulls too, less strongly.\n"
    "Spring tides come at full and new moon.\n"
)


STEADY = {"convergence_threshold": 0}  # these revisions are small: the rule is not under test


def issue(quote: str | None, severity: str = "minor") -> dict:
    return {
        "dimension": "accuracy",
        "severity": severity,
        "quote": quote,
        "suggestion": "Fix this line.",
    }


# ----------------------------------------------------------------------------- unit

lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "e", "\n", "long line\n"]))


class TestHunks:
    @settings(max_examples=300, deadline=None)
    @given(lines, lines)
    def test_all_hunks_kept_give_the_revision_and_none_the_previous(self, before, after):
        previous, revision = "".join(before), "".join(after)
        found = diff(previous, revision)
        assert apply(found, range(len(found.hunks))) == revision
        assert apply(found, []) == previous

    @settings(max_examples=300, deadline=None)
    @given(lines, lines)
    def test_without_a_bound_or_a_lock_the_revision_is_kept(self, before, after):
        previous, revision = "".join(before), "".join(after)
        unbounded = LockRules(enabled=True, quotes=None)
        assert enforce(unbounded, previous, revision, []).output == revision
        off = LockRules(enabled=False, quotes=["a"])
        assert enforce(off, previous, revision, []).output == revision

    @settings(max_examples=300, deadline=None)
    @given(lines, lines)
    def test_a_bound_nothing_matches_reverts_to_the_previous(self, before, after):
        previous, revision = "".join(before), "".join(after)
        locked = enforce(LockRules(quotes=["not in there"]), previous, revision, [])
        assert locked.output == previous
        assert all(h["reason"] == "outside_flagged" for h in locked.reverted)

    def test_neighbouring_changed_lines_are_one_hunk(self):
        revision = PREVIOUS.replace("Moon pulls", "Moon's gravity pulls").replace(
            "Sun pulls too", "Sun's gravity pulls too"
        )
        found = diff(PREVIOUS, revision)
        assert len(found.hunks) == 1
        assert found.hunks[0].a_start == 1
        assert found.hunks[0].a_end == 3

    def test_a_hunk_outside_the_quote_is_reverted_and_one_inside_kept(self):
        revision = PREVIOUS.replace("twice a day", "roughly twice a day").replace(
            "full and new moon", "full moon and at new moon"
        )
        locked = enforce(LockRules(quotes=["The Moon", "Tides rise"]), PREVIOUS, revision, [])
        assert locked.output == PREVIOUS.replace("twice a day", "roughly twice a day")
        assert locked.reverted == [
            {
                "line": 4,
                "before": "Spring tides come at full and new moon.\n",
                "after": "Spring tides come at full moon and at new moon.\n",
                "reason": "outside_flagged",
                "truncated": False,
            }
        ]

    def test_a_line_inserted_next_to_the_quoted_line_is_kept(self):
        revision = PREVIOUS.replace(
            "The Moon pulls the oceans towards it.\n",
            "The Moon pulls the oceans towards it.\nThe Earth turns under the bulge.\n",
        )
        locked = enforce(LockRules(quotes=["Moon pulls"]), PREVIOUS, revision, [])
        assert locked.output == revision
        assert locked.reverted == []

    def test_the_actors_where_quotes_justify_a_hunk(self):
        revision = PREVIOUS.replace("full and new moon", "full moon and at new moon")
        wheres = ["full moon and at new moon"]
        locked = enforce(LockRules(quotes=["The Moon"]), PREVIOUS, revision, wheres)
        assert locked.output == revision

    def test_a_locked_region_is_reverted_even_inside_the_quote_and_without_a_bound(self):
        revision = PREVIOUS.replace("Sun pulls too", "Sun also pulls").replace("twice", "two times")
        rules = LockRules(quotes=None, locked=["The Sun pulls too, less strongly."])
        locked = enforce(rules, PREVIOUS, revision, [])
        assert locked.output == PREVIOUS.replace("twice", "two times")
        assert [h["reason"] for h in locked.reverted] == ["locked"]
        quoted = LockRules(quotes=["The Sun"], locked=["less strongly"], enabled=False)
        assert "Sun pulls too" in enforce(quoted, PREVIOUS, revision, []).output

    def test_whole_text_issues_cannot_bound_the_change(self):
        assert difflock.critique_quotes({"issues": [issue(None)]}, PREVIOUS, unbounded=False) is (
            None
        )
        assert difflock.critique_quotes({"issues": []}, PREVIOUS, unbounded=False) is None
        mixed = {"issues": [issue("The Moon"), issue(None)]}
        assert difflock.critique_quotes(mixed, PREVIOUS, unbounded=False) is None
        elsewhere = {"issues": [issue("not in the text")]}
        assert difflock.critique_quotes(elsewhere, PREVIOUS, unbounded=False) is None
        quoted = {"issues": [issue("The Moon")]}
        assert difflock.critique_quotes(quoted, PREVIOUS, unbounded=False) == ["The Moon"]
        assert difflock.critique_quotes(quoted, PREVIOUS, unbounded=True) is None

    async def test_a_50_kb_pair_is_diffed_on_a_worker_thread(self, monkeypatch):
        previous = "".join(f"Line {i}: the answer keeps this context.\n" for i in range(1300))
        revision = previous.replace("Line 7:", "Line seven:").replace("Line 900:", "L900:")
        assert len(previous) > 50_000
        threads: list[str] = []
        real = difflock.enforce

        def spy(*args, **kwargs):
            threads.append(threading.current_thread().name)
            return real(*args, **kwargs)

        monkeypatch.setattr(difflock, "enforce", spy)
        loop_thread = threading.current_thread().name
        locked = await difflock.enforce_off_loop(
            LockRules(quotes=["Line 7:"]), previous, revision, []
        )
        assert threads
        assert threads[0] != loop_thread
        assert locked.output == previous.replace("Line 7:", "Line seven:")
        assert [h["line"] for h in locked.reverted] == [901]
        await asyncio.sleep(0)


# ----------------------------------------------------------------------------- API


class TestThroughTheApi:
    REVISION = PREVIOUS.replace("twice a day", "twice daily").replace(
        "full and new moon", "new and full moon"
    )

    def script(self, fake_model, revision: str, quote: str | None = "Tides rise twice a day."):
        fake_model.script(
            {"stage": "draft", "response": actor_reply(PREVIOUS)},
            {"stage": "critique", "response": critique("revise", [issue(quote)])},
            {"stage": "revise", "response": actor_reply(revision)},
            {"stage": "critique", "response": critique("pass")},
        )

    async def test_a_hunk_outside_the_flagged_span_is_reverted_and_recorded(self, api, fake_model):
        self.script(fake_model, self.REVISION)
        run_id = await start(api, task="Explain tides.", policy=STEADY)
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        second = run["rounds"][1]
        assert second["output"] == PREVIOUS.replace("twice a day", "twice daily")
        assert run["final_output"] == second["output"]
        assert second["reverted_hunks"] == [
            {
                "line": 4,
                "before": "Spring tides come at full and new moon.\n",
                "after": "Spring tides come at new and full moon.\n",
                "reason": "outside_flagged",
                "truncated": False,
            }
        ]
        critiqued = [c for c in fake_model.requests() if c["stage"] == "critique"][1]
        assert "new and full moon" not in str(critiqued["body"])
        events = (await api.get("/v1/events", params={"run_id": run_id})).json()
        reverted = [e["data"] for e in events if e["type"] == "round.reverted"]
        assert reverted == [
            {
                "round": 2,
                "attempt": 1,
                "hunks": 2,
                "reverted": 1,
                "outside_flagged": 1,
                "locked": 0,
            }
        ]
        metrics = (await api.get("/metrics")).text
        assert 'crosscheck_reverted_hunks_total{reason="outside_flagged"} 1.0' in metrics

    async def test_an_escalation_shows_the_reviewer_what_the_lock_reverted(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": actor_reply(PREVIOUS)},
            {
                "stage": "critique",
                "response": critique("revise", [issue("Tides rise twice a day.")]),
            },
            {"stage": "revise", "response": actor_reply(self.REVISION)},
            {"stage": "critique", "response": critique("revise", [issue("twice daily")])},
        )
        run_id = await start(api, task="Explain tides.", policy={**STEADY, "max_rounds": 2})
        run = await wait_for(api, run_id)
        assert (run["status"], run["stop_reason"]) == ("escalated", "max_rounds")
        items = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        [escalation] = [i for i in items if i["kind"] == "escalation"]
        context = (await api.get(f"/v1/reviews/{escalation['id']}")).json()["context"]
        assert context["rounds"][1]["reverted_hunks"] == run["rounds"][1]["reverted_hunks"]
        assert context["rounds"][1]["reverted_hunks"][0]["reason"] == "outside_flagged"
        assert context["rounds"][1]["over_correction"] is None

    async def test_the_off_switch_keeps_the_revision_as_is(self, api, fake_model):
        self.script(fake_model, self.REVISION)
        run_id = await start(api, task="Explain tides.", policy={**STEADY, "diff_lock": False})
        run = await wait_for(api, run_id)
        assert run["policy"]["diff_lock"] is False
        assert run["rounds"][1]["output"] == self.REVISION
        assert run["rounds"][1]["reverted_hunks"] == []

    async def test_a_whole_text_critique_does_not_bound_the_revision(self, api, fake_model):
        self.script(fake_model, self.REVISION, quote=None)
        run_id = await start(api, task="Explain tides.", policy=STEADY)
        run = await wait_for(api, run_id)
        assert run["rounds"][1]["output"] == self.REVISION

    async def test_a_locked_region_survives_a_revision_that_rewrote_it(self, api, fake_model):
        keep = "Spring tides come at full and new moon."
        self.script(fake_model, self.REVISION, quote=None)
        task = f"Explain tides. Keep this sentence word for word: {keep}"
        run_id = await start(api, task=task, locked=[keep], policy=STEADY)
        run = await wait_for(api, run_id)
        assert run["locked"] == [keep]
        second = run["rounds"][1]
        assert keep in second["output"]
        assert "twice daily" in second["output"]  # the rest of the revision stays
        assert [h["reason"] for h in second["reverted_hunks"]] == ["locked"]

    async def test_the_lock_holds_with_the_diff_lock_off(self, api, fake_model):
        keep = "Spring tides come at full and new moon."
        self.script(fake_model, self.REVISION)
        run_id = await start(
            api, task=f"Explain tides: {keep}", locked=[keep], policy={**STEADY, "diff_lock": False}
        )
        run = await wait_for(api, run_id)
        assert run["rounds"][1]["output"] == PREVIOUS.replace("twice a day", "twice daily")

    @pytest.mark.parametrize(
        ("locked", "message"),
        [
            (["not in the task"], "does not occur in the task"),
            (["   "], "blank"),
            ([""], "at least 1 character"),
            (["tides"] * 21, "at most 20 items"),
        ],
    )
    async def test_locked_texts_are_validated_at_submit(self, api, locked, message):
        response = await api.post("/v1/runs", json={"task": "Explain tides.", "locked": locked})
        assert response.status_code == 422, response.text
        assert message in response.text

    async def test_a_locked_text_at_its_size_limit_is_accepted(self, api, fake_model):
        keep = "x" * difflock_limit()
        response = await api.post("/v1/runs", json={"task": keep, "locked": [keep]})
        assert response.status_code == 201, response.text
        await wait_for(api, response.json()["id"])
        over = "x" * (difflock_limit() + 1)
        response = await api.post("/v1/runs", json={"task": over, "locked": [over]})
        assert response.status_code == 422


def difflock_limit() -> int:
    from shared.orchestration import MAX_LOCKED_CHARS

    return MAX_LOCKED_CHARS

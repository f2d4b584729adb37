"""The over-correction guard through the API: a revision that breaks passing tests is rolled
back and re-asked once; a second time the better version stays and the round records it."""

import json

from orchestrator.engine import guard
from orchestrator.readmodel.rounds import RoundState
from tests.orchestrator.conftest import FINAL, start, wait_for
from tests.orchestrator.test_loop import TestCodeTasks, actor_reply, critique

RIGHT = (
    "def primes_up_to(n):\n"
    "    flags = [True] * (n + 1)\n"
    "    for i in range(2, int(n ** 0.5) + 1):\n"
    "        if flags[i]:\n"
    "            flags[i * i :: i] = [False] * len(flags[i * i :: i])\n"
    "    return [i for i in range(2, n + 1) if flags[i]]\n"
)
RIGHT_AGAIN = RIGHT.replace("    flags = [True]", "    # sieve of Eratosthenes\n    flags = [True]")
WRONG = RIGHT.replace("n + 1) if", "n) if")  # drops n itself: candidate(2) == [] fails
WRONG_AGAIN = RIGHT.replace("range(2, n + 1) if", "range(3, n + 1) if")  # drops 2
TASK = {
    "task": "Write primes_up_to(n) returning every prime <= n.",
    "kind": "code",
    "tests": TestCodeTasks.TESTS,
    "entry_point": "primes_up_to",
}
STEADY = {"convergence_threshold": 0}  # these revisions are small: the rule is not under test


def revise_prompts(fake_model) -> list[str]:
    return [json.dumps(c["body"]) for c in fake_model.requests() if c["stage"] == "revise"]


class TestOverCorrectionGuard:
    async def test_a_revision_that_breaks_passing_tests_is_rolled_back_and_re_asked(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor_reply(RIGHT)},
            {"stage": "critique", "response": critique("revise", reflection="Add a comment.")},
            {"stage": "revise", "response": actor_reply(WRONG)},
            {"stage": "revise", "response": actor_reply(RIGHT_AGAIN)},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, **TASK, policy=STEADY)
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        first, second = run["rounds"]
        assert first["evaluation"]["passed"] is True
        assert second["output"] == RIGHT_AGAIN
        assert second["evaluation"]["passed"] is True
        assert second["rolled_back"] == [
            {"attempt": 1, "output": WRONG, "reason": "over_correction"}
        ]
        assert second["over_correction"] == {
            "reason": "evaluation",
            "rollbacks": 1,
            "kept": "retry",
        }
        prompts = revise_prompts(fake_model)
        assert len(prompts) == 2
        assert "broke an evaluation the previous version passed" in prompts[1]
        assert "2/3 test(s) passed" in prompts[1]  # what broke
        stats = (await api.get("/v1/stats")).json()
        assert (stats["revisions"], stats["over_corrections"]) == (1, 1)
        assert stats["over_correction_rate"] == 1.0

    async def test_breaking_them_twice_keeps_the_passing_version_and_records_it(
        self, api, fake_model
    ):
        fake_model.script(
            {"stage": "draft", "response": actor_reply(RIGHT)},
            {"stage": "critique", "response": critique("revise", reflection="Add a comment.")},
            {"stage": "revise", "response": actor_reply(WRONG)},
            {"stage": "revise", "response": actor_reply(WRONG_AGAIN)},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, **TASK, policy=STEADY)
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        assert run["stop_reason"] == "critic_pass"
        second = run["rounds"][1]
        assert second["output"] == RIGHT
        assert run["final_output"] == RIGHT
        assert second["evaluation"]["passed"] is True
        assert [r["output"] for r in second["rolled_back"]] == [WRONG, WRONG_AGAIN]
        assert second["over_correction"]["rollbacks"] == 2
        assert second["over_correction"]["kept"] == "previous"
        assert second["over_correction"]["kept_round"] == 1
        assert len(revise_prompts(fake_model)) == 2
        events = (await api.get("/v1/events", params={"run_id": run_id})).json()
        assert [e["data"]["kept"] for e in events if e["type"] == "round.over_correction"] == [
            "previous"
        ]
        stats = (await api.get("/v1/stats")).json()
        assert stats["over_corrections"] == 1
        assert stats["over_correction_rate"] == 1.0
        metrics = (await api.get("/metrics")).text
        assert "crosscheck_revisions_total 1.0" in metrics
        assert (
            'crosscheck_over_corrections_total{outcome="previous",reason="evaluation"} 1.0'
            in metrics
        )
        assert (
            'crosscheck_over_corrections_total{outcome="rolled_back",reason="evaluation"} 1.0'
            in metrics
        )

    async def test_the_off_switch_keeps_the_breaking_revision(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "response": actor_reply(RIGHT)},
            {"stage": "critique", "response": critique("revise", reflection="Add a comment.")},
            {"stage": "revise", "response": actor_reply(WRONG)},
            {"stage": "critique", "response": critique("revise", reflection="Fix n.")},
        )
        policy = {**STEADY, "over_correction_guard": False, "max_rounds": 2}
        run_id = await start(api, **TASK, policy=policy)
        run = await wait_for(api, run_id)
        assert run["stop_reason"] == "max_rounds"
        second = run["rounds"][1]
        assert second["output"] == WRONG
        assert second["evaluation"]["passed"] is False
        assert second["over_correction"] is None
        assert second["rolled_back"] == []
        assert len(revise_prompts(fake_model)) == 1
        stats = (await api.get("/v1/stats")).json()
        assert (stats["revisions"], stats["over_corrections"]) == (1, 0)
        assert stats["over_correction_rate"] == 0.0


DRAFT = "Tides rise twice a day.\nThe Moon pulls the oceans.\nThe Sun pulls too.\n"
FIXED = DRAFT.replace("twice a day", "about twice a day")
SUN = FIXED.replace("The Sun pulls too.", "The Sun pulls too, less strongly.")
REOPENED = SUN.replace("about twice a day", "twice a day")  # undoes the first fix


def flagged(quote: str, suggestion: str) -> dict:
    return critique(
        "revise",
        [{"dimension": "accuracy", "severity": "major", "quote": quote, "suggestion": suggestion}],
    )


class TestReopenedIssues:
    ROUND_ONE = flagged("Tides rise twice a day.", "Say it is about twice a day.")
    ROUND_TWO = flagged("The Sun pulls too.", "Say how strongly the Sun pulls.")

    def script(self, fake_model, *rest: dict) -> None:
        fake_model.script(
            {"stage": "draft", "response": actor_reply(DRAFT)},
            {"stage": "critique", "response": self.ROUND_ONE},
            {"stage": "revise", "response": actor_reply(FIXED)},
            {"stage": "critique", "response": self.ROUND_TWO},
            {"stage": "revise", "response": actor_reply(REOPENED)},
            {"stage": "critique", "response": self.ROUND_ONE},  # the closed issue is back
            *rest,
        )

    async def test_a_revision_reopening_a_closed_issue_is_rolled_back_and_re_asked(
        self, api, fake_model
    ):
        self.script(
            fake_model,
            {"stage": "revise", "response": actor_reply(SUN)},
            {"stage": "critique", "response": critique("pass")},
        )
        policy = {**STEADY, "diff_lock": False, "max_rounds": 4}
        run_id = await start(api, task="Explain tides.", policy=policy)
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        third = run["rounds"][2]
        assert third["output"] == SUN
        assert third["rolled_back"] == [
            {"attempt": 1, "output": REOPENED, "reason": "over_correction"}
        ]
        assert third["over_correction"] == {
            "reason": "reopened_issue",
            "rollbacks": 1,
            "kept": "retry",
        }
        prompts = revise_prompts(fake_model)
        assert len(prompts) == 3
        assert "reopened issues the previous critique had closed" in prompts[2]
        assert "Say it is about twice a day." in prompts[2]

    async def test_under_before_critique_the_re_asked_version_waits_for_a_person_too(
        self, api, fake_model
    ):
        """Every version the Critic judges was paused for a person first, the re-ask too; the
        resumed segment critiques the re-ask as such (its own key; no second re-ask)."""
        self.script(
            fake_model,
            {"stage": "revise", "response": actor_reply(SUN)},
            {"stage": "critique", "response": critique("pass")},
        )
        policy = {
            **STEADY,
            "diff_lock": False,
            "max_rounds": 4,
            "review": "before_critique",
            "review_deadline_s": 1,  # nobody answers: each pause continues to the Critic
        }
        run_id = await start(api, task="Explain tides.", policy=policy)
        run = await wait_for(api, run_id, FINAL - {"awaiting_review"}, timeout=60)
        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        third = run["rounds"][2]
        assert third["output"] == SUN
        assert third["over_correction"] == {
            "reason": "reopened_issue",
            "rollbacks": 1,
            "kept": "retry",
        }
        items = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        assert sorted(i["round"] for i in items) == [1, 2, 3, 3]  # REOPENED, then SUN
        critiqued = [
            json.dumps(c["body"]) for c in fake_model.requests() if c["stage"] == "critique"
        ]
        assert len(critiqued) == 4
        assert "less strongly" in critiqued[3]
        assert "about twice a day" in critiqued[3]  # SUN, not REOPENED

    async def test_reopening_it_twice_keeps_the_previous_version(self, api, fake_model):
        self.script(
            fake_model,
            {"stage": "revise", "response": actor_reply(REOPENED + "The Earth turns.\n")},
            {"stage": "critique", "response": self.ROUND_ONE},
        )
        policy = {**STEADY, "diff_lock": False, "max_rounds": 4}
        run_id = await start(api, task="Explain tides.", policy=policy)
        run = await wait_for(api, run_id)
        third = run["rounds"][2]
        assert third["output"] == FIXED  # round 2's version, with its critique
        assert third["critique"]["issues"][0]["quote"] == "The Sun pulls too."
        assert third["over_correction"]["kept"] == "previous"
        assert third["over_correction"]["rollbacks"] == 2
        assert run["status"] == "escalated"
        assert run["stop_reason"] == "repeated_critique"  # the normal rules stop it


class TestRules:
    def issue(self, quote: str, severity: str = "major") -> dict:
        return {"dimension": "accuracy", "severity": severity, "quote": quote, "suggestion": "x"}

    def test_an_issue_is_reopened_only_when_the_last_critique_had_closed_it(self):
        a, b = self.issue("A"), self.issue("B")
        assert guard.reopened_issues({"issues": [a]}, {"issues": [b]}, {"issues": [a]}) != []
        assert guard.reopened_issues({"issues": [a]}, {"issues": [a]}, {"issues": [a]}) == []
        assert guard.reopened_issues({"issues": [b]}, {"issues": []}, {"issues": [a]}) == []
        assert guard.reopened_issues(None, {"issues": []}, {"issues": [a]}) == []

    def test_a_passing_evaluation_wins_then_the_lighter_critique(self):
        def version(passed, *issues):
            return RoundState(
                number=1,
                output="",
                output_hash="",
                evaluation=None if passed is None else {"passed": passed},
                critique={"issues": list(issues)},
                rolled_back=None,
            )

        minor, major = self.issue("A", "minor"), self.issue("B", "major")
        now = {"evaluation": {"passed": True}, "critique": {"issues": [major]}}
        assert guard.better(version(False), now) == "current"
        assert guard.better(version(True), {**now, "evaluation": {"passed": False}}) == ("previous")
        lighter = {"evaluation": None, "critique": {"issues": [minor, minor]}}
        assert guard.better(version(None, major), lighter) == "current"
        assert guard.better(version(None, minor), lighter) == "previous"
        assert guard.better(version(None, major), {"evaluation": None, "critique": None}) == (
            "previous"
        )

"""Pure stop-rule helpers of ``engine/policy.py``."""

import pytest

from orchestrator.engine.policy import (
    ENVIRONMENT_RETRIES,
    after_critique,
    after_output,
    change_ratio,
    converged,
    critic_blames_environment,
    environment_stop,
    needs_review_before_critique,
    over_budget,
    shrank,
    shrink_ratio,
)
from shared.orchestration import Policy
from tests.orchestrator.conftest import start, wait_for
from tests.orchestrator.test_loop import critique as scripted_body


class TestChangeRatio:
    @pytest.mark.parametrize(
        ("previous", "current", "expected"),
        [
            ("same text", "same text", 0.0),
            ("abc", "xyz", 1.0),
            ("", "new", 1.0),
            ("a" * 99 + "b", "a" * 99 + "c", 0.01),  # one of 100 characters replaced
            ("one two three", "one two three four", 5 / 31),  # " four" added
        ],
    )
    def test_share_of_characters_inserted_or_deleted(self, previous, current, expected):
        assert change_ratio(previous, current) == pytest.approx(expected, abs=1e-6)

    def test_symmetric(self):
        assert change_ratio("tides and the moon", "tides") == change_ratio(
            "tides", "tides and the moon"
        )

    def test_a_long_revision_with_a_small_edit_stays_small(self):
        previous = "The Moon raises two bulges of water. " * 3000  # about 110 KB
        current = previous.replace("two bulges", "two tidal bulges", 1)
        assert 0 < change_ratio(previous, current) < 0.001


class TestReviewerPoints:
    """While a reviewer's point is unmet, only it, the critic's escalate and the budget rule."""

    @staticmethod
    def critique(verdict: str, **extra) -> dict:
        return {"verdict": verdict, "signature": "s", "run_tokens": 0, "run_cost": 0.0, **extra}

    def decide(self, verdict: str, *, unmet: list[str], attempts: int, **policy):
        return after_critique(
            Policy(**policy),
            round=3,
            critique=self.critique(verdict),
            evaluation_passed=True,
            previous_signature="s",  # the same critique again: would stop without points
            human_rounds=0,
            unmet_points=unmet,
            unmet_attempts=attempts,
        )

    def test_an_unmet_point_holds_back_a_pass_and_every_round_rule(self):
        assert self.decide("pass", unmet=["p"], attempts=1, max_rounds=1) is None

    def test_the_second_miss_escalates_human_point_unmet(self):
        stop = self.decide("pass", unmet=["Cite the statute."], attempts=2)
        assert (stop.reason.value, "Cite the statute." in stop.detail) == (
            "human_point_unmet",
            True,
        )

    def test_the_critic_may_still_escalate(self):
        assert self.decide("escalate", unmet=["p"], attempts=1).reason.value == "critic_escalated"

    def test_the_budget_still_applies(self):
        over = after_critique(
            Policy(max_tokens=10),
            round=1,
            critique=self.critique("revise", run_tokens=11),
            evaluation_passed=None,
            previous_signature=None,
            unmet_points=["p"],
            unmet_attempts=1,
        )
        assert over is not None
        assert over.reason.value == "budget_exceeded"

    def test_rounds_a_person_asked_for_do_not_count(self):
        def stop(human_rounds: int):
            return after_critique(
                Policy(max_rounds=2),
                round=3,
                critique=self.critique("revise"),
                evaluation_passed=None,
                previous_signature=None,
                human_rounds=human_rounds,
            )

        assert stop(human_rounds=1).reason.value == "max_rounds"  # 2 of the actor's own rounds
        assert stop(human_rounds=2) is None  # only 1 counted


# ---------------------------------------------------------------- every rule at its edges
# Each threshold just below and just above, its off switch, and each pair of rules whose order
# decides which stop a run reports. ``None`` in a table means "the run goes on".


def output(**fields) -> dict:
    """What a revision step reports to ``after_output``: a new, changed, cheap version."""
    return {
        "output_hash": "new",
        "change_ratio": 0.5,
        "run_tokens": 0,
        "run_cost": 0.0,
        **fields,
    }


def critique(verdict: str = "revise", **fields) -> dict:
    return {"verdict": verdict, "signature": "this", "run_tokens": 0, "run_cost": 0.0, **fields}


def reason(stop) -> str | None:
    return None if stop is None else stop.reason.value


class TestShrink:
    @pytest.mark.parametrize(
        ("threshold", "shrink", "expected"),
        [
            (0.30, 0.29, False),  # just below the default
            (0.30, 0.30, False),  # at the threshold: not more than it
            (0.30, 0.31, True),  # just above
            (0.50, 0.49, False),  # a run's own threshold, not the default
            (0.50, 0.51, True),
            (0.10, 0.11, True),  # a shrink the default would let through
            (0.10, 0.09, False),
            (0.0, 0.98, False),  # 0 = off, whatever the shrink
            (0.0, 1.0, False),
            (1.0, 1.0, False),  # nothing can shrink by more than everything
        ],
    )
    def test_a_revision_shrank_only_past_the_runs_threshold(self, threshold, shrink, expected):
        assert shrank(Policy(shrink_threshold=threshold), {"shrink": shrink}) is expected

    def test_a_version_that_reports_no_shrink_did_not_shrink(self):
        assert shrank(Policy(shrink_threshold=0.01), {}) is False

    @pytest.mark.parametrize(
        ("previous", "current", "expected"),
        [
            ("a" * 100, "a" * 69, 0.31),
            ("a" * 100, "a" * 71, 0.29),
            ("a" * 100, "a" * 150, 0.0),  # growing is no shrink
            ("", "anything", 0.0),
        ],
    )
    def test_shrink_ratio(self, previous, current, expected):
        assert shrink_ratio(previous, current) == pytest.approx(expected)


class TestConvergence:
    """``convergence_threshold``: a revision too small to matter is the last one once its
    check passes; it never skips the check (the act step reports no convergence stop)."""

    @pytest.mark.parametrize(
        ("threshold", "change", "round", "expected"),
        [
            (0.02, 0.019, 2, True),  # just below the default: too small a change
            (0.02, 0.02, 2, False),  # at the threshold: changed enough
            (0.02, 0.021, 2, False),
            (0.10, 0.09, 3, True),  # a run's own threshold
            (0.10, 0.11, 3, False),
            (0.02, 0.0, 1, False),  # the first round has nothing to converge to
            (0.0, 0.0, 2, False),  # 0 = off, even for no change at all
            (0.02, None, 2, False),  # not the Actor's revision (a person's edit, open points)
        ],
    )
    def test_a_revision_that_changed_too_little(self, threshold, change, round, expected):
        assert converged(Policy(convergence_threshold=threshold), round, change) is expected

    @pytest.mark.parametrize("change", [0.0, 0.019])
    def test_a_tiny_change_is_no_stop_before_its_check(self, change):
        stop = after_output(Policy(), round=2, seen_hashes=["old"], out=output(change_ratio=change))
        assert stop is None

    def test_a_converged_version_the_critic_passes_ends_succeeded_converged(self):
        stop = after_critique(
            Policy(),
            round=2,
            critique=critique("pass"),
            evaluation_passed=None,
            previous_signature=None,
            change_ratio=0.019,
        )
        assert stop is not None
        assert (stop.status.value, stop.reason.value, stop.error_class) == (
            "succeeded",
            "converged",
            "none",
        )
        assert "round 2 changed 1.9%" in stop.detail
        assert "the critic passed it" in stop.detail

    @pytest.mark.parametrize(
        ("verdict", "evaluation", "previous", "expected"),
        [
            ("revise", None, None, None),  # the check failed: it revises again
            ("pass", False, None, None),  # its tests fail: it revises again
            ("revise", None, "this", "repeated_critique"),  # or escalates by the usual rules
            ("escalate", None, None, "critic_escalated"),
        ],
    )
    def test_a_converged_version_that_fails_its_check_goes_on_by_the_usual_rules(
        self, verdict, evaluation, previous, expected
    ):
        stop = after_critique(
            Policy(max_rounds=5),
            round=2,
            critique=critique(verdict),
            evaluation_passed=evaluation,
            previous_signature=previous,
            change_ratio=0.001,
        )
        assert reason(stop) == expected
        assert stop is None or stop.status.value == "escalated"

    def test_a_pass_of_a_large_revision_is_a_critic_pass(self):
        stop = after_critique(
            Policy(),
            round=2,
            critique=critique("pass"),
            evaluation_passed=True,
            previous_signature=None,
            change_ratio=0.5,
        )
        assert reason(stop) == "critic_pass"

    def test_a_repeated_output_is_reported_as_a_duplicate(self):
        stop = after_output(
            Policy(),
            round=3,
            seen_hashes=["first", "second"],
            out=output(output_hash="first", change_ratio=0.0),
        )
        assert stop is not None
        assert stop.reason.value == "duplicate_output"
        assert "repeated the output of round 1" in stop.detail


class TestEvaluatorPass:
    """``stop_on_evaluator_pass``: the first version that passes its evaluator is the last
    one revised when the Critic passes it too; the critique is never skipped."""

    @pytest.mark.parametrize(
        ("flag", "verdict", "evaluation", "expected"),
        [
            (True, "pass", True, ("succeeded", "evaluator_pass")),
            (False, "pass", True, ("succeeded", "critic_pass")),
            (True, "revise", True, None),  # the critic did not pass it: the loop goes on
            (True, "pass", False, None),  # a failing version never ships
            (True, "pass", None, ("succeeded", "critic_pass")),  # no evaluator ran
        ],
    )
    def test_the_evaluator_and_the_critic_both_pass(self, flag, verdict, evaluation, expected):
        stop = after_critique(
            Policy(stop_on_evaluator_pass=flag, max_rounds=5),
            round=2,
            critique=critique(verdict),
            evaluation_passed=evaluation,
            previous_signature=None,
        )
        assert (None if stop is None else (stop.status.value, stop.reason.value)) == expected

    @pytest.mark.parametrize(
        ("out", "expected"),
        [
            (output(output_hash="old"), None),  # a duplicate is no stop while points are open
            (output(change_ratio=0.0), None),  # nor is a tiny change
            (output(change_ratio=0.0, run_tokens=11), "budget_exceeded"),  # the budget is
        ],
    )
    def test_open_reviewer_points_leave_only_the_budget(self, out, expected):
        stop = after_output(
            Policy(max_tokens=10), round=2, seen_hashes=["old"], out=out, points_open=True
        )
        assert reason(stop) == expected


# each budget just past its limit, and just inside or at it
EACH_BUDGET = [
    ({"max_cost_usd": 0.05}, 0, 0.0501, "budget_exceeded"),
    ({"max_cost_usd": 0.05}, 0, 0.0499, None),
    ({"max_tokens": 100}, 101, 0.0, "budget_exceeded"),
    ({"max_tokens": 100}, 100, 0.0, None),
]


class TestBudget:
    @pytest.mark.parametrize(
        ("policy", "tokens", "cost", "expected"),
        [
            ({"max_tokens": 1000}, 999, 0.0, None),
            ({"max_tokens": 1000}, 1000, 0.0, None),  # the budget itself may be used up
            ({"max_tokens": 1000}, 1001, 0.0, "used 1001 tokens, budget 1000"),
            ({}, 10**9, 0.0, None),  # no token budget: never over
            ({"max_cost_usd": 0.05}, 0, 0.0499, None),
            ({"max_cost_usd": 0.05}, 0, 0.05, None),
            ({"max_cost_usd": 0.05}, 0, 0.0501, "cost $0.0501, budget $0.0500"),
            ({"max_cost_usd": 0.0}, 0, 0.0, None),  # a zero budget allows free calls
            ({"max_cost_usd": 0.0}, 0, 0.0001, "cost $0.0001, budget $0.0000"),
            ({}, 0, 10**6, None),  # no cost budget: never over
            # both over: the tokens are named (checked first)
            ({"max_tokens": 10, "max_cost_usd": 0.01}, 11, 0.02, "used 11 tokens, budget 10"),
            # tokens within, cost over: the cost is named
            ({"max_tokens": 10, "max_cost_usd": 0.01}, 10, 0.02, "cost $0.0200, budget $0.0100"),
        ],
    )
    def test_over_budget(self, policy, tokens, cost, expected):
        stop = over_budget(Policy(**policy), tokens, cost)
        if expected is None:
            assert stop is None
        else:
            assert stop is not None
            assert (stop.status.value, stop.reason.value, stop.detail) == (
                "escalated",
                "budget_exceeded",
                expected,
            )

    @pytest.mark.parametrize(("policy", "tokens", "cost", "expected"), EACH_BUDGET)
    def test_each_budget_stops_a_run_after_a_new_version(self, policy, tokens, cost, expected):
        stop = after_output(
            Policy(**policy),
            round=2,
            seen_hashes=["old"],
            out=output(run_tokens=tokens, run_cost=cost),
        )
        assert reason(stop) == expected

    @pytest.mark.parametrize(("policy", "tokens", "cost", "expected"), EACH_BUDGET)
    def test_each_budget_stops_a_run_after_a_critique(self, policy, tokens, cost, expected):
        stop = after_critique(
            Policy(**policy),
            round=1,
            critique=critique(run_tokens=tokens, run_cost=cost),
            evaluation_passed=None,
            previous_signature=None,
        )
        assert reason(stop) == expected


class TestRounds:
    @pytest.mark.parametrize(
        ("max_rounds", "round", "expected"),
        [
            (1, 1, "max_rounds"),
            (3, 2, None),  # just below
            (3, 3, "max_rounds"),  # reached
            (5, 4, None),
            (5, 5, "max_rounds"),
            (20, 19, None),
            (20, 20, "max_rounds"),
        ],
    )
    def test_no_pass_after_max_rounds_escalates(self, max_rounds, round, expected):
        stop = after_critique(
            Policy(max_rounds=max_rounds),
            round=round,
            critique=critique(error_class="hallucination"),
            evaluation_passed=None,
            previous_signature="earlier",
        )
        assert reason(stop) == expected
        if stop is not None:
            assert stop.error_class == "hallucination"  # the critic's class of error is kept
            assert stop.detail == f"no pass after {max_rounds} round(s)"


class TestVerdict:
    @pytest.mark.parametrize(
        ("verdict", "evaluation", "expected"),
        [
            ("pass", None, "critic_pass"),  # nothing to evaluate: the critic decides
            ("pass", True, "critic_pass"),
            ("pass", False, None),  # failing tests hold back a pass
            ("revise", True, None),
            ("escalate", True, "critic_escalated"),
            ("escalate", False, "critic_escalated"),
        ],
    )
    def test_the_structured_verdict_and_the_evaluation(self, verdict, evaluation, expected):
        stop = after_critique(
            Policy(max_rounds=5),
            round=1,
            critique=critique(verdict),
            evaluation_passed=evaluation,
            previous_signature=None,
        )
        assert reason(stop) == expected
        if expected == "critic_pass":
            assert stop is not None
            assert (stop.status.value, stop.error_class) == ("succeeded", "none")

    @pytest.mark.parametrize(("previous", "expected"), [("this", "repeated_critique"), ("x", None)])
    def test_the_same_critique_twice_escalates(self, previous, expected):
        stop = after_critique(
            Policy(max_rounds=5),
            round=2,
            critique=critique(),
            evaluation_passed=None,
            previous_signature=previous,
        )
        assert reason(stop) == expected


class TestRuleOrder:
    """When several rules would stop the same round, which one the run reports."""

    @staticmethod
    def decide(verdict="revise", *, evaluation=None, previous=None, round=3, policy=None, **extra):
        return reason(
            after_critique(
                Policy(**(policy or {"max_rounds": 3, "max_tokens": 10})),
                round=round,
                critique=critique(verdict, run_tokens=extra.pop("tokens", 0)),
                evaluation_passed=evaluation,
                previous_signature=previous,
                **extra,
            )
        )

    def test_an_unmet_point_missed_twice_comes_before_the_critics_escalate(self):
        assert self.decide("escalate", unmet_points=["p"], unmet_attempts=2) == "human_point_unmet"
        assert self.decide("escalate", unmet_points=["p"], unmet_attempts=1) == "critic_escalated"

    def test_escalate_comes_before_the_budget_and_max_rounds(self):
        assert self.decide("escalate", tokens=11) == "critic_escalated"

    def test_a_pass_comes_before_the_budget_and_max_rounds(self):
        assert self.decide("pass", tokens=11) == "critic_pass"

    def test_a_pass_comes_before_a_repeated_critique(self):
        assert self.decide("pass", previous="this") == "critic_pass"

    def test_a_repeated_critique_comes_before_the_budget(self):
        assert self.decide(previous="this", tokens=11) == "repeated_critique"

    def test_the_budget_comes_before_max_rounds(self):
        assert self.decide(tokens=11) == "budget_exceeded"
        assert self.decide(tokens=10) == "max_rounds"

    def test_a_pass_held_back_by_failing_tests_falls_through_to_the_round_rules(self):
        assert self.decide("pass", evaluation=False) == "max_rounds"
        assert self.decide("pass", evaluation=False, previous="this") == "repeated_critique"
        assert self.decide("pass", evaluation=False, tokens=11) == "budget_exceeded"


class TestContinueValue:
    """``min_continue_value``: the critic's value of another round, below which the loop stops
    revising (0 = off), unless a major or critical issue or a failed evaluation is open. The
    critic did not pass that version, so the run escalates for a person."""

    @staticmethod
    def decide(minimum, value, *, verdict="revise", severity="minor", evaluation=None):
        return after_critique(
            Policy(min_continue_value=minimum, max_rounds=5),
            round=2,
            critique=critique(
                verdict, continue_value=value, issues=[{"severity": severity, "dimension": "d"}]
            ),
            evaluation_passed=evaluation,
            previous_signature=None,
        )

    @pytest.mark.parametrize(
        ("minimum", "value", "expected"),
        [
            (3, 2, ("escalated", "converged")),  # just below the seed's 3/10
            (3, 3, None),  # at it: another round is worth it
            (3, 4, None),
            (5, 4, ("escalated", "converged")),  # a run's own minimum
            (10, 9, ("escalated", "converged")),
            (0, 0, None),  # 0 = off, even for a worthless round
            (3, None, None),  # the critic did not score it
        ],
    )
    def test_a_round_worth_too_little_ends_the_run(self, minimum, value, expected):
        stop = self.decide(minimum, value)
        assert (None if stop is None else (stop.status.value, stop.reason.value)) == expected
        if stop is not None:
            assert f"{value}/10" in stop.detail

    @pytest.mark.parametrize("severity", ["major", "critical"])
    def test_a_major_issue_keeps_the_run_going(self, severity):
        assert self.decide(3, 0, severity=severity) is None

    def test_failing_tests_keep_the_run_going(self):
        assert self.decide(3, 0, evaluation=False) is None

    def test_a_pass_is_a_pass_and_an_escalate_an_escalate(self):
        assert reason(self.decide(3, 0, verdict="pass")) == "critic_pass"
        assert reason(self.decide(3, 0, verdict="escalate")) == "critic_escalated"

    def test_the_policy_field_is_bounded(self):
        with pytest.raises(ValueError, match="less than or equal to 10"):
            Policy(min_continue_value=11)
        with pytest.raises(ValueError, match="greater than or equal to 0"):
            Policy(min_continue_value=-1)


class TestEnvironmentVerdict:
    @pytest.mark.parametrize(
        ("verdict", "error_class", "expected"),
        [
            ("revise", "environment", True),
            ("escalate", "environment", True),
            ("pass", "environment", False),  # a pass is a pass
            ("revise", "logic", False),
            ("revise", "hallucination", False),
        ],
    )
    def test_only_a_critique_that_blames_the_environment_is_retried(
        self, verdict, error_class, expected
    ):
        found = critic_blames_environment({"verdict": verdict, "error_class": error_class})
        assert found is expected

    def test_after_the_retries_the_run_escalates_environment(self):
        stop = environment_stop(2, ENVIRONMENT_RETRIES + 1)
        assert (stop.status.value, stop.reason.value, stop.error_class) == (
            "escalated",
            "environment",
            "environment",
        )
        assert "3 time(s) on round 2" in stop.detail


class TestReviewBeforeCritique:
    @pytest.mark.parametrize(
        ("mode", "round", "expected"),
        [
            ("never", 1, False),
            ("before_critique", 1, True),
            ("before_critique", 4, True),
            ("first_round", 1, True),
            ("first_round", 2, False),
            ("on_low_confidence", 1, False),
            ("on_escalation", 1, False),
        ],
    )
    def test_which_rounds_wait_for_a_person_first(self, mode, round, expected):
        assert needs_review_before_critique(Policy(review=mode), round) is expected


# ---------------------------------------------------------------- the confidence rule, in a run
# ``review_confidence_threshold`` is applied by the critique step
# (engine/steps/critique_commit.py), after the stop rules above: a run whose critique is
# unsure pauses for a person, unless it stopped.


@pytest.fixture
def database_url(tmp_path):
    """The rule does not depend on the database: SQLite only."""
    return f"sqlite:///{tmp_path}/crosscheck.sqlite"


def scripted_critique(verdict: str, confidence: float) -> dict:
    reflection = "Name the Moon's pull." if verdict == "revise" else "Good."
    return {
        "stage": "critique",
        "response": {**scripted_body(verdict, reflection=reflection), "confidence": confidence},
    }


class TestConfidenceRule:
    @pytest.mark.parametrize(
        ("policy", "confidence", "expected"),
        [
            ({"review": "on_low_confidence"}, 0.59, "pause"),  # just below the default 0.6
            ({"review": "on_low_confidence"}, 0.6, None),  # at the default threshold: sure enough
            ({"review": "on_low_confidence", "review_confidence_threshold": 0.9}, 0.89, "pause"),
            ({"review": "on_low_confidence", "review_confidence_threshold": 0.9}, 0.91, None),
            ({"review": "on_low_confidence", "review_confidence_threshold": 0.0}, 0.0, None),  # off
            ({"review": "never", "review_confidence_threshold": 0.9}, 0.1, None),  # not asked for
        ],
    )
    async def test_an_unsure_critique_pauses_the_run(
        self, api, fake_model, policy, confidence, expected
    ):
        fake_model.script(scripted_critique("revise", confidence), scripted_critique("pass", 0.95))
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 2, **policy})
        run = await wait_for(api, run_id)
        reviews = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        if expected is None:
            assert (run["status"], run["stop_reason"], reviews) == ("succeeded", "critic_pass", [])
        else:
            assert run["status"] == "awaiting_review"
            assert [(r["kind"], r["reason"], r["round"]) for r in reviews] == [
                ("pre_critique", "low_confidence", 1)
            ]

    async def test_an_unsure_pass_is_no_pass_when_no_person_is_asked(self, api, fake_model):
        # under the default 0.6: the Critic re-asks its model once, then counts it as revise
        unsure = scripted_critique("pass", 0.59)
        fake_model.script(unsure, unsure, scripted_critique("pass", 0.6))
        run = await wait_for(api, await start(api, task="Explain tides."))
        assert (run["status"], run["stop_reason"], run["final_round"]) == (
            "succeeded",
            "critic_pass",
            2,
        )
        first = run["rounds"][0]["critique"]
        assert first["verdict"] == "revise"
        assert first["refused_pass"] == ["confidence 0.59 is under the 0.60 a pass needs"]
        assert run["rounds"][1]["critique"]["refused_pass"] == []  # at the threshold: a pass

    async def test_an_unsure_pass_waits_for_a_person_under_on_low_confidence(self, api, fake_model):
        fake_model.script(scripted_critique("pass", 0.3))
        policy = {"review": "on_low_confidence"}
        run = await wait_for(api, await start(api, task="Explain tides.", policy=policy))
        assert run["status"] == "awaiting_review"
        reviews = (await api.get("/v1/reviews", params={"run_id": run["id"]})).json()["items"]
        assert [(r["reason"], r["round"]) for r in reviews] == [("low_confidence", 1)]
        assert [c["stage"] for c in fake_model.requests()].count("critique") == 1  # no re-ask

    async def test_a_stop_rule_comes_before_the_pause(self, api, fake_model):
        fake_model.script(scripted_critique("revise", 0.1))
        policy = {"max_rounds": 1, "review": "on_low_confidence"}
        run = await wait_for(api, await start(api, task="Explain tides.", policy=policy))
        assert (run["status"], run["stop_reason"]) == ("escalated", "max_rounds")

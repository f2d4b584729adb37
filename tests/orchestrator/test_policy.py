"""Pure stop-rule helpers of ``engine/policy.py``."""

import pytest

from orchestrator.engine.policy import after_critique, change_ratio
from shared.orchestration import Policy


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

"""Pure stop-rule helpers of ``engine/policy.py``."""

import pytest

from orchestrator.engine.policy import change_ratio


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

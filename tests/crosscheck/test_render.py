"""`crosscheck show` prints what the loop did around each version: the Actor's answers, the
diff lock, the over-correction guard, best-of-N, sections, research and citations."""

from datetime import UTC, datetime

from rich.console import Console

from crosscheck.render import render_show
from shared.orchestration import RunPublic, Trajectory

NOW = datetime(2026, 12, 1, tzinfo=UTC).isoformat()


def shown(*rounds: dict, **fields) -> str:
    run = RunPublic.model_validate(
        {
            "id": "run_1",
            "status": "succeeded",
            "kind": "text",
            "task": "When did the Golden Gate Bridge open?",
            "evaluator": "none",
            "policy": {},
            "created_at": NOW,
            "updated_at": NOW,
            "final_round": len(rounds),
            "rounds": [{"output_hash": "h", "output": "text", **r} for r in rounds],
            **fields,
        }
    )
    console = Console(record=True, width=120, color_system=None)
    render_show(console, run, Trajectory(run_id="run_1", task=run.task, calls=[]), full=True)
    return console.export_text()


def test_research_and_citations_are_listed_with_their_sources() -> None:
    out = shown(
        {
            "number": 1,
            "drafts": [{"index": 0, "chosen": False}, {"index": 1, "chosen": True}],
            "research": {
                "status": "degraded",
                "queries": ["golden gate opening"],
                "evidence": [{"n": 1, "title": "Golden Gate", "url": "file:///docs/gg.md"}],
                "failed_queries": [{"query": "bridge toll 1937", "reason": "backend down"}],
            },
        },
        {
            "number": 2,
            "responses": [
                {"issue": "i1", "action": "applied"},
                {"issue": "i2", "action": "declined", "reason": "the task fixes the date"},
            ],
            "reverted_hunks": [{"line": 3}, {"line": 7}],
            "over_correction": {"reason": "tests_broke", "rollbacks": 1, "kept": "retry"},
            "sections": [{"index": 0, "flagged": True}, {"index": 1, "flagged": False}],
            "citations": {
                "ok": False,
                "cited": [1, 2],
                "problems": [{"kind": "unknown_number", "message": "[2] has no reference"}],
            },
        },
    )
    assert "best of 2 drafts, kept draft 2" in out
    assert "research  degraded  1 source" in out
    assert "[1] Golden Gate file:///docs/gg.md" in out
    assert "failed: bridge toll 1937 (backend down)" in out
    assert "answers  1 applied, 1 declined" in out
    assert "declined i2: the task fixes the date" in out
    assert "diff lock reverted 2 hunks" in out
    assert "over-correction: tests_broke, 1 rollback, kept retry" in out
    assert "2 sections, 1 flagged" in out
    assert "citations invalid" in out
    assert "- [2] has no reference" in out


def test_a_plain_round_shows_none_of_it_and_valid_citations_say_ok() -> None:
    plain = shown({"number": 1})
    for word in ("research", "citations", "answers", "diff lock", "drafts", "sections"):
        assert word not in plain
    ok = shown({"number": 1, "citations": {"ok": True, "cited": [1], "problems": []}})
    assert "citations ok [1]" in ok


def test_untrusted_titles_are_printed_as_text_not_markup() -> None:
    out = shown(
        {
            "number": 1,
            "research": {
                "status": "ok",
                "evidence": [{"n": 1, "title": "[bold red]boom[/]", "url": "https://x.test/"}],
                "failed_queries": [],
            },
        }
    )
    assert "[bold red]boom[/]" in out


def test_a_shipped_run_says_which_gate_let_its_version_out() -> None:
    assert "shipped by  its evaluator and the Critic passed this version" in shown(
        {"number": 1}, shipped_by="evaluator+critic"
    )
    assert "a person approved this version" in shown({"number": 1}, shipped_by="person")
    assert "shipped by" not in shown({"number": 1})


def outcome(*rounds: dict, **fields) -> str:
    from crosscheck.render import render_outcome

    run = RunPublic.model_validate(
        {
            "id": "run_1",
            "status": "escalated",
            "kind": "text",
            "task": "t",
            "evaluator": "none",
            "policy": {},
            "created_at": NOW,
            "updated_at": NOW,
            "final_round": len(rounds),
            "rounds": [{"output": "text", **r} for r in rounds],
            **fields,
        }
    )
    console = Console(record=True, width=200, color_system=None)
    render_outcome(console, run)
    return console.export_text()


class TestWhichRoundShipped:
    def test_a_revision_replaced_by_its_predecessor_names_the_round_that_wrote_it(self) -> None:
        said = outcome(
            {"number": 1, "output_hash": "a", "output": "round one"},
            {"number": 2, "output_hash": "a", "output": "round one"},
            final_output="round one",
            stop_reason="output_shrank",
            detail="round 2 shrank by 40% twice; kept round 1",
        )
        assert "final output (round 1's version, kept in round 2)" in said
        assert "final: round 1's version, kept in round 2" in said
        assert "final output (round 2)" not in said

    def test_a_final_round_with_its_own_version_is_named_as_before(self) -> None:
        said = outcome(
            {"number": 1, "output_hash": "a"},
            {"number": 2, "output_hash": "b", "output": "two"},
            final_output="two",
        )
        assert "final output (round 2)" in said
        assert "final: round 2" in said


class TestPlurals:
    def test_counts_inflect_their_word(self) -> None:
        from crosscheck.render import plural

        assert plural(3, "uncertainty") == "3 uncertainties"
        assert plural(1, "uncertainty") == "1 uncertainty"
        assert plural(2, "issue") == "2 issues"
        assert plural(2, "pass") == "2 passes"
        assert plural(2, "day") == "2 days"

    def test_a_followed_round_with_three_uncertainties_says_so(self) -> None:
        from crosscheck.render import event_line
        from shared.orchestration import EventPublic

        event = EventPublic.model_validate(
            {
                "seq": 1,
                "run_id": "run_1",
                "type": "round.output",
                "data": {"round": 1, "stage": "draft", "chars": 10, "uncertainties": ["a"] * 3},
                "created_at": NOW,
            }
        )
        line = event_line(event)
        assert line is not None
        assert "3 uncertainties" in line.plain

    def test_an_over_correction_counts_its_rollbacks(self) -> None:
        said = shown(
            {"number": 1},
            {
                "number": 2,
                "over_correction": {"reason": "regressed", "rollbacks": 2, "kept": "previous"},
            },
        )
        assert "over-correction: regressed, 2 rollbacks, kept previous" in said


class TestRetryEvents:
    """A retried peer call is a line while the run is followed, not minutes of silence."""

    @staticmethod
    def line(data: dict) -> str:
        from crosscheck.render import event_line
        from shared.orchestration import EventPublic

        event = EventPublic.model_validate(
            {"seq": 1, "run_id": "run_1", "type": "peer.retry", "data": data, "created_at": NOW}
        )
        said = event_line(event)
        assert said is not None
        return said.plain

    def test_a_peer_answer_is_named_with_the_attempt_and_the_wait(self) -> None:
        plain = self.line(
            {
                "peer": "critic",
                "attempt": 2,
                "attempts": 3,
                "status": 504,
                "reason": "critic answered 504 on /v1/critique: slow",
                "wait_s": 4.0,
            }
        )
        assert "critic 504, retry 2/3 in 4 s" in plain
        assert "critic answered 504 on /v1/critique" in plain

    def test_a_timeout_has_no_status_and_says_so(self) -> None:
        reason = "actor timed out on /v1/draft"
        plain = self.line(
            {"peer": "actor", "attempt": 3, "attempts": 6, "status": None, "reason": reason}
        )
        assert "actor timed out, retry 3/6" in plain


def test_each_reviewer_point_shows_the_actors_answer_and_the_critics_check() -> None:
    out = shown(
        {"number": 1},
        {
            "number": 2,
            "responses": [
                {"point": "Mention the Moon.", "action": "applied", "where": "The Moon pulls"},
                {"point": "Cite a source.", "action": "declined", "reason": "none given"},
            ],
            "critique": {
                "verdict": "revise",
                "confidence": 0.7,
                "binding_checks": [
                    {"point": "Mention the Moon.", "satisfied": True, "quote": "The Moon pulls"},
                    {"point": "Cite a source.", "satisfied": False, "quote": None},
                ],
            },
        },
    )
    assert "point 1 Mention the Moon." in out
    assert "Actor: applied at “The Moon pulls”" in out
    assert "Critic: satisfied “The Moon pulls”" in out
    assert "point 2 Cite a source." in out
    assert "Actor: declined: none given" in out
    assert "Critic: NOT satisfied" in out
    assert "declined None" not in out

"""A run's events on the Runs page, in words: a peer call the orchestrator retries reads
``critic 504, retry 2/3 in 4 s``."""

from __future__ import annotations

import pytest

from console.client import ApiError
from console.events import event_words, peer_retry_words, wait_words
from tests.ui.fakes import FakeClient, event, peer_retry, run_summary
from tests.ui.test_app import all_text, assert_clean, make_app, select_row, shown

RETRY = {
    "peer": "critic",
    "attempt": 2,
    "attempts": 3,
    "status": 504,
    "reason": "critic answered 504 on /v1/critiques: Gateway Timeout",
    "wait_s": 4.0,
}


class TestPeerRetryWords:
    def test_a_status(self):
        assert peer_retry_words(RETRY) == "critic 504, retry 2/3 in 4 s"

    def test_a_timeout_has_no_status(self):
        data = {**RETRY, "status": None, "reason": "critic timed out after 300 s"}
        assert peer_retry_words(data) == "critic timed out, retry 2/3 in 4 s"

    def test_a_connection_error_is_not_called_a_timeout(self):
        data = {**RETRY, "peer": "actor", "status": None, "reason": "actor: ConnectError"}
        assert peer_retry_words(data) == "actor did not answer, retry 2/3 in 4 s"

    @pytest.mark.parametrize(
        ("wait", "words"),
        [(0.5, " in 0.5 s"), (12.25, " in 12.2 s"), (0.0, " at once"), (90, " in 1 min")],
    )
    def test_the_wait(self, wait, words):
        assert wait_words(wait) == words

    def test_odd_fields_show_as_unknown_not_an_error(self):
        data = {"peer": None, "attempt": "x", "attempts": True, "status": "504", "wait_s": "4"}
        assert peer_retry_words(data) == "a peer 504, retry ?/?"

    def test_its_detail_is_the_reason(self):
        assert event_words(event(1, "peer.retry", RETRY)) == (
            "critic 504, retry 2/3 in 4 s",
            "critic answered 504 on /v1/critiques: Gateway Timeout",
        )


class TestOtherEvents:
    @pytest.mark.parametrize(
        ("type_", "data", "words"),
        [
            ("run.status", {"status": "critiquing", "round": 2}, "round 2: status critiquing"),
            (
                "round.output",
                {"round": 1, "stage": "draft", "chars": 120},
                "round 1: draft (120 chars)",
            ),
            (
                "round.critique",
                {"round": 1, "verdict": "revise", "confidence": 0.42, "issues": 1},
                "round 1: critique revise, confidence 0.42, 1 issue",
            ),
            (
                "run.finished",
                {"status": "escalated", "stop_reason": "max_rounds"},
                "finished: escalated, stop reason max_rounds",
            ),
            ("round.binding_checks", {"round": 3, "points": 2}, "round 3: round.binding_checks"),
            ("something.new", "not a dict", "something.new"),
        ],
    )
    def test_in_words(self, type_, data, words):
        assert event_words(event(1, type_, data))[0] == words


def runs_with_events(events: list[dict] | ApiError) -> FakeClient:
    fake = FakeClient(runs=[run_summary("run-1", status="critiquing")])
    if isinstance(events, ApiError):
        failure = events

        def refused(since=0, limit=500, run_id=None):
            raise failure

        fake.events = refused  # type: ignore[method-assign]
    else:
        fake.run_events = {"run-1": events}
    return fake


def run_reads(fake: FakeClient) -> list[dict]:
    """The reads of one run's events (the queue page polls the whole feed as well)."""
    return [kwargs for _, kwargs in fake.called("events") if "run_id" in kwargs]


def events_table(at) -> dict[str, list]:
    """The Events expander's table, by column."""
    [events] = [e for e in at.expander if e.label.startswith("Events")]
    frame = events.dataframe[0].value
    return {name: frame[name].tolist() for name in frame}


def open_run(fake: FakeClient):
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    select_row(at, "runs-table", 0)
    assert_clean(at)
    return at


class TestRunsPage:
    def test_a_retry_shows_in_the_run_events_and_is_counted(self):
        fake = runs_with_events(
            [
                event(1, "run.created", {"status": "queued", "kind": "text"}, delta_s=-30),
                event(2, "round.output", {"round": 1, "stage": "draft", "chars": 80}),
                peer_retry(3),
                peer_retry(4, status=None, attempt=3, wait_s=8.0),
            ]
        )
        at = open_run(fake)
        assert run_reads(fake) == [{"since": 0, "run_id": "run-1"}]
        [events] = [e for e in at.expander if e.label.startswith("Events")]
        assert events.label == "Events (4, 2 peer retries)"
        rows = events_table(at)
        assert rows["event"] == [
            "run created",
            "round 1: draft (80 chars)",
            "critic 504, retry 2/3 in 4 s",
            "critic timed out, retry 3/3 in 8 s",
        ]
        assert rows["detail"][2] == "critic answered 504 on /v1/critiques: Gateway Timeout"
        assert "2 peer retries" in all_text(at)

    def test_no_retry_no_count(self):
        at = open_run(runs_with_events([event(1, "run.created", {"kind": "text"})]))
        [events] = [e for e in at.expander if e.label.startswith("Events")]
        assert events.label == "Events (1)"
        assert "peer retr" not in all_text(at)

    def test_events_the_api_refuses_leave_the_timeline(self):
        at = open_run(runs_with_events(ApiError(404, "NotFound", "run run-1 does not exist")))
        captions = [shown(c.value) for c in at.caption]
        assert "Could not read this run's events: run run-1 does not exist" in captions
        assert any(e.label.startswith("Round 1") for e in at.expander)

    def test_a_long_history_is_read_page_by_page(self):
        many = [event(n, "run.status", {"status": "critiquing"}) for n in range(1, 503)]
        fake = runs_with_events(many)
        at = open_run(fake)
        assert [k["since"] for k in run_reads(fake)] == [0, 500]
        assert len(events_table(at)["event"]) == 502

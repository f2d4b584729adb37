"""An in-memory stand-in for console.client.ConsoleClient, put into AppTest's session_state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from console.client import ApiError


def _iso(delta_s: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_s)).isoformat()


def review_item(review_id: str = "rev-1", kind: str = "pre_critique", **extra: Any) -> dict:
    item = {
        "id": review_id,
        "run_id": "run-1",
        "round": 2,
        "kind": kind,
        "status": "pending",
        "reason": "low critic confidence",
        "task": "Write a haiku about rivers",
        "claimed_by": None,
        "lease_expires_at": None,
        "deadline": _iso(300),
        "created_at": _iso(-120),
    }
    item.update(extra)
    return item


def review_detail(item: dict) -> dict:
    return {
        **item,
        "context": {
            "task": "Write a haiku about rivers\nIn five-seven-five.",
            "kind": item["kind"],
            "round": item["round"],
            "output": "Rivers run to sea\nstones <b>remember</b> water\nsilence of the banks",
            "previous_output": "Rivers run\nstones remember\n",
            "evaluation": {"passed": False, "summary": "syllables 5-6-5", "tests": []},
            "critiques": [
                {
                    "round": 2,
                    "verdict": "revise",
                    "confidence": 0.42,
                    "issues": [
                        {
                            "dimension": "form",
                            "severity": "major",
                            "quote": "stones <b>remember</b> water",
                            "suggestion": "use seven syllables",
                        }
                    ],
                    "reflection": "count syllables",
                    "error_class": None,
                }
            ],
            "reflections": [
                {"round": 1, "source": "critic", "author": "critic", "content": "too short"},
                {"round": 1, "source": "human", "author": "ana", "content": "keep the sea"},
            ],
            "stop_reason": "max_rounds" if item["kind"] == "escalation" else None,
            "rounds": [{"number": 1}] if item["kind"] == "escalation" else None,
        },
        "decision": None,
    }


def run_summary(run_id: str = "run-1", **extra: Any) -> dict:
    run = {
        "id": run_id,
        "status": "revising",
        "kind": "text",
        "task": "Write a haiku about rivers",
        "stop_reason": None,
        "rounds": 2,
        "created_at": _iso(-600),
        "updated_at": _iso(-60),
    }
    run.update(extra)
    return run


def lesson(lesson_id: str = "les-1", **extra: Any) -> dict:
    item = {
        "id": lesson_id,
        "content": "Count the syllables before submitting a haiku.",
        "scope": "global",
        "author": "ana",
        "source_run_id": "run-1",
        "uses": 3,
        "retired": False,
        "created_at": _iso(-3600),
    }
    item.update(extra)
    return item


def provider(name: str, role: str, **extra: Any) -> dict:
    row = {
        "provider": name,
        "role": role,
        "models": ["gpt-5-mini"] if name == "openai" else ["claude-sonnet-4-6"],
        "calls": 4,
        "latency_ms_total": 800.0,
        "latency_ms_avg": 200.0,
        "latency_ms_p50": 180.0,
        "latency_ms_p95": 390.0,
        "input_tokens": 1200,
        "output_tokens": 300,
        "cost_usd": 0.0123,
        "unpriced_calls": 0,
    }
    row.update(extra)
    return row


def stats_body(**extra: Any) -> dict:
    body = {
        "since": None,
        "generated_at": _iso(0),
        "runs_total": 5,
        "runs_by_status": {"escalated": 1, "revising": 1, "succeeded": 3},
        "runs_by_stop_reason": {"critic_pass": 3, "max_rounds": 1},
        "rounds_per_run": [{"rounds": 1, "runs": 1}, {"rounds": 2, "runs": 3}],
        "adoption_rate": 0.75,
        "adoption_rounds": 4,
        "model_calls": 8,
        "model_calls_truncated": False,
        "providers": [
            provider("anthropic", "critic", latency_ms_p50=420.0, cost_usd=0.03),
            provider("openai", "actor"),
        ],
    }
    body.update(extra)
    return body


# the tokens the fake orchestrator knows: a password login's session token (ana's, and rita's
# in a cookie) and an API token named ci-reviewer
TOKENS = {
    "tok-123": {"id": "tok_ana", "name": "ana", "role": "reviewer"},
    "rita-session": {"id": "tok_rita", "name": "rita", "role": "reviewer"},
    "good-token": {"id": "tok_ci", "name": "ci-reviewer", "role": "reviewer"},
}

EMPTY_STATS = stats_body(
    runs_total=0,
    runs_by_status={},
    runs_by_stop_reason={},
    rounds_per_run=[],
    adoption_rate=None,
    adoption_rounds=0,
    model_calls=0,
    providers=[],
)


class FakeClient:
    """Records every call; answers from in-memory reviews, runs, lessons and stats."""

    def __init__(
        self,
        reviews: list[dict] | None = None,
        *,
        runs: list[dict] | None = None,
        lessons: list[dict] | None = None,
        stats: dict | None = None,
    ) -> None:
        self.reviews = {r["id"]: r for r in (reviews or [review_item()])}
        self.runs = {r["id"]: r for r in (runs or [run_summary()])}
        self.lessons = {item["id"]: item for item in (lessons or [])}
        self.stats_body = stats if stats is not None else stats_body()
        self.calls: list[tuple[str, tuple, dict]] = []
        self.seq = 1
        self.token: str | None = None
        self.fail_decision: ApiError | None = None
        self.fail_retire: ApiError | None = None
        self.fail_stats: ApiError | None = None

    def _log(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))

    def called(self, name: str) -> list[tuple[tuple, dict]]:
        return [(a, k) for n, a, k in self.calls if n == name]

    def with_token(self, token: str) -> FakeClient:
        self._log("with_token", token)
        self.token = token
        return self

    def login(self, username: str, password: str) -> dict:
        self._log("login", username)
        if password != "secret":
            raise ApiError(401, "Unauthorized", "bad username or password")
        return {"token": "tok-123", "name": username, "role": "reviewer"}

    def who_am_i(self) -> dict:
        """``GET /v1/auth/me`` for the token this fake was given (the session's ``tok-123`` when
        a test puts the token straight into session_state)."""
        self._log("who_am_i")
        known = TOKENS.get(self.token or "tok-123")
        if known is None:
            raise ApiError(401, "Unauthorized", "unknown token")
        return dict(known)

    def events(self, since: int = 0, limit: int = 500) -> list[dict]:
        self._log("events", since=since)
        if since >= self.seq:
            return []
        return [{"seq": self.seq, "run_id": "run-1", "type": "x", "data": {}, "created_at": ""}]

    def list_reviews(self, status=None, kind=None, run_id=None, limit=None, cursor=None) -> dict:
        if kind is None:
            self._log("list_reviews", status=status)
        else:
            self._log("list_reviews", status=status, kind=kind)
        items = [
            r
            for r in self.reviews.values()
            if status in (None, r["status"]) and kind in (None, r["kind"])
        ]
        return {"items": items[:limit] if limit else items, "next_cursor": None}

    def get_review(self, review_id: str) -> dict:
        self._log("get_review", review_id)
        if review_id not in self.reviews:
            raise ApiError(404, "NotFound", "no such review")
        return review_detail(self.reviews[review_id])

    def claim(self, review_id: str, lease_s: int = 300) -> dict:
        self._log("claim", review_id)
        item = self.reviews[review_id]
        item.update(
            status="claimed",
            claimed_by="tok_ana",
            claimed_by_name="ana",
            lease_expires_at=_iso(lease_s),
        )
        self.seq += 1
        return item

    def release(self, review_id: str) -> dict:
        self._log("release", review_id)
        item = self.reviews[review_id]
        item.update(status="pending", claimed_by=None, claimed_by_name=None, lease_expires_at=None)
        self.seq += 1
        return item

    def decide(self, review_id: str, **kwargs: Any) -> dict:
        self._log("decide", review_id, **kwargs)
        if self.fail_decision:
            raise self.fail_decision
        self.reviews[review_id]["status"] = "resolved"
        self.seq += 1
        return {
            "review_id": review_id,
            "run_id": "run-1",
            "action": kwargs["action"],
            "run_status": "revising",
        }

    def list_runs(self, status=None, limit=None, cursor=None, q=None) -> dict:
        self._log("list_runs", status=status, q=q)
        needle = (q or "").strip().lower()
        items = [
            r
            for r in self.runs.values()
            if status in (None, r["status"])
            and (not needle or r["id"] == q.strip() or needle in r["task"].lower())
        ]
        return {"items": items[:limit] if limit else items, "next_cursor": None}

    def get_run(self, run_id: str) -> dict:
        self._log("get_run", run_id)
        if run_id not in self.runs:
            raise ApiError(404, "NotFound", f"run {run_id} does not exist")
        return {
            **self.runs[run_id],
            "rounds": [
                {
                    "number": 1,
                    "output": "Rivers run",
                    "evaluation": None,
                    "critique": None,
                    "review": None,
                    "usage": {
                        "actor": {
                            "provider": "openai",
                            "model": "gpt-5-mini",
                            "input_tokens": 10,
                            "output_tokens": 5,
                            "cost_usd": 0.0,
                            "latency_ms": 120.0,
                        }
                    },
                },
            ],
            "reflections": [{"round": 1, "source": "human", "author": "ana", "content": "more"}],
            "final_output": None,
            "input_tokens": 10,
            "output_tokens": 5,
            "cost_usd": 0.0,
            "models": {},
        }

    def stats(self, since=None) -> dict:
        self._log("stats", since=since)
        if self.fail_stats:
            raise self.fail_stats
        return self.stats_body

    def list_lessons(self, scope=None, include_retired=False) -> list[dict]:
        self._log("list_lessons", scope=scope, include_retired=include_retired)
        return [
            item
            for item in self.lessons.values()
            if scope in (None, item["scope"]) and (include_retired or not item["retired"])
        ]

    def retire_lesson(self, lesson_id: str) -> dict:
        self._log("retire_lesson", lesson_id)
        if self.fail_retire:
            raise self.fail_retire
        if lesson_id not in self.lessons:
            raise ApiError(404, "NotFound", f"lesson {lesson_id} does not exist")
        self.lessons[lesson_id]["retired"] = True
        return self.lessons[lesson_id]


def run_detail(run_id: str = "run-1", **extra: Any) -> dict:
    """A finished code run of two rounds as GET /v1/runs/{id} returns it: round 1 failed its
    tests and the Critic asked for a revision, a reviewer commented; round 2 is a person's edit."""
    usage = {
        "actor": {
            "provider": "openai",
            "model": "gpt-5-mini",
            "input_tokens": 120,
            "output_tokens": 40,
            "cost_usd": 0.0012,
            "latency_ms": 850.0,
        },
        "critic": {
            "provider": "anthropic",
            "model": "claude-sonnet-4-6",
            "input_tokens": 200,
            "output_tokens": 60,
            "cost_usd": None,
            "latency_ms": 1500.0,
        },
    }
    run = {
        **run_summary(run_id, status="succeeded", kind="code", stop_reason="human_approved"),
        "task": "Write add(a, b)\nReturn the sum.",
        "error_class": "none",
        "detail": None,
        "rounds": [
            {
                "number": 1,
                "output": "def add(a, b):\n    return a - b",
                "evaluation": {
                    "passed": False,
                    "summary": "1 of 2 tests failed",
                    "tests": [
                        {"name": "test_add", "status": "failed", "message": "-1 != 3"},
                        {"name": "test_zero", "status": "passed", "message": ""},
                    ],
                },
                "critique": {
                    "verdict": "revise",
                    "confidence": 0.35,
                    "issues": [
                        {
                            "dimension": "correctness",
                            "severity": "major",
                            "quote": "return a - b",
                            "suggestion": "add, do not subtract",
                        }
                    ],
                    "error_class": "none",
                },
                "review": None,
                "usage": usage,
                "provenance": "actor",
            },
            {
                "number": 2,
                "output": "def add(a, b):\n    return a + b",
                "evaluation": {"passed": True, "summary": "2 passed", "tests": []},
                "critique": None,
                "review": {"review_id": "rev-9", "edited_by": "bob", "from_round": 1},
                "usage": {},
                "provenance": "human",
            },
        ],
        "reflections": [
            {"round": 1, "source": "critic", "author": "critic", "content": "subtraction bug"},
            {"round": 1, "source": "human", "author": "ana", "content": "use the + operator"},
        ],
        "final_output": "def add(a, b):\n    return a + b",
        "input_tokens": 320,
        "output_tokens": 100,
        "cost_usd": 0.0012,
        "models": {},
    }
    run.update(extra)
    return run

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


class FakeClient:
    """Records every call; answers from in-memory reviews and runs."""

    def __init__(self, reviews: list[dict] | None = None) -> None:
        self.reviews = {r["id"]: r for r in (reviews or [review_item()])}
        self.calls: list[tuple[str, tuple, dict]] = []
        self.seq = 1
        self.token: str | None = None
        self.fail_decision: ApiError | None = None

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

    def check_token(self) -> None:
        self._log("check_token")
        if self.token != "good-token":
            raise ApiError(401, "Unauthorized", "unknown token")

    def events(self, since: int = 0, limit: int = 500) -> list[dict]:
        self._log("events", since=since)
        if since >= self.seq:
            return []
        return [{"seq": self.seq, "run_id": "run-1", "type": "x", "data": {}, "created_at": ""}]

    def list_reviews(self, status=None, kind=None, run_id=None, limit=None, cursor=None) -> dict:
        self._log("list_reviews", status=status)
        items = [r for r in self.reviews.values() if status in (None, r["status"])]
        return {"items": items, "next_cursor": None}

    def get_review(self, review_id: str) -> dict:
        self._log("get_review", review_id)
        if review_id not in self.reviews:
            raise ApiError(404, "NotFound", "no such review")
        return review_detail(self.reviews[review_id])

    def claim(self, review_id: str, lease_s: int = 300) -> dict:
        self._log("claim", review_id)
        item = self.reviews[review_id]
        item.update(status="claimed", claimed_by="ana", lease_expires_at=_iso(lease_s))
        self.seq += 1
        return item

    def release(self, review_id: str) -> dict:
        self._log("release", review_id)
        item = self.reviews[review_id]
        item.update(status="pending", claimed_by=None, lease_expires_at=None)
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

    def list_runs(self, status=None, limit=None, cursor=None) -> dict:
        self._log("list_runs", status=status)
        return {"items": [self._run()], "next_cursor": None}

    def _run(self) -> dict:
        return {
            "id": "run-1",
            "status": "revising",
            "kind": "text",
            "task": "Write a haiku about rivers",
            "stop_reason": None,
            "rounds": 2,
            "created_at": _iso(-600),
            "updated_at": _iso(-60),
        }

    def get_run(self, run_id: str) -> dict:
        self._log("get_run", run_id)
        return {
            **self._run(),
            "rounds": [
                {
                    "number": 1,
                    "output": "Rivers run",
                    "evaluation": None,
                    "critique": None,
                    "review": None,
                    "usage": {"input_tokens": 10},
                },
            ],
            "reflections": [{"round": 1, "source": "human", "author": "ana", "content": "more"}],
            "final_output": None,
            "input_tokens": 10,
            "output_tokens": 5,
            "cost_usd": 0.0,
            "models": {},
        }

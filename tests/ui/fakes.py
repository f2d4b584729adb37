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
                            "error_type": "other",
                            "original_text": "stones <b>remember</b> water",
                            "corrected_text": None,
                            "evidence_source": "task",
                        }
                    ],
                    "reflection": "count syllables",
                    "error_class": None,
                    "no_error_found": False,
                    "justification": "",
                    "profile": "general",
                    "risk": "low",
                    "depth": "L1",
                    "requested_depth": "auto",
                    "degraded": False,
                    "degraded_reason": None,
                    "knowledge_used": [],
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


def event(seq: int, type_: str, data: dict, *, run_id: str = "run-1", delta_s: float = 0) -> dict:
    """One event as ``GET /v1/events`` lists it."""
    return {"seq": seq, "run_id": run_id, "type": type_, "data": data, "created_at": _iso(delta_s)}


def peer_retry(seq: int, *, status: int | None = 504, **extra: Any) -> dict:
    """A ``peer.retry`` event: the orchestrator waits before trying a peer call again."""
    answered = f"critic answered {status} on /v1/critiques: Gateway Timeout"
    data = {
        "peer": "critic",
        "attempt": 2,
        "attempts": 3,
        "status": status,
        "reason": answered if status is not None else "critic timed out after 300 s",
        "wait_s": 4.0,
    }
    data.update(extra)
    return event(seq, "peer.retry", data)


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
        "adoption_rate": 0.45,
        "adoption_rounds": 4,
        "model_calls": 8,
        "model_calls_truncated": False,
        "providers": [
            provider("anthropic", "critic", latency_ms_p50=420.0, cost_usd=0.03),
            provider("openai", "actor"),
        ],
        "critic_agreement": [],
        "versions": 6,
        "versions_judged": 6,
        "versions_critiqued": 5,
        "trigger_rate": 1.0,
        "critiques": 6,
        "critiques_degraded": 1,
        "degraded_rate": 0.166667,
        "critiques_by_depth": {"L1": 4, "L2": 2},
        "adoption_in_band": True,
    }
    body.update(extra)
    return body


KINDS = ("rule_anchor", "logic_pitfall", "evidence_hierarchy", "lesson")


def knowledge_entry(entry_id: str = "kn_rule1", **extra: Any) -> dict:
    """A knowledge entry as ``GET /v1/knowledge`` lists it."""
    entry = {
        "id": entry_id,
        "kind": "rule_anchor",
        "title": "Statutes: cite the jurisdiction",
        "body": "Every statute named must say which jurisdiction it belongs to.",
        "profiles": ["legal"],
        "weight": 1.0,
        "pack": "api",
        "author": "admin",
        "retired": False,
        "created_at": _iso(-7200),
        "updated_at": _iso(-3600),
    }
    entry.update(extra)
    return entry


def _knowledge_problem(doc: dict) -> str | None:
    """The API's 422 message for what the fake checks: blank title or body, an unknown kind,
    a weight outside 0..1 (the same words pydantic uses)."""
    for name in ("title", "body"):
        if name in doc and not str(doc[name]).strip():
            return f"{name}: String should have at least 1 character"
    if "kind" in doc and doc["kind"] not in KINDS:
        return (
            "kind: Input should be 'rule_anchor', 'logic_pitfall', 'evidence_hierarchy' or 'lesson'"
        )
    weight = doc.get("weight")
    if weight is not None and not 0.0 <= float(weight) <= 1.0:
        side = "greater than or equal to 0" if float(weight) < 0 else "less than or equal to 1"
        return f"weight: Input should be {side}"
    return None


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
    versions=0,
    versions_judged=0,
    versions_critiqued=0,
    trigger_rate=None,
    critiques=0,
    critiques_degraded=0,
    degraded_rate=None,
    critiques_by_depth={},
    adoption_in_band=None,
)


def evaluation_mode(mode: str, **extra: Any) -> dict:
    row = {
        "mode": mode,
        "items": 40,
        "passed": 10,
        "score": 0.25,
        "judge": None,
        "rounds": 1.0,
        "tokens": 300.0,
        "tokens_total": 12000,
        "cost_usd": 0.002,
        "latency_p50_s": 1.5,
        "latency_p95_s": 3.0,
        "escalations": None,
        "seen_by_person": None,
        "actor": ["openai/gpt-5-mini"],
        "critic": [],
        "config": None,
    }
    row.update(extra)
    return row


def evaluation_body(**extra: Any) -> dict:
    """``GET /v1/evaluations/latest``: single, then cross (score +25 points, 4x the cost)."""
    body = {
        "id": "eval_1",
        "dataset": "text",
        "items": 40,
        "limit": 40,
        "seed": 1,
        "modes": [
            evaluation_mode("single"),
            evaluation_mode(
                "cross",
                passed=20,
                score=0.5,
                rounds=2.5,
                tokens=1500.0,
                tokens_total=60000,
                cost_usd=0.008,
                latency_p50_s=6.0,
                latency_p95_s=11.0,
                escalations=3,
                seen_by_person=0.125,
                critic=["anthropic/claude-sonnet-4-6"],
            ),
        ],
        "config": {"set_file": "shipped text set", "concurrency": 4},
        "commit": "c90963e0123456789abcdef0123456789abcdef0",
        "started_at": "2026-11-30T10:00:00Z",
        "finished_at": "2026-11-30T10:12:30Z",
        "published_by": "eval-ci",
        "published_at": "2026-11-30T10:12:31Z",
    }
    body.update(extra)
    return body


def intercept_body(rate: float, finished_at: str, **extra: Any) -> dict:
    """One entry of ``GET /v1/evaluations?dataset=intercept``: the Critic alone on 10 items."""
    body = evaluation_body(
        id=f"eval_{finished_at}",
        dataset="intercept",
        items=10,
        limit=None,
        seed=None,
        modes=[
            evaluation_mode(
                "critic",
                items=10,
                passed=round(rate * 10),
                score=rate,
                actor=[],
                critic=["anthropic/claude-sonnet-4-6"],
            )
        ],
        config={"set_file": "shipped intercept set", "target": 0.65},
        started_at=None,
        finished_at=finished_at,
        published_by="eval-ci",
    )
    body.update(extra)
    return body


class FakeClient:
    """Records every call; answers from in-memory reviews, runs, lessons and stats."""

    def __init__(
        self,
        reviews: list[dict] | None = None,
        *,
        runs: list[dict] | None = None,
        lessons: list[dict] | None = None,
        stats: dict | None = None,
        knowledge: list[dict] | None = None,
        evaluation: dict | None = None,
        intercepts: list[Any] | None = None,  # untrusted: anything the API might send
        model_mode: str | None = "providers",  # GET /v1/info's; None: an orchestrator without
        run_events: dict[str, list[dict]] | None = None,  # GET /v1/events?run_id=, by run
    ) -> None:
        self.model_mode = model_mode
        self.run_events = run_events or {}
        self.reviews = {r["id"]: r for r in (reviews or [review_item()])}
        self.runs = {r["id"]: r for r in (runs or [run_summary()])}
        self.lessons = {item["id"]: item for item in (lessons or [])}
        self.stats_body = stats if stats is not None else stats_body()
        self.knowledge = {item["id"]: item for item in (knowledge or [])}
        self.fail_knowledge: ApiError | None = None
        self.calls: list[tuple[str, tuple, dict]] = []
        self.seq = 1
        self.token: str | None = None
        self.fail_decision: ApiError | None = None
        self.fail_retire: ApiError | None = None
        self.fail_stats: ApiError | None = None
        self.evaluation = evaluation  # None: none published yet (the API's 404)
        self.fail_evaluation: ApiError | None = None
        self.intercepts = intercepts or []  # newest first, as the API lists them
        self.fail_intercepts: ApiError | None = None

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

    def info(self) -> dict:
        """``GET /v1/info`` of the orchestrator (no token needed)."""
        self._log("info")
        body: dict[str, Any] = {
            "service": "orchestrator",
            "role": "orchestrator",
            "version": "0.1.0",
            "provider": None,
            "models": {},
            "demo": self.model_mode == "demo",
        }
        if self.model_mode is not None:
            body["model_mode"] = self.model_mode
        return body

    def events(self, since: int = 0, limit: int = 500, run_id: str | None = None) -> list[dict]:
        if run_id is not None:
            self._log("events", since=since, run_id=run_id)
            return [e for e in self.run_events.get(run_id, []) if e["seq"] > since][:limit]
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

    def latest_evaluation(self) -> dict | None:
        self._log("latest_evaluation")
        if self.fail_evaluation:
            raise self.fail_evaluation
        return self.evaluation

    def intercept_history(self, limit: int = 100) -> list[dict]:
        self._log("intercept_history", limit=limit)
        if self.fail_intercepts:
            raise self.fail_intercepts
        return self.intercepts[:limit]

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

    # knowledge: the order and filters of GET /v1/knowledge, the 404s and 422s of its writes
    def list_knowledge(self, kind=None, profile=None, include_retired=False, limit=None) -> list:
        self._log("list_knowledge", kind=kind, profile=profile, include_retired=include_retired)
        if self.fail_knowledge:
            raise self.fail_knowledge
        items = [
            e
            for e in sorted(self.knowledge.values(), key=lambda e: e["created_at"], reverse=True)
            if kind in (None, e["kind"])
            and (not profile or not e["profiles"] or profile in e["profiles"])
            and (include_retired or not e["retired"])
        ]
        return items[:limit] if limit else items

    def search_knowledge(self, q: str, profile=None) -> list[dict]:
        """Entries whose title or body shares a word with ``q``, more shared words first."""
        self._log("search_knowledge", q, profile=profile)
        words = {w.lower() for w in q.split() if len(w) > 2}
        scored = []
        for entry in self.list_knowledge(profile=profile):
            text = f"{entry['title']} {entry['body']}".lower()
            score = float(sum(1 for w in words if w in text))
            if score:
                scored.append({"entry": entry, "score": score})
        return sorted(scored, key=lambda m: -m["score"])[:3]

    def get_knowledge(self, entry_id: str) -> dict:
        self._log("get_knowledge", entry_id)
        if entry_id not in self.knowledge:
            raise ApiError(404, "NotFound", f"no knowledge entry {entry_id}")
        return self.knowledge[entry_id]

    def create_knowledge(self, *, kind, title, body, profiles=None, weight=1.0) -> dict:
        self._log("create_knowledge", kind=kind, title=title, profiles=profiles, weight=weight)
        doc = {"kind": kind, "title": title, "body": body, "weight": weight}
        problem = _knowledge_problem(doc)
        if problem:
            raise ApiError(422, "ValidationError", problem)
        entry = knowledge_entry(
            f"kn_new{len(self.knowledge) + 1}",
            kind=kind,
            title=title.strip(),
            body=body.strip(),
            profiles=list(profiles or []),
            weight=float(weight),
            author="root",
            created_at=_iso(0),
            updated_at=_iso(0),
        )
        self.knowledge[entry["id"]] = entry
        return entry

    def update_knowledge(self, entry_id: str, **fields: Any) -> dict:
        self._log("update_knowledge", entry_id, **fields)
        if not fields:
            raise ApiError(422, "ValidationError", "Value error, send at least one field to change")
        problem = _knowledge_problem(fields)
        if problem:
            raise ApiError(422, "ValidationError", problem)
        entry = self.get_knowledge(entry_id)
        entry.update(fields, updated_at=_iso(0))
        return entry

    def retire_knowledge(self, entry_id: str) -> dict:
        self._log("retire_knowledge", entry_id)
        entry = self.get_knowledge(entry_id)
        entry.update(retired=True, updated_at=_iso(0))
        return entry


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

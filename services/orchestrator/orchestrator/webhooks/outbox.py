"""The outbox: delivery rows written in the same transaction as the event that causes them.

``finalize``, ``_pause`` and ``decide`` call the functions here with their session, so a
webhook is queued if and only if its event commits. The hot path stays cheap: subscriptions
are read once per ``SUBSCRIPTION_CACHE_S`` per process (a subscription created or deleted in
this process applies at once; one made through another replica within that time), and a
run with no subscriber, no ``callback_url`` and no notification channel for the event writes
nothing. After the commit the delivery
worker of this process is woken; other replicas' workers find the rows by polling.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy import event
from sqlmodel import Session

from orchestrator.tables import ReviewItem, Run, WebhookDelivery, WebhookSubscription, table_of
from orchestrator.tables import utcnow as _utcnow
from orchestrator.webhooks import notify
from shared.orchestration import DeliveryStatus, WebhookEvent

SUBSCRIPTION_CACHE_S = 2.0
DELIVERIES = table_of(WebhookDelivery)
SUBSCRIPTIONS = table_of(WebhookSubscription)
_INSERT = DELIVERIES.insert()
_SELECT_SUBSCRIPTIONS = sa.select(SUBSCRIPTIONS.c.id, SUBSCRIPTIONS.c.url, SUBSCRIPTIONS.c.events)


@dataclass(frozen=True)
class Target:
    id: str
    url: str
    events: frozenset[str]


@dataclass
class _State:
    callbacks: bool
    wake: Callable[[], None] | None
    channels: int = 0  # notification channels (ORCHESTRATOR_NOTIFY_URLS), numbered from 1
    notify_events: frozenset[str] = frozenset()
    lock: threading.Lock = field(default_factory=threading.Lock)
    fresh_until: float = 0.0
    targets: list[Target] = field(default_factory=list)


_states: weakref.WeakKeyDictionary[sa.Engine, _State] = weakref.WeakKeyDictionary()


def install(
    engine: sa.Engine,
    *,
    callbacks: bool,
    wake: Callable[[], None] | None,
    channels: int = 0,
    notify_events: frozenset[str] = frozenset(),
) -> None:
    """Register this process's outbox for ``engine``: whether per-run callbacks can be
    signed (a platform secret is set), how to wake the delivery worker, and how many
    notification channels hear which events (``notify.py``)."""
    _states[engine] = _State(
        callbacks=callbacks, wake=wake, channels=channels, notify_events=notify_events
    )


def uninstall(engine: sa.Engine) -> None:
    _states.pop(engine, None)


def _state(session: Session) -> _State | None:
    bind = session.get_bind()
    engine = bind if isinstance(bind, sa.Engine) else bind.engine
    return _states.get(engine)


def callbacks_enabled(session: Session) -> bool:
    state = _state(session)
    return state is not None and state.callbacks


def invalidate(engine: sa.Engine) -> None:
    """Forget the cached subscriptions (after a create or delete in this process)."""
    state = _states.get(engine)
    if state is not None:
        with state.lock:
            state.fresh_until = 0.0


def wake(engine: sa.Engine) -> None:
    state = _states.get(engine)
    if state is not None and state.wake is not None:
        state.wake()


def delivery_id() -> str:
    """The ``webhook-id``: sortable by time, unguessable."""
    return f"msg_{time.time_ns():016x}{secrets.token_hex(10)}"


def _subscriptions(session: Session) -> list[Target]:
    state = _state(session)
    now = time.monotonic()
    if state is not None and state.fresh_until > now:
        return state.targets
    rows = session.connection().execute(_SELECT_SUBSCRIPTIONS)
    targets = [Target(r.id, r.url, frozenset(r.events or [])) for r in rows]
    if state is not None:
        with state.lock:
            state.targets, state.fresh_until = targets, now + SUBSCRIPTION_CACHE_S
    return targets


def _timestamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def destination(url: str) -> str:
    """The receiver a URL reaches (scheme://host:port): in-flight requests are capped per one.
    A notification channel is its own receiver."""
    if notify.channel_number(url) is not None:
        return url
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}:{port}"[:300]


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return _timestamp(value)
    return str(value)


def enqueue(session: Session, run: Run, kind: WebhookEvent, data: dict[str, Any]) -> int:
    """Queue ``kind`` for every subscription naming it and the run's callback_url."""
    destinations: list[tuple[str | None, str]] = [
        (t.id, t.url) for t in _subscriptions(session) if kind.value in t.events
    ]
    if run.callback_url:
        destinations.append((None, run.callback_url))
    state = _state(session)
    if state is not None and kind.value in state.notify_events:
        destinations += [(None, notify.channel_url(n)) for n in range(1, state.channels + 1)]
    if not destinations:
        return 0
    now = _utcnow()
    body = json.dumps(
        {"type": kind.value, "timestamp": _timestamp(now), "data": data},
        separators=(",", ":"),
        default=_json_default,
    )
    session.connection().execute(
        _INSERT,
        [
            {
                "id": delivery_id(),
                "subscription_id": subscription,
                "run_id": run.id,
                "url": url,
                "destination": destination(url),
                "event_type": kind.value,
                "body": body,
                "status": DeliveryStatus.pending.value,
                "attempts": 0,
                "next_attempt_at": now,
                "queued_at": now,
                "created_at": now,
            }
            for subscription, url in destinations
        ],
    )
    if state is not None and state.wake is not None:
        event.listen(session, "after_commit", _waker(state.wake), once=True)
    return len(destinations)


def _waker(wake: Callable[[], None]) -> Callable[[Session], None]:
    def after_commit(_: Session) -> None:
        wake()

    return after_commit


# ------------------------------------------------------------------ the four events


def run_finished(
    session: Session, run: Run, *, review: ReviewItem | None, context: dict[str, Any] | None
) -> None:
    """``run.finished`` for every finished run; ``run.escalated`` too for an escalated one."""
    enqueue(
        session,
        run,
        WebhookEvent.run_finished,
        {
            "run_id": run.id,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "error_class": run.error_class,
            "detail": run.detail,
            "final_output": run.final_output,
            "final_round": run.final_round,
            "shipped_by": run.shipped_by,
            "rounds": run.rounds,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cost_usd": run.cost_usd,
            "finished_at": run.finished_at,
        },
    )
    if review is not None:
        enqueue(
            session,
            run,
            WebhookEvent.run_escalated,
            {
                "error": "NeedHumanIntervention",
                "run_id": run.id,
                "stop_reason": run.stop_reason,
                "error_class": run.error_class,
                "detail": run.detail,
                "final_round": run.final_round,
                "review_id": review.id,
                "context": context or {},
            },
        )


def review_created(session: Session, run: Run, item: ReviewItem) -> None:
    enqueue(
        session,
        run,
        WebhookEvent.review_created,
        {
            "review_id": item.id,
            "kind": item.kind,
            "run_id": run.id,
            "round": item.round,
            "reason": item.reason,
            "deadline": item.deadline,
        },
    )


def review_decided(session: Session, run: Run, item: ReviewItem, action: str, author: str) -> None:
    enqueue(
        session,
        run,
        WebhookEvent.review_decided,
        {
            "review_id": item.id,
            "kind": item.kind,
            "run_id": run.id,
            "round": item.round,
            "action": action,
            "author": author,
            "run_status": run.status,
        },
    )

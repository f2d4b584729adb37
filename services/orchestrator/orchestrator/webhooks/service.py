"""Webhook use cases: subscriptions, the delivery log, redelivery. The caller commits."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlmodel import Session, col, func, select

from orchestrator.auth.service import Principal
from orchestrator.tables import WebhookDelivery, WebhookSubscription, new_id, utcnow
from orchestrator.webhooks import outbox
from orchestrator.webhooks.secrets import SecretBox
from orchestrator.webhooks.targets import TargetGuard, TargetRefused
from shared.errors import AppError, BadRequest, Conflict, NotFound
from shared.orchestration import (
    DeliveryPage,
    DeliveryStatus,
    WebhookCreate,
    WebhookEvent,
    WebhookList,
    WebhookPublic,
    webhook_secret_bytes,
)
from shared.orchestration import (
    WebhookDelivery as DeliveryPublic,
)

MAX_PAGE = 200


class WebhookRefused(AppError):
    """A webhook request that cannot be served as asked; ``detail`` names the field."""

    status_code = 422

    def __init__(self, field: str, message: str) -> None:
        super().__init__(
            message, detail=[{"loc": ["body", field], "msg": message, "type": "value_error"}]
        )


async def check_target(guard: TargetGuard, field: str, url: str) -> None:
    """Refuse (422 naming ``field``) a webhook target inside: loopback, private, metadata,
    ... or a host that does not resolve (nothing could be checked; the receiver's owner can
    register it once its DNS exists). The reason never repeats the URL."""
    try:
        await guard.check(url)
    except TargetRefused as exc:
        raise WebhookRefused(field, f"this webhook target is refused: {exc.reason}") from None


def public(row: WebhookSubscription) -> WebhookPublic:
    return WebhookPublic(
        id=row.id,
        url=row.url,
        events=[WebhookEvent(e) for e in row.events],
        created_at=row.created_at,
    )


def delivery_public(row: WebhookDelivery) -> DeliveryPublic:
    pending = row.status == DeliveryStatus.pending.value
    return DeliveryPublic(
        id=row.id,
        subscription_id=row.subscription_id,
        run_id=row.run_id,
        url=row.url,
        event_type=WebhookEvent(row.event_type),
        status=DeliveryStatus(row.status),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at if pending else None,
        last_attempt_at=row.last_attempt_at,
        last_status_code=row.last_status_code,
        last_error=row.last_error,
        created_at=row.created_at,
        delivered_at=row.delivered_at,
    )


def _after_commit(session: Session, action: Any) -> None:
    event.listen(session, "after_commit", lambda _: action(), once=True)


def _engine(session: Session) -> sa.Engine:
    bind = session.get_bind()
    return bind if isinstance(bind, sa.Engine) else bind.engine


class WebhookService:
    def create(
        self,
        session: Session,
        principal: Principal,
        body: WebhookCreate,
        box: SecretBox | None,
        limit: int,
    ) -> WebhookPublic:
        if box is None:
            raise WebhookRefused(
                "secret",
                "webhook secrets are stored encrypted and no key is configured: set "
                "ORCHESTRATOR_WEBHOOK_KEY (a Fernet key) or CROSSCHECK_ADMIN_TOKEN",
            )
        count = session.exec(select(func.count()).select_from(WebhookSubscription)).one()
        if count >= limit:
            raise Conflict(
                f"there are already {count} webhook subscriptions (at most {limit}); "
                "delete one first"
            )
        key = webhook_secret_bytes(body.secret.get_secret_value())
        row = WebhookSubscription(
            id=new_id("whk"),
            url=body.url,
            events=[e.value for e in body.events],
            secret_encrypted=box.seal(key),
            created_by=principal.id,
        )
        session.add(row)
        engine = _engine(session)
        _after_commit(session, lambda: outbox.invalidate(engine))
        return public(row)

    def list(self, session: Session) -> WebhookList:
        rows = session.exec(select(WebhookSubscription).order_by(col(WebhookSubscription.id)))
        return WebhookList(items=[public(r) for r in rows])

    def delete(self, session: Session, subscription_id: str) -> None:
        row = session.get(WebhookSubscription, subscription_id)
        if row is None:
            raise NotFound(f"webhook subscription {subscription_id} does not exist")
        session.delete(row)
        # What it had not delivered yet cannot be signed any more: a dead letter, with why.
        session.connection().execute(
            outbox.DELIVERIES.update()
            .where(
                outbox.DELIVERIES.c.subscription_id == subscription_id,
                outbox.DELIVERIES.c.status == DeliveryStatus.pending.value,
            )
            .values(
                status=DeliveryStatus.failed.value,
                claimed_by=None,
                last_error="the subscription was deleted",
            )
        )
        engine = _engine(session)
        _after_commit(session, lambda: outbox.invalidate(engine))

    def deliveries(
        self,
        session: Session,
        *,
        status: DeliveryStatus | None,
        subscription_id: str | None,
        run_id: str | None,
        cursor: str | None,
        limit: int,
    ) -> DeliveryPage:
        query = select(WebhookDelivery)
        if status is not None:
            query = query.where(col(WebhookDelivery.status) == status.value)
        if subscription_id is not None:
            query = query.where(col(WebhookDelivery.subscription_id) == subscription_id)
        if run_id is not None:
            query = query.where(col(WebhookDelivery.run_id) == run_id)
        if cursor:
            if not cursor.startswith("msg_"):
                raise BadRequest("cursor is not valid: pass the next_cursor of a previous page")
            query = query.where(col(WebhookDelivery.id) < cursor)
        rows = list(session.exec(query.order_by(col(WebhookDelivery.id).desc()).limit(limit + 1)))
        page, more = rows[:limit], len(rows) > limit
        return DeliveryPage(
            items=[delivery_public(r) for r in page],
            next_cursor=page[-1].id if more and page else None,
        )

    def redeliver(self, session: Session, delivery_id: str) -> DeliveryPublic:
        """Queue a delivery again, with a fresh budget and the same webhook-id."""
        row = session.get(WebhookDelivery, delivery_id, with_for_update=True)
        if row is None:
            raise NotFound(f"webhook delivery {delivery_id} does not exist")
        if (
            row.subscription_id is not None
            and session.get(WebhookSubscription, row.subscription_id) is None
        ):
            raise Conflict(
                f"the subscription of delivery {delivery_id} was deleted; nothing can sign it"
            )
        now = utcnow()
        row.status = DeliveryStatus.pending.value
        row.attempts = 0
        row.next_attempt_at = now
        row.queued_at = now
        row.claimed_by = None
        row.delivered_at = None
        session.add(row)
        engine = _engine(session)
        _after_commit(session, lambda: outbox.wake(engine))
        return delivery_public(row)

"""Webhooks API (admin): subscriptions, the delivery log, redelivery."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status

from orchestrator.db import Database
from orchestrator.deps import Admin, SessionDep
from orchestrator.webhooks.service import MAX_PAGE, WebhookService, check_target
from shared.orchestration import (
    DeliveryPage,
    DeliveryStatus,
    WebhookCreate,
    WebhookDelivery,
    WebhookList,
    WebhookPublic,
)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
service = WebhookService()
ID = r"^[A-Za-z0-9_]{1,64}$"


@router.post("", status_code=status.HTTP_201_CREATED, response_model=WebhookPublic)
async def create_webhook(body: WebhookCreate, admin: Admin, request: Request) -> WebhookPublic:
    """Subscribe a URL to events; deliveries are signed with the secret (never shown again)."""
    state = request.app.state
    # resolved off the event loop, bounded in time, before any database work
    await check_target(state.webhook_guard, "url", body.url)
    limit = state.settings.webhook_max_subscriptions
    db: Database = state.db
    return await db.run(lambda s: service.create(s, admin, body, state.webhook_box, limit))


@router.get("", response_model=WebhookList)
def list_webhooks(admin: Admin, session: SessionDep) -> WebhookList:
    """Every subscription (without its secret)."""
    return service.list(session)


@router.get("/deliveries", response_model=DeliveryPage)
def list_deliveries(
    admin: Admin,
    session: SessionDep,
    status_filter: Annotated[DeliveryStatus | None, Query(alias="status")] = None,
    subscription_id: Annotated[str | None, Query(pattern=ID)] = None,
    run_id: Annotated[str | None, Query(pattern=ID)] = None,
    cursor: Annotated[str | None, Query(pattern=ID)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> DeliveryPage:
    """Deliveries, newest first (no secret, no signature); pass next_cursor for more."""
    return service.deliveries(
        session,
        status=status_filter,
        subscription_id=subscription_id,
        run_id=run_id,
        cursor=cursor,
        limit=limit,
    )


@router.post(
    "/deliveries/{delivery_id}/redeliver",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=WebhookDelivery,
)
def redeliver(
    delivery_id: Annotated[str, Path(pattern=ID)], admin: Admin, session: SessionDep
) -> WebhookDelivery:
    """Send a delivery again (same webhook-id, so a receiver that has it can drop it)."""
    return service.redeliver(session, delivery_id)


@router.delete("/{subscription_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook(
    subscription_id: Annotated[str, Path(pattern=ID)], admin: Admin, session: SessionDep
) -> None:
    """Delete a subscription; what it had not delivered yet is marked failed."""
    service.delete(session, subscription_id)

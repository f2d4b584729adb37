"""The queue's order, shared by the Queue page and the Review page's next / previous item."""

from __future__ import annotations

from typing import Any

FAR = "9999"  # sorts after any ISO deadline: items without one come last


def queue_items(client: Any) -> list[dict[str, Any]]:
    """Pending and claimed items: escalations first, then the nearest deadline."""
    items: list[dict[str, Any]] = []
    for status in ("pending", "claimed"):
        items.extend(client.list_reviews(status=status, limit=200)["items"])
    items.sort(key=lambda i: (i["kind"] != "escalation", str(i.get("deadline") or FAR)))
    return items


def neighbour(items: list[dict[str, Any]], review_id: str, step: int) -> str | None:
    """The id of the item ``step`` places from ``review_id`` in the queue (the first, or the
    last going back, when the item is no longer in it); None when there is none."""
    ids = [str(i["id"]) for i in items]
    others = [i for i in ids if i != review_id]
    if not others:
        return None
    if review_id not in ids:
        return others[0] if step > 0 else others[-1]
    at = ids.index(review_id) + step
    return ids[at] if 0 <= at < len(ids) else None

"""Pending and claimed review items, refreshed live; each opens in the Review page.

Rows link to the Review page (``review?review=<id>``, a LinkColumn) instead of claiming from
a button: the list is a fragment that reruns every second, and Streamlit 1.67 blanks the next
page when ``st.switch_page`` runs from a fragment while another tick is in flight. A link is
navigation the browser starts, which stops the fragment's timer first; the claim is one
click on the Review page.
"""

from datetime import UTC, datetime

import streamlit as st

from console.client import ApiError, get_client
from console.view import (
    SHORT_ID_REGEX,
    claimer,
    deadline_words,
    kind_words,
    md_literal,
    waited_words,
)

KIND_LABEL = {"pre_critique": "pre-critique", "escalation": "escalation"}

# most telling first: at 1280 px the main column is about 790 px wide, and what does not fit
# (round, waiting) scrolls inside the table's frame, never the page
COLUMNS = {
    "open": st.column_config.LinkColumn(
        "Item",
        width=75,
        pinned=True,
        display_text=SHORT_ID_REGEX,
        help="Opens the item on the Review page (a new tab); copy the cell for its full link.",
    ),
    "kind": st.column_config.TextColumn("Kind", width=160, help="What waits, and why."),
    "confidence": st.column_config.ProgressColumn(
        "Confidence",
        width=80,
        min_value=0.0,
        max_value=1.0,
        format="%.2f",
        help="The Critic's confidence on this round (or the last critiqued one); "
        "empty before any critique.",
    ),
    "deadline": st.column_config.TextColumn(
        "Deadline", width=250, help="When the item stops waiting, and what happens then."
    ),
    "task": st.column_config.TextColumn("Task", width=200),
    "claimed_by": st.column_config.TextColumn("Claimed by", width=80),
    "round": st.column_config.NumberColumn("Round", width=55),
    "waiting": st.column_config.TextColumn("Waiting", width=60, help="Since the item was made."),
}


def _changed(client) -> bool:
    """Poll the cheap events feed; True when something happened since the last look."""
    seq = st.session_state.get("queue_seq", 0)
    changed = "queue_items" not in st.session_state
    for _ in range(20):  # catch up at most 20 pages per tick
        events = client.events(since=seq)
        if not events:
            break
        seq = max(int(e["seq"]) for e in events)
        changed = True
        if len(events) < 500:
            break
    st.session_state["queue_seq"] = seq
    return changed


def _load(client) -> list[dict]:
    items: list[dict] = []
    for status in ("pending", "claimed"):
        items.extend(client.list_reviews(status=status, limit=200)["items"])
    # newest escalations first, then the items nearest their deadline
    far = "9999"
    items.sort(key=lambda i: (i["kind"] != "escalation", i.get("deadline") or far))
    return items


def rows(items: list[dict], now: datetime) -> list[dict]:
    return [
        {
            "open": f"review?review={item['id']}",
            "kind": kind_words(item),
            "task": (item.get("task") or "").split("\n", 1)[0],
            "round": item["round"],
            "confidence": item.get("confidence"),
            "waiting": waited_words(item.get("created_at"), now),
            "deadline": deadline_words(item.get("deadline"), now, item.get("on_expiry")),
            "claimed_by": claimer(item) if item.get("status") == "claimed" else "",
        }
        for item in items
    ]


@st.fragment(run_every=1)
def queue(kinds: list[str]) -> None:
    client = get_client()
    try:
        if _changed(client):
            st.session_state["queue_items"] = _load(client)
    except ApiError as exc:
        st.error(f"Could not read the queue: {md_literal(exc.detail)}")
        return
    items = [i for i in st.session_state.get("queue_items", []) if i["kind"] in kinds]
    if not items:
        st.info("Nothing waits for review.")
        return
    st.caption(
        f"{len(items)} item{'s' if len(items) != 1 else ''}: escalations first, then the "
        "nearest deadline."
    )
    picked = st.dataframe(
        rows(items, datetime.now(UTC)),
        column_config=COLUMNS,
        column_order=list(COLUMNS),
        hide_index=True,
        key="queue-table",
        on_select="rerun",
        selection_mode="single-row",
    )
    chosen = [items[i] for i in picked.selection.rows if i < len(items)]
    if chosen:
        item = chosen[0]
        task = (item.get("task") or "").split("\n", 1)[0]
        st.page_link(
            "views/review.py",
            label=f"Open {md_literal(kind_words(item))}: {md_literal(task[:80])}",
            query_params={"review": item["id"]},
        )
    else:
        st.caption("Select a row to open it here, or follow its Item link (a new tab).")


st.title("Review queue")
picked = st.multiselect(
    "Kinds",
    options=list(KIND_LABEL),
    default=list(KIND_LABEL),
    format_func=lambda kind: KIND_LABEL.get(kind, kind),
    key="queue-kinds",
)
queue(picked)

"""Pending and claimed review items, refreshed live; selecting a row opens it on the Review
page (its Item link opens it in a new tab).

The list is a fragment that reruns every second while the queue moves and every five seconds
once it has been quiet for half a minute: each rerun costs the console about 40-85 ms of CPU
whatever it draws (bench/queue_tab.py measures it), so an idle tab costs a fifth of a live one;
the mode changes with one rerun of the whole page. Streamlit 1.67 blanks the next page when
``st.switch_page`` runs from a fragment while another tick is in flight. So a selection only
notes the item and reruns the whole page; the page itself, outside the fragment, switches.
The reviewer picks the table's columns; the default set fits the main column at 1280 px.
"""

import time
from datetime import UTC, datetime

import streamlit as st

from console.client import ApiError, get_client
from console.navigation import queue_items
from console.view import (
    KIND_NAME,
    SHORT_ID_REGEX,
    claimer,
    deadline_words,
    kind_words,
    md_literal,
    waited_words,
)

# most telling first; the default set is about 780 px: it fits the main column at 1280 px
COLUMNS = {
    "open": st.column_config.LinkColumn(
        "Item",
        width=75,
        pinned=True,
        display_text=SHORT_ID_REGEX,
        help="Opens the item on the Review page (a new tab); copy the cell for its full link.",
    ),
    "kind": st.column_config.TextColumn("Kind", width=150, help="What waits, and why."),
    "task": st.column_config.TextColumn("Task", width=170),
    "round": st.column_config.NumberColumn("Round", width=55),
    "claimed_by": st.column_config.TextColumn("Claimed by", width=90),
    "confidence": st.column_config.ProgressColumn(
        "Confidence",
        width=75,
        min_value=0.0,
        max_value=1.0,
        format="%.2f",
        help="The Critic's confidence on this round (or the last critiqued one); "
        "empty before any critique.",
    ),
    "waiting": st.column_config.TextColumn("Waiting", width=60, help="Since the item was made."),
    "deadline": st.column_config.TextColumn(
        "Deadline", width=250, help="When the item stops waiting, and what happens then."
    ),
}
COLUMN_NAMES = {key: str(col["label"]) for key, col in COLUMNS.items() if key != "open"}
# the deadline's words are long: it is one click away in the column picker
DEFAULT_COLUMNS = ["kind", "task", "round", "claimed_by", "confidence", "waiting"]


LIVE_S = 1  # seconds between polls while the queue moves
IDLE_S = 5  # ... once it has been quiet for QUIET_S
QUIET_S = 30


def _pace() -> float:
    """How often the list polls now: every LIVE_S within QUIET_S of the last change seen."""
    last = st.session_state.get("queue_changed_at")
    return LIVE_S if last is not None and time.monotonic() - last < QUIET_S else IDLE_S


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


def queue(kinds: list[str], columns: list[str]) -> None:
    client = get_client()
    first = "queue_items" not in st.session_state
    try:
        if _changed(client):
            st.session_state["queue_items"] = queue_items(client)
            if not first:  # opening the page is no sign that the queue moves
                st.session_state["queue_changed_at"] = time.monotonic()
    except ApiError as exc:
        st.error(f"Could not read the queue: {md_literal(exc.detail)}")
        return
    # live again, or quiet for long enough: the page registers this fragment at the new pace
    if _pace() != st.session_state.get("queue_pace"):
        st.rerun(scope="app")
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
        column_order=["open", *[c for c in COLUMNS if c in columns]],
        hide_index=True,
        key="queue-table",
        on_select="rerun",
        selection_mode="single-row",
    )
    chosen = [items[i] for i in picked.selection.rows if i < len(items)]
    if chosen:  # the page, outside this fragment, opens it
        st.session_state["queue-open"] = chosen[0]["id"]
        st.rerun(scope="app")
    st.caption("Select a row to open it, or follow its Item link (a new tab).")


if opening := st.session_state.pop("queue-open", None):
    st.switch_page("views/review.py", query_params={"review": opening})
st.title("Review queue")
kinds_col, columns_col = st.columns([1, 2])
kinds = kinds_col.multiselect(
    "Kinds",
    options=list(KIND_NAME),
    default=list(KIND_NAME),
    format_func=lambda kind: KIND_NAME.get(kind, kind),
    key="queue-kinds",
)
columns = columns_col.multiselect(
    "Columns",
    options=list(COLUMN_NAMES),
    default=DEFAULT_COLUMNS,
    format_func=lambda key: COLUMN_NAMES.get(key, key),
    key="queue-columns",
)
st.session_state["queue_pace"] = _pace()  # the pace this fragment runs at until the next page run
st.fragment(run_every=st.session_state["queue_pace"])(queue)(kinds, columns)

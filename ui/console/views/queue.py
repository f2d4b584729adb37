"""Pending and claimed review items, refreshed live; each opens in the Review page.

Rows link to the Review page (``?review=<id>``) instead of claiming from a button: the list
is a fragment that reruns every second, and Streamlit 1.67 blanks the next page when
``st.switch_page`` runs from a fragment while another tick is in flight. A link is
navigation the browser starts, which stops the fragment's timer first; the claim is one
click on the Review page.
"""

from datetime import UTC, datetime

import streamlit as st

from console.client import ApiError, get_client
from console.view import claimer, deadline_label, human_span, seconds_left

KIND_LABEL = {"pre_critique": "pre-critique", "escalation": "escalation"}


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


@st.fragment(run_every=1)
def queue(kinds: list[str]) -> None:
    client = get_client()
    try:
        if _changed(client):
            st.session_state["queue_items"] = _load(client)
    except ApiError as exc:
        st.error(f"Could not read the queue: {exc.detail}")
        return
    items = [i for i in st.session_state.get("queue_items", []) if i["kind"] in kinds]
    if not items:
        st.info("Nothing waits for review.")
        return
    now = datetime.now(UTC)
    widths = [1.2, 4, 0.7, 1, 1.2, 1.6, 1.4, 1]
    header = st.columns(widths)
    titles = ["Kind", "Task", "Round", "Confidence", "Waiting", "Deadline", "Claimed by", ""]
    for col, title in zip(header, titles, strict=True):
        col.markdown(f"**{title}**")
    for item in items:
        cols = st.columns(widths)
        cols[0].write(KIND_LABEL.get(item["kind"], item["kind"]))
        cols[1].text(item["task"])
        cols[2].write(str(item["round"]))
        conf = item.get("confidence")
        cols[3].write("—" if conf is None else f"{float(conf):.2f}")
        waited = seconds_left(item.get("created_at"), now)
        cols[4].write(human_span(-waited) if waited is not None else "—")
        cols[5].write(deadline_label(item.get("deadline"), now, item.get("on_expiry")))
        cols[6].write(claimer(item))
        cols[7].page_link("views/review.py", label="Open", query_params={"review": item["id"]})


st.title("Review queue")
picked = st.multiselect(
    "Kinds",
    options=list(KIND_LABEL),
    default=list(KIND_LABEL),
    format_func=lambda kind: KIND_LABEL.get(kind, kind),
    key="queue-kinds",
)
queue(picked)

"""Runs the machines gave up on: open escalations first, then the recently settled ones."""

from datetime import UTC, datetime

import streamlit as st

from console.client import ApiError, get_client
from console.view import claimer, deadline_label, human_span, seconds_left

RECENT = 20
WIDTHS = [2.2, 3.2, 1.4, 0.7, 1, 1.6, 1.2, 1.6]
TITLES = ["Run", "Task", "Stop reason", "Round", "Age", "Deadline", "Claimed by", ""]
SETTLED_TITLES = ["Run", "Task", "Stop reason", "Round", "Age", "Status", "Claimed by", ""]


def _open(review_id: str, *, claim: bool) -> None:
    if claim:
        try:
            get_client().claim(review_id)
        except ApiError as exc:
            st.error(f"Could not claim: {exc.detail}")
            return
        st.session_state.pop("queue_items", None)
    st.session_state["review_id"] = review_id
    st.switch_page("views/review.py", query_params={"review": review_id})


def _deadline(item: dict, now: datetime) -> str:
    if not item.get("deadline"):
        return "none: waits for a person"
    return deadline_label(item["deadline"], now, item.get("on_expiry"))


def _rows(items: list[dict], *, live: bool) -> None:
    now = datetime.now(UTC)
    for col, title in zip(st.columns(WIDTHS), TITLES if live else SETTLED_TITLES, strict=True):
        col.markdown(f"**{title}**")
    for item in items:
        cols = st.columns(WIDTHS)
        cols[0].code(item["run_id"], language=None)
        cols[1].text(item.get("task") or "")
        cols[2].write(item.get("reason") or "—")
        cols[3].write(str(item["round"]))
        waited = seconds_left(item.get("created_at"), now)
        cols[4].write(human_span(-waited) if waited is not None else "—")
        cols[5].write(_deadline(item, now) if live else item["status"])
        cols[6].write(claimer(item))
        with cols[7]:
            if live and item["status"] == "pending":
                if st.button("Claim & open", key=f"esc-claim-{item['id']}", type="primary"):
                    _open(item["id"], claim=True)
            if st.button("Open", key=f"esc-open-{item['id']}"):
                _open(item["id"], claim=False)


st.title("Escalations")
st.caption(
    "Runs that stopped without an answer the machines trust (max rounds, convergence, "
    "repeated critique, budget, environment errors…). Retry gives a run more rounds; "
    "approve, edit or reject settles it."
)
client = get_client()
try:
    open_items = [
        item
        for status in ("pending", "claimed")
        for item in client.list_reviews(status=status, kind="escalation", limit=200)["items"]
    ]
    settled = [
        item
        for status in ("resolved", "expired")
        for item in client.list_reviews(status=status, kind="escalation", limit=RECENT)["items"]
    ]
except ApiError as exc:
    st.error(f"Could not read the escalations: {exc.detail}")
    st.stop()

# pending before claimed, oldest first: the longest wait is the most urgent
open_items.sort(key=lambda i: (i["status"] != "pending", i.get("created_at") or ""))
settled.sort(key=lambda i: i.get("created_at") or "", reverse=True)

st.subheader(f"Open ({len(open_items)})")
if open_items:
    _rows(open_items, live=True)
else:
    st.info("No open escalations.")

st.subheader("Recently settled")
if settled:
    _rows(settled[:RECENT], live=False)
else:
    st.caption("No settled escalations yet.")

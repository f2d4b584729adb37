"""Runs the machines gave up on: open escalations first, then the recently settled ones.

Both lists are tables. An open row, once selected, can be claimed and opened in one click
(or opened to read); each row also links its item (Review page) and its run (Runs page).
Settled rows say what a person decided and who, read once per item and kept in the session
(a decision never changes).
"""

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from console.client import ApiError, get_client
from console.view import (
    SHORT_ID_REGEX,
    claimer,
    deadline_words,
    md_literal,
    parse_time,
    short_id,
    waited_words,
)

RECENT = 20
DECIDED = {
    "approve": "approved the output",
    "edit": "edited the output",
    "reject": "rejected the run",
    "retry": "gave more rounds",
    "comment": "commented",
}

LINKS = {
    "open": st.column_config.LinkColumn(
        "Item",
        width=75,
        pinned=True,
        display_text=SHORT_ID_REGEX,
        help="Opens the item (a new tab).",
    ),
    "run": st.column_config.LinkColumn(
        "Run", width=75, display_text=SHORT_ID_REGEX, help="Opens the run's timeline."
    ),
    "reason": st.column_config.TextColumn("Stop reason", width=110),
    "task": st.column_config.TextColumn("Task", width=200),
}
# most telling first; what does not fit at 1280 px scrolls inside the table's frame
OPEN_COLUMNS = {
    **LINKS,
    "claimed_by": st.column_config.TextColumn("Claimed by", width=80),
    "confidence": st.column_config.ProgressColumn(
        "Confidence", width=80, min_value=0.0, max_value=1.0, format="%.2f"
    ),
    "deadline": st.column_config.TextColumn("Deadline", width=170),
    "waiting": st.column_config.TextColumn("Waiting", width=60),
    "round": st.column_config.NumberColumn("Round", width=55),
}
SETTLED_COLUMNS = {
    **LINKS,
    "decided": st.column_config.TextColumn("Decided", width=170),
    "by": st.column_config.TextColumn("By", width=80),
    "when": st.column_config.DatetimeColumn("When", width=100, format="distance"),
    "round": st.column_config.NumberColumn("Round", width=55),
}


def _open(review_id: str, *, claim: bool) -> None:
    if claim:
        try:
            get_client().claim(review_id)
        except ApiError as exc:
            st.error(f"Could not claim: {md_literal(exc.detail)}")
            return
        st.session_state.pop("queue_items", None)
    st.session_state["review_id"] = review_id
    st.switch_page("views/review.py", query_params={"review": review_id})


def _base(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "open": f"review?review={item['id']}",
        "run": f"runs?run={item['run_id']}",
        "task": (item.get("task") or "").split("\n", 1)[0],
        "reason": item.get("reason") or "",
        "round": item["round"],
    }


def decided_words(item: dict[str, Any], decision: dict[str, Any] | None) -> str:
    if item.get("status") == "expired":
        return "expired: nobody decided in time"
    if not decision:
        return "resolved"
    words = DECIDED.get(str(decision.get("action")), str(decision.get("action")))
    if decision.get("action") == "retry" and decision.get("rounds"):
        words = f"gave {decision['rounds']} more round{'s' if decision['rounds'] != 1 else ''}"
    return words


def _decision(client, item: dict[str, Any]) -> dict[str, Any] | None:
    cache: dict[str, Any] = st.session_state.setdefault("esc-decisions", {})
    if item["id"] not in cache:
        try:
            cache[item["id"]] = client.get_review(item["id"]).get("decision")
        except ApiError:
            return None  # shown as "resolved"; read again on the next visit
    decision: dict[str, Any] | None = cache[item["id"]]
    return decision


def open_table(items: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC)
    picked = st.dataframe(
        [
            {
                **_base(item),
                "confidence": item.get("confidence"),
                "waiting": waited_words(item.get("created_at"), now),
                "deadline": deadline_words(item.get("deadline"), now, item.get("on_expiry")),
                "claimed_by": claimer(item) if item.get("status") == "claimed" else "",
            }
            for item in items
        ],
        column_config=OPEN_COLUMNS,
        column_order=list(OPEN_COLUMNS),
        hide_index=True,
        key="esc-open-table",
        on_select="rerun",
        selection_mode="single-row",
    )
    rows = [i for i in picked.selection.rows if i < len(items)]
    if not rows:
        st.caption("Select a row to claim it and open it, or only to open it.")
        return
    item = items[rows[0]]
    st.markdown(
        f"**{md_literal(short_id(item['id']))}** · {md_literal(item.get('reason') or 'escalation')}"
    )
    claim_col, open_col, _ = st.columns([1.3, 1, 4])
    if item["status"] == "pending" and claim_col.button(
        "Claim and open", key="esc-claim", type="primary", width="stretch"
    ):
        _open(item["id"], claim=True)
    if open_col.button("Open", key="esc-open", width="stretch"):
        _open(item["id"], claim=False)


def settled_table(client, items: list[dict[str, Any]]) -> None:
    rows = []
    for item in items:
        decision = _decision(client, item) if item.get("status") == "resolved" else None
        rows.append(
            {
                **_base(item),
                "decided": decided_words(item, decision),
                "by": str((decision or {}).get("author") or ""),
                "when": parse_time((decision or {}).get("at")),
            }
        )
    st.dataframe(
        rows,
        column_config=SETTLED_COLUMNS,
        column_order=list(SETTLED_COLUMNS),
        hide_index=True,
        key="esc-settled-table",
    )


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
    st.error(f"Could not read the escalations: {md_literal(exc.detail)}")
    st.stop()

# pending before claimed, oldest first: the longest wait is the most urgent
open_items.sort(key=lambda i: (i["status"] != "pending", i.get("created_at") or ""))
settled.sort(key=lambda i: i.get("created_at") or "", reverse=True)

st.subheader(f"Open ({len(open_items)})")
if open_items:
    open_table(open_items)
else:
    st.info("No open escalations.")

st.subheader("Recently settled")
if settled:
    settled_table(client, settled[:RECENT])
else:
    st.caption("No settled escalations yet.")

"""My decisions: the items this reviewer decided, newest first, with what became of each (the
run's status now and, for a comment, how many of its points the Critic found applied).

The API lists resolved items without their decider, so the page reads the newest resolved
items one by one (at most ``LOOK_AT``) and keeps those decided under this session's name.
"""

from typing import Any

import streamlit as st

from console.client import ApiError, get_client
from console.view import SHORT_ID_REGEX, ago, kind_words, md_literal, point_outcomes

LOOK_AT = 25
ACTION_WORDS = {
    "comment": "commented",
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
    "retry": "gave more rounds",
}
COLUMNS = {
    "open": st.column_config.LinkColumn("Item", width=75, display_text=SHORT_ID_REGEX),
    "task": st.column_config.TextColumn("Task", width=220),
    "decision": st.column_config.TextColumn("Decision", width=120),
    "when": st.column_config.TextColumn("When", width=110),
    "run": st.column_config.TextColumn("Run now", width=110),
    "points": st.column_config.TextColumn("Your points", width=170),
}


def points_words(points: list[str], after_round: int, run: dict[str, Any] | None) -> str:
    """``2 of 2 applied`` / ``1 of 2 applied, 1 not checked yet`` / empty without points."""
    if not points:
        return ""
    outcomes = point_outcomes(points, after_round, (run or {}).get("rounds") or [])
    applied = sum(1 for o in outcomes if o["satisfied"])
    waiting = sum(1 for o in outcomes if o["satisfied"] is None)
    words = f"{applied} of {len(points)} applied"
    return words + (f", {waiting} not checked yet" if waiting else "")


def _me() -> str | None:
    user = st.session_state.get("user") or {}
    return user.get("name") or user.get("token_name")


def _mine(client: Any) -> list[dict[str, Any]]:
    me, ours = _me(), set(st.session_state.get("my_decisions", []))
    found = []
    for item in client.list_reviews(status="resolved", limit=LOOK_AT)["items"]:
        detail = client.get_review(item["id"])
        decision = detail.get("decision") or {}
        if item["id"] in ours or (me and decision.get("author") == me):
            found.append(detail)
    return found


st.title("My decisions")
client = get_client()
try:
    mine = _mine(client)
except ApiError as exc:
    st.error(f"Could not read your decisions: {md_literal(exc.detail)}")
    st.stop()
if not mine:
    st.info(f"None of the {LOOK_AT} newest decided items is yours.")
    st.stop()
rows = []
for item in mine:
    decision = item.get("decision") or {}
    try:
        run: dict[str, Any] | None = client.get_run(item["run_id"])
    except ApiError:
        run = None
    points = [str(p) for p in decision.get("points") or []]
    rows.append(
        {
            "open": f"review?review={item['id']}",
            "task": (item.get("task") or "").split("\n", 1)[0],
            "decision": f"{ACTION_WORDS.get(str(decision.get('action')), '?')} "
            f"({kind_words(item)})",
            "when": ago(decision.get("at")),
            "run": str((run or {}).get("status") or "?").replace("_", " "),
            "points": points_words(points, int(item["round"]), run),
        }
    )
st.caption(
    f"{len(rows)} of the {LOOK_AT} newest decided items are yours; open one to see each "
    "point's answer and check."
)
st.dataframe(
    rows,
    column_config=COLUMNS,
    column_order=list(COLUMNS),
    hide_index=True,
    key="my-decisions",
)

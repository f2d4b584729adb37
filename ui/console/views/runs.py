"""Runs, searched and filtered by status; a selected run's timeline round by round."""

import streamlit as st

from console.client import ApiError, get_client
from shared.orchestration import RunStatus

STATUSES = ["", *(s.value for s in RunStatus)]

st.title("Runs")
client = get_client()
search_col, status_col = st.columns([3, 1])
query = search_col.text_input(
    "Search",
    placeholder="a run id, or words from the task",
    max_chars=200,
    key="runs-q",
).strip()
status = status_col.selectbox(
    "Status", STATUSES, format_func=lambda s: s or "any", key="runs-status"
)
try:
    runs = client.list_runs(status=status or None, limit=50, q=query or None)["items"]
except ApiError as exc:
    st.error(f"Could not list runs: {exc.detail}")
    st.stop()
if not runs:
    wanted = [f"“{query}”" if query else "", f"status {status}" if status else ""]
    match = " with ".join(w for w in wanted if w)
    st.info(f"No runs match {match}." if match else "No runs.")
    st.stop()

st.dataframe(
    [
        {
            "id": r["id"],
            "status": r["status"],
            "kind": r["kind"],
            "task": r["task"].splitlines()[0] if r["task"] else "",
            "rounds": r["rounds"],
            "stop reason": r.get("stop_reason") or "",
            "updated": r["updated_at"],
        }
        for r in runs
    ],
    hide_index=True,
)
run_id = st.selectbox(
    "Timeline of", [r["id"] for r in runs], key="runs-selected", placeholder="pick a run"
)
if run_id:
    try:
        run = client.get_run(run_id)
    except ApiError as exc:
        st.error(f"Could not load run {run_id}: {exc.detail}")
        st.stop()
    st.markdown(
        f"**{run['status']}** · stop reason `{run.get('stop_reason')}` · "
        f"tokens {run.get('input_tokens', 0)} in / {run.get('output_tokens', 0)} out · "
        f"${run.get('cost_usd', 0):.4f}"
    )
    st.text(run["task"])
    for rnd in run.get("rounds") or []:
        with st.expander(f"Round {rnd['number']}", expanded=False):
            st.code(rnd.get("output") or "", language=None, wrap_lines=True)
            for label in ("evaluation", "critique", "review", "usage"):
                if rnd.get(label):
                    st.markdown(f"**{label.capitalize()}**")
                    st.json(rnd[label], expanded=False)
    for r in run.get("reflections") or []:
        who = "🧑 human" if r.get("source") == "human" else f"🤖 {r.get('source')}"
        st.caption(f"Reflection, round {r['round']} · {who}: {r['content']}")
    if run.get("final_output") is not None:
        st.subheader("Final output")
        st.code(run["final_output"], language=None, wrap_lines=True)

"""Datasets: download what reviewers taught as JSONL (chat, preference or critique)."""

from __future__ import annotations

from datetime import UTC, datetime, time

import streamlit as st

from console.client import ApiError, get_client
from console.view import md_literal

KINDS = {
    "chat": "Chat fine-tuning: task -> the version a person approved or edited",
    "preference": "Preference pairs: chosen (approved / edited) vs rejected (pre-edit, ...)",
    "critique": "Critique records: output, the Critic's issues, the reviewer's agree / dismiss",
}
DECISIONS = ("any", "approve", "edit", "comment", "reject", "retry")

st.title("Datasets")
st.caption(
    "Reviewed runs become data: one JSON record a line, loadable with "
    '`datasets.load_dataset("json", data_files=...)`. No token, key or model exchange is '
    "included; a service token exports its own runs only. `crosscheck export` writes all "
    "three with a dataset card."
)
kind = st.radio("Records", list(KINDS), format_func=KINDS.__getitem__, key="datasets-kind")
left, right = st.columns(2)
since = left.date_input("Decided from", value=None, key="datasets-since")
until = right.date_input("Decided before", value=None, key="datasets-until")
profile = left.text_input("Critic profile", key="datasets-profile", placeholder="any")
tag = right.text_input("Run tag", key="datasets-tag", placeholder="any")
decision = st.selectbox("Decision", DECISIONS, key="datasets-decision")

if st.button("Prepare export", type="primary", key="datasets-prepare"):
    filters = {
        "since": datetime.combine(since, time(), UTC).isoformat() if since else None,
        "until": datetime.combine(until, time(), UTC).isoformat() if until else None,
        "profile": profile.strip() or None,
        "tag": tag.strip() or None,
        "decision": None if decision == "any" else decision,
    }
    try:
        body = get_client().export_dataset(kind, **filters)
    except ApiError as exc:
        st.session_state.pop("datasets-file", None)
        st.error(f"Could not export: {md_literal(exc.detail)}")
    else:
        st.session_state["datasets-file"] = (kind, body)

prepared = st.session_state.get("datasets-file")
if prepared:
    name, body = prepared
    records = body.count(b"\n")
    st.caption(f"{records} {name} record{'s' if records != 1 else ''} ready.")
    st.download_button(
        f"Download {name}.jsonl",
        data=body,
        file_name=f"crosscheck-{name}.jsonl",
        mime="application/x-ndjson",
        key="datasets-download",
    )

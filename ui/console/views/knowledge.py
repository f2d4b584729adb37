"""Knowledge entries the Critic (and the Actor) receive: list, search, and for an admin create,
edit, retire and bring back (``/v1/knowledge``). Reviewers read the same list without the
forms: the API refuses their writes, so the page does not offer them."""

from __future__ import annotations

from typing import Any

import streamlit as st

from console.client import ApiError, get_client
from console.view import ago, md_literal

KINDS = {
    "rule_anchor": "rule anchor",
    "logic_pitfall": "logic pitfall",
    "evidence_hierarchy": "evidence hierarchy",
    "lesson": "lesson",
}
SHOW = {"active": "Active only", "retired": "Retired only", "all": "All"}
ANY = ""


def kind_words(kind: Any) -> str:
    return KINDS.get(str(kind), str(kind))


def profile_list(text: str) -> list[str]:
    """``legal, medical`` as ``["legal", "medical"]`` (empty: every profile)."""
    return [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]


def _flash(kind: str, message: str) -> None:
    st.session_state["knowledge-flash"] = (kind, message)


NEW = "knowledge-new"
NEW_DEFAULTS = {"kind": "rule_anchor", "title": "", "body": "", "profiles": "", "weight": 1.0}


def _fields(prefix: str, entry: dict[str, Any] | None = None) -> dict[str, Any]:
    """The entry's fields as form widgets (inside a form): filled from ``entry`` when given,
    else from their session state (the new-entry form's, which its callback resets)."""
    start: dict[str, Any] = {}
    if entry is None:
        # a number input's state set from the script came back as its minimum (0) from a
        # browser that left it untouched: this one starts from its value instead
        start = {"weight": {"value": NEW_DEFAULTS["weight"]}}
    else:
        kinds = list(KINDS)
        start = {
            "kind": {"index": kinds.index(entry["kind"]) if entry.get("kind") in kinds else 0},
            "title": {"value": entry.get("title", "")},
            "body": {"value": entry.get("body", "")},
            "profiles": {"value": ", ".join(entry.get("profiles") or [])},
            "weight": {"value": float(entry.get("weight", 1.0))},
        }
    kind = st.selectbox(
        "Kind", list(KINDS), format_func=kind_words, key=f"{prefix}-kind", **start.get("kind", {})
    )
    title = st.text_input("Title", key=f"{prefix}-title", **start.get("title", {}))
    body = st.text_area("Body", height=140, key=f"{prefix}-body", **start.get("body", {}))
    profiles = st.text_input(
        "Profiles (comma-separated; empty: every profile)",
        key=f"{prefix}-profiles",
        **start.get("profiles", {}),
    )
    weight = st.number_input(
        "Weight (how far it can be trusted, 0 to 1)",
        min_value=0.0,
        max_value=1.0,
        step=0.05,
        key=f"{prefix}-weight",
        **start.get("weight", {}),
    )
    return {
        "kind": kind,
        "title": title,
        "body": body,
        "profiles": profile_list(profiles),
        "weight": float(weight),
    }


def _create() -> None:
    """The new-entry form's submit (a callback, run before the page): on success the form is
    emptied for the next entry; a refusal is kept to show under the form, with the text."""
    state = st.session_state
    doc = {name: state.get(f"{NEW}-{name}", default) for name, default in NEW_DEFAULTS.items()}
    doc["profiles"] = profile_list(str(doc["profiles"]))
    doc["weight"] = float(doc["weight"])
    try:
        entry = get_client().create_knowledge(**doc)
    except ApiError as exc:
        state[f"{NEW}-error"] = f"Could not create the entry: {md_literal(exc.detail)}"
        return
    for name, default in NEW_DEFAULTS.items():
        if name == "weight":
            state.pop(f"{NEW}-{name}", None)
        else:
            state[f"{NEW}-{name}"] = default
    _flash("success", f"Created {md_literal(entry['id'])}: {md_literal(entry['title'])}.")


def _create_form() -> None:
    """A toggle opens the form (its state survives the reruns a submit makes, where an
    expander's open state would not); the API's refusal shows right under it."""
    if not st.toggle("New entry", key=f"{NEW}-open"):
        return
    for name, default in NEW_DEFAULTS.items():
        if name != "weight":
            st.session_state.setdefault(f"{NEW}-{name}", default)
    with st.container(border=True, key=f"{NEW}-box"):
        with st.form(NEW):
            _fields(NEW)
            st.form_submit_button(
                "Create entry", type="primary", key="knowledge-create", on_click=_create
            )
        error = st.session_state.pop(f"{NEW}-error", None)
        if error:
            st.error(error)


def _edit_form(entry: dict[str, Any]) -> None:
    prefix = f"knowledge-edit-{entry['id']}"
    with st.form(prefix):
        doc = _fields(prefix, entry)
        save, cancel = st.columns(2)
        submitted = save.form_submit_button("Save", type="primary", key=f"{prefix}-save")
        cancelled = cancel.form_submit_button("Cancel", key=f"{prefix}-cancel")
    if cancelled:
        st.session_state.pop("knowledge-editing", None)
        st.rerun()
    if not submitted:
        return
    changed = {k: v for k, v in doc.items() if v != entry.get(k)}
    if not changed:
        st.info("Nothing changed.")
        return
    try:
        get_client().update_knowledge(entry["id"], **changed)
    except ApiError as exc:
        st.error(f"Could not save: {md_literal(exc.detail)}")
        return
    st.session_state.pop("knowledge-editing", None)
    _flash("success", f"Saved {md_literal(entry['id'])}.")
    st.rerun()


def _write(entry: dict[str, Any], action: str) -> None:
    client = get_client()
    try:
        if action == "retire":
            client.retire_knowledge(entry["id"])
        else:
            client.update_knowledge(entry["id"], retired=False)
    except ApiError as exc:
        _flash("error", f"Could not {action}: {md_literal(exc.detail)}")
    else:
        _flash(
            "success",
            f"Retired {md_literal(entry['id'])}: no new call receives it."
            if action == "retire"
            else f"Brought back {md_literal(entry['id'])}: new calls may receive it again.",
        )
    st.session_state.pop("knowledge-confirm", None)
    st.rerun()


def _admin_actions(entry: dict[str, Any]) -> None:
    eid = entry["id"]
    if st.session_state.get("knowledge-editing") == eid:
        _edit_form(entry)
        return
    if st.session_state.get("knowledge-confirm") == eid:
        st.warning("Retire this entry? Critiques that received it keep the record.")
        yes, no = st.columns(2)
        if yes.button("Yes, retire", key=f"knowledge-retire-yes-{eid}", type="primary"):
            _write(entry, "retire")
        if no.button("Cancel", key=f"knowledge-retire-no-{eid}"):
            st.session_state.pop("knowledge-confirm", None)
            st.rerun()
        return
    edit, other = st.columns(2)
    if edit.button("Edit", key=f"knowledge-edit-button-{eid}"):
        st.session_state["knowledge-editing"] = eid
        st.rerun()
    if entry.get("retired"):
        if other.button("Bring back", key=f"knowledge-restore-{eid}"):
            _write(entry, "restore")
    elif other.button("Retire", key=f"knowledge-retire-{eid}"):
        st.session_state["knowledge-confirm"] = eid
        st.rerun()


def _card(entry: dict[str, Any], *, admin: bool, score: float | None, chosen: bool) -> None:
    with st.container(border=True, key=f"knowledge-{entry['id']}"):
        head = f"**{md_literal(entry.get('title') or '')}**"
        if chosen:
            head = f":blue-badge[linked] {head}"
        st.markdown(head)
        st.text(entry.get("body") or "")
        profiles = entry.get("profiles") or []
        facts = [
            md_literal(kind_words(entry.get("kind"))),
            "profiles " + md_literal(", ".join(profiles)) if profiles else "every profile",
            f"weight {float(entry.get('weight') or 0.0):.2f}",
            f"from {md_literal(entry.get('pack') or 'api')}",
            f"by {md_literal(entry.get('author') or 'unknown')}",
            f"changed {ago(entry.get('updated_at'))}",
            f"id {md_literal(entry['id'])}",
            f"score {score:.3g}" if score is not None else "",
            "**retired**" if entry.get("retired") else "",
        ]
        st.caption(" · ".join(f for f in facts if f))
        if admin:
            _admin_actions(entry)


def _linked(entry_id: str) -> dict[str, Any] | None:
    try:
        entry: dict[str, Any] = get_client().get_knowledge(entry_id)
    except ApiError as exc:
        st.warning(f"The linked entry {md_literal(entry_id)}: {md_literal(exc.detail)}")
        return None
    return entry


st.title("Knowledge")
st.caption(
    "Hand-written entries (rule anchors, logic pitfalls, evidence weights, and reviewers' "
    "lessons) that the Critic and the Actor receive for tasks they match (the best three "
    "above a score threshold)."
)
flash = st.session_state.pop("knowledge-flash", None)
if flash:
    kind, message = flash
    (st.success if kind == "success" else st.error)(message)

admin = (st.session_state.get("user") or {}).get("role") == "admin"
if admin:
    _create_form()
else:
    st.caption("Reading only: creating, editing and retiring entries needs the admin role.")

search = st.text_input(
    "Search: what would a call receive for this text?",
    placeholder="paste a task, or a few words",
    key="knowledge-search",
)
left, middle, right = st.columns(3)
kind_filter = left.selectbox(
    "Kind",
    [ANY, *KINDS],
    format_func=lambda k: "any" if k == ANY else kind_words(k),
    key="knowledge-kind",
)
profile = middle.text_input(
    "Profile", placeholder="any; e.g. legal", max_chars=64, key="knowledge-profile"
).strip()
show = right.selectbox(
    "Show", list(SHOW), format_func=lambda k: SHOW[k], key="knowledge-show", disabled=bool(search)
)

wanted = st.query_params.get("entry")
chosen = _linked(wanted) if wanted else None
if chosen is not None:
    st.subheader("Linked entry")
    _card(chosen, admin=admin, score=None, chosen=True)

client = get_client()
scores: dict[str, float] = {}
try:
    if search.strip():
        matches = client.search_knowledge(search.strip(), profile=profile or None)
        entries = [m["entry"] for m in matches]
        scores = {m["entry"]["id"]: float(m["score"]) for m in matches}
    else:
        entries = client.list_knowledge(
            kind=kind_filter or None,
            profile=profile or None,
            include_retired=show != "active",
        )
except ApiError as exc:
    st.error(f"Could not list the entries: {md_literal(exc.detail)}")
    st.stop()
if search.strip():
    entries = [e for e in entries if not kind_filter or e.get("kind") == kind_filter]
    st.caption(
        "The entries a call with this text would receive, best first (only those above "
        "the score threshold; retired entries are never offered)."
    )
elif show == "retired":
    entries = [e for e in entries if e.get("retired")]
if chosen is not None:
    entries = [e for e in entries if e["id"] != chosen["id"]]

if not entries:
    st.info(
        "No entry matches this text."
        if search.strip()
        else "No entries match these filters."
        if kind_filter or profile or show != "active"
        else "No knowledge entries yet."
    )
    st.stop()
st.caption(f"{len(entries)} entr{'ies' if len(entries) != 1 else 'y'}")
for entry in entries:
    _card(entry, admin=admin, score=scores.get(entry["id"]), chosen=False)

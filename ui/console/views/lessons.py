"""Lessons reviewers kept for similar future tasks: who wrote them, how often runs used them."""

import streamlit as st

from console.client import ApiError, get_client
from console.view import human_span, md_literal, seconds_left

SHOW = {"active": "Active only", "retired": "Retired only", "all": "All"}


def _retire(lesson: dict) -> None:
    try:
        get_client().retire_lesson(lesson["id"])
    except ApiError as exc:
        st.session_state["lessons-flash"] = ("error", f"Could not retire: {md_literal(exc.detail)}")
    else:
        st.session_state["lessons-flash"] = (
            "success",
            f"Retired lesson {md_literal(lesson['id'])}: new runs will no longer get it.",
        )
    st.session_state.pop("lessons-confirm", None)


def _card(lesson: dict, can_retire: bool) -> None:
    with st.container(border=True):
        st.text(lesson["content"])
        age = seconds_left(lesson.get("created_at"))
        facts = [
            f"scope {md_literal(lesson['scope'])}",
            f"by {md_literal(lesson.get('author') or 'unknown')}",
            f"used {lesson['uses']} time{'s' if lesson['uses'] != 1 else ''}",
            f"from run {md_literal(lesson['source_run_id'])}"
            if lesson.get("source_run_id")
            else "",
            f"{human_span(-age)} ago" if age is not None else "",
            "**retired**" if lesson["retired"] else "",
        ]
        st.caption(" · ".join(f for f in facts if f))
        if lesson["retired"]:
            return
        if st.session_state.get("lessons-confirm") == lesson["id"]:
            st.warning(
                "Retire this lesson? Runs that used it keep the record; it cannot be undone."
            )
            yes, no = st.columns(2)
            if yes.button("Yes, retire", key=f"retire-yes-{lesson['id']}", type="primary"):
                _retire(lesson)
                st.rerun()
            if no.button("Cancel", key=f"retire-no-{lesson['id']}"):
                st.session_state.pop("lessons-confirm", None)
                st.rerun()
        elif st.button(
            "Retire",
            key=f"retire-{lesson['id']}",
            disabled=not can_retire,
            help=None if can_retire else "Retiring needs the reviewer role.",
        ):
            st.session_state["lessons-confirm"] = lesson["id"]
            st.rerun()


def empty_state(scope: str, show: str) -> str:
    """Why the list is empty: no lessons at all, none active (all retired), none retired, or
    none in the scope asked for."""
    if scope:
        return f"No {'' if show == 'all' else show + ' '}lessons in scope “{md_literal(scope)}”."
    if show == "all":
        return "No lessons yet."
    try:
        every = get_client().list_lessons(include_retired=True)
    except ApiError:
        every = []
    if not every:
        return "No lessons yet."
    if show == "active":
        n = len(every)
        return (
            f"No active lessons: {'the one lesson is' if n == 1 else f'all {n} lessons are'} "
            "retired. Show “Retired only” or “All” to read them."
        )
    return "No retired lessons: every lesson is active."


st.title("Lessons")
st.caption(
    "A reviewer's comment kept as a lesson reaches the Actor's prompt in similar new runs "
    "(global lessons everywhere, tagged ones only in runs with that tag)."
)
flash = st.session_state.pop("lessons-flash", None)
if flash:
    kind, message = flash
    (st.success if kind == "success" else st.error)(message)

left, right = st.columns(2)
scope = left.text_input(
    "Scope", placeholder="any; or 'global', or a tag", max_chars=100, key="lessons-scope"
)
show = right.selectbox(
    "Show", list(SHOW), format_func=lambda k: SHOW[k], key="lessons-show", index=0
)
try:
    lessons = get_client().list_lessons(
        scope=scope.strip() or None, include_retired=show != "active"
    )
except ApiError as exc:
    st.error(f"Could not list lessons: {md_literal(exc.detail)}")
    st.stop()
if show == "retired":
    lessons = [lesson for lesson in lessons if lesson["retired"]]
if not lessons:
    st.info(empty_state(scope.strip(), show))
    st.stop()

role = (st.session_state.get("user") or {}).get("role")
st.caption(f"{len(lessons)} lesson{'s' if len(lessons) != 1 else ''}")
for lesson in lessons:
    _card(lesson, can_retire=role != "service")

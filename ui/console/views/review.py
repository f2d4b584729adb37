"""One review item: its context, the critic's issues, and one decision form."""

import streamlit as st

from console.client import ApiError, get_client, new_idempotency_key
from console.view import (
    SEVERITY_ICON,
    claimer,
    highlight,
    human_span,
    seconds_left,
    side_by_side,
    unified_diff,
)

ACTIONS = {
    "pre_critique": ["comment", "approve", "edit", "reject"],
    "escalation": ["comment", "retry", "approve", "edit", "reject"],
}
ACTION_HELP = {
    "comment": "Comment: the Actor revises next and must apply each line of your note; "
    "the run cannot pass until the Critic finds every line applied.",
    "approve": "Approve: accept the current output.",
    "edit": "Edit: replace the output (tick 'finish' to accept it as final).",
    "reject": "Reject: stop the run (say why in the comment).",
    "retry": "Retry: give the run more rounds.",
}


@st.fragment(run_every=1)
def lease(expires_at) -> None:
    left = seconds_left(expires_at)
    if left is None:
        st.caption("Not claimed.")
    elif left <= 0:
        st.warning("Your lease has expired: claim again before deciding.")
    else:
        st.caption(f"Lease: {human_span(left)} left")


def _context(review: dict) -> None:
    ctx = review.get("context") or {}
    output = ctx.get("output") or ""
    critiques = ctx.get("critiques") or []
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Task")
        st.text(ctx.get("task") or review["task"])
        st.subheader(f"Output (round {ctx.get('round', review['round'])})")
        quotes = [i.get("quote") or "" for c in critiques[-1:] for i in c.get("issues") or []]
        marked, side, diff, raw = st.tabs(
            ["Critic's quotes marked", "Side by side", "Unified diff", "Raw"]
        )
        with marked:
            st.markdown(highlight(output, quotes), unsafe_allow_html=True)
        with side:
            if ctx.get("previous_output") is None:
                st.caption("No previous round.")
            else:
                st.html(side_by_side(ctx["previous_output"], output))
        with diff:
            if ctx.get("previous_output") is None:
                st.caption("No previous round.")
            else:
                st.code(unified_diff(ctx["previous_output"], output) or "(no change)", "diff")
        with raw:
            st.code(output, language=None, wrap_lines=True)
        st.subheader("Critique")
        if not critiques:
            st.caption("No critique yet.")
        for c in reversed(critiques):
            conf = c.get("confidence")
            title = f"Round {c.get('round')}: {c.get('verdict') or c.get('error_class') or '?'}"
            if conf is not None:
                title += f" (confidence {float(conf):.2f})"
            with st.expander(title, expanded=c is critiques[-1]):
                for issue in c.get("issues") or []:
                    sev = issue.get("severity", "")
                    st.markdown(
                        f"{SEVERITY_ICON.get(sev, '⚪')} **{sev}** · {issue.get('dimension')}"
                    )
                    if issue.get("quote"):
                        st.text(f"“{issue['quote']}”")
                    if issue.get("suggestion"):
                        st.caption(f"Suggestion: {issue['suggestion']}")
                if c.get("reflection"):
                    st.caption(f"Critic's reflection: {c['reflection']}")
    with right:
        st.subheader("Evaluation")
        evaluation = ctx.get("evaluation")
        if not evaluation:
            st.caption("No evaluator ran.")
        else:
            mark = "✅ passed" if evaluation.get("passed") else "❌ failed"
            st.markdown(f"**{mark}**")
            if evaluation.get("summary"):
                st.text(evaluation["summary"])
            extra = {k: v for k, v in evaluation.items() if k not in ("passed", "summary")}
            if extra:
                with st.expander("Details"):
                    st.json(extra)
        st.subheader("Reflections")
        reflections = ctx.get("reflections") or []
        if not reflections:
            st.caption("None yet.")
        for r in reflections:
            who = "🧑 human" if r.get("source") == "human" else f"🤖 {r.get('source')}"
            st.markdown(f"**Round {r.get('round')}** · {who} · {r.get('author') or ''}")
            st.text(r.get("content") or "")
        if review["kind"] == "escalation":
            st.subheader("Why it stopped")
            st.write(f"Stop reason: `{ctx.get('stop_reason')}`")
            if ctx.get("rounds"):
                with st.expander(f"All {len(ctx['rounds'])} rounds"):
                    st.json(ctx["rounds"])


def _decision_form(review: dict) -> None:
    ctx = review.get("context") or {}
    idem_key = f"idem-{review['id']}"
    st.session_state.setdefault(idem_key, new_idempotency_key())
    with st.form("decision"):
        st.subheader("Decision")
        actions = ACTIONS.get(review["kind"], ACTIONS["pre_critique"])
        action = st.radio("Action", actions, horizontal=True, key="decision-action", captions=None)
        st.caption(" · ".join(ACTION_HELP[a] for a in actions))
        comment = st.text_area("Comment", key="decision-comment")
        lesson = st.checkbox(
            "Make this comment a lesson for similar future tasks", key="decision-lesson"
        )
        lesson_scope = st.text_input(
            "Lesson scope: 'global' or a tag runs opt into", value="global", key="decision-scope"
        )
        output = st.text_area(
            "Edited output (for edit)", value=ctx.get("output") or "", key="decision-output"
        )
        finish = st.checkbox("Finish with the edited output", key="decision-finish")
        rounds = 1
        if review["kind"] == "escalation":
            rounds = st.number_input("More rounds (for retry)", 1, 10, 1, key="decision-rounds")
        submitted = st.form_submit_button("Submit decision", type="primary", key="decision-submit")
    if not submitted:
        return
    if action == "comment" and not comment.strip():
        st.error("A comment decision needs the comment text.")
        return
    if action == "reject" and not comment.strip():
        st.error("A reject decision needs the reason: write it in the comment.")
        return
    if lesson and not comment.strip():
        st.error("A lesson is made from the comment: write one.")
        return
    if action == "edit" and not output.strip():
        st.error("An edit decision needs the edited output.")
        return
    try:
        result = get_client().decide(
            review["id"],
            action=action,
            idempotency_key=st.session_state[idem_key],
            comment=comment.strip() or None,
            output=output if action == "edit" else None,
            finish=finish,
            rounds=int(rounds) if action == "retry" else None,
            lesson=lesson,
            lesson_scope=lesson_scope.strip() or "global",
        )
    except ApiError as exc:
        st.session_state[idem_key] = new_idempotency_key()  # a corrected form is a new request
        st.error(f"Decision refused: {exc.detail}")
        return
    st.session_state["last_decision"] = result
    st.session_state.pop("queue_items", None)
    st.rerun()


st.title("Review")
if requested := st.query_params.get("review"):  # a link from the queue, or a shared URL
    st.session_state["review_id"] = requested
review_id = st.session_state.get("review_id")
if not review_id:
    st.info("Open an item in the queue to review it.")
    st.page_link("views/queue.py", label="Go to the queue")
    st.stop()

done = st.session_state.get("last_decision")
if done and done.get("review_id") == review_id:
    st.success(f"Decision '{done['action']}' recorded; the run is now {done['run_status']}.")

client = get_client()
try:
    review = client.get_review(review_id)
except ApiError as exc:
    st.error(f"Could not load review {review_id}: {exc.detail}")
    st.stop()

top = st.columns([4, 1, 1])
top[0].markdown(
    f"**{review['kind']}** · status **{review['status']}** · round {review['round']}"
    f" · run `{review['run_id']}` · claimed by {claimer(review)}"
    + (f"  \nReason: {review['reason']}" if review.get("reason") else "")
)
with top[0]:
    lease(review.get("lease_expires_at"))
    st.page_link("views/queue.py", label="Back to the queue")
if review["status"] == "pending":
    if top[1].button("Claim", key="review-claim", type="primary"):
        try:
            client.claim(review_id)
        except ApiError as exc:
            st.error(f"Could not claim: {exc.detail}")
        else:
            st.session_state.pop("queue_items", None)
            st.rerun()
elif review["status"] == "claimed":
    if top[1].button("Renew lease", key="renew"):
        try:
            client.claim(review_id)
            st.rerun()
        except ApiError as exc:
            st.error(f"Could not renew: {exc.detail}")
    if top[2].button("Release", key="release"):
        try:
            client.release(review_id)
        except ApiError as exc:
            st.error(f"Could not release: {exc.detail}")
        else:  # stay here (no page switch while the lease countdown ticks): it is pending again
            st.session_state.pop("queue_items", None)
            st.rerun()

_context(review)
if review["status"] == "claimed":
    _decision_form(review)
elif review["status"] == "pending":
    st.info("Claim this item to decide it: the claim keeps other reviewers off it meanwhile.")
elif review.get("decision"):
    st.subheader("Decision")
    st.json(review["decision"])

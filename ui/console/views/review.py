"""One review item: the output as it ships with the critic's quotes marked, the evidence as
tables, and a decision panel for the claim's holder (a read-only view for everyone else).

Laid out for deciding at 1280x800: the task and the output on the left, the decision panel at
the top of the right column, so the output and the Send button show together. After a comment
the page follows the run and shows, per point, the Actor's answer and the Critic's check.

Keyboard shortcuts (Streamlit button shortcuts; ``C`` and ``R`` are Streamlit's own): Alt+K
claims, Alt+U releases, Alt+1 to Alt+5 choose the decision (in the order shown), Ctrl+Enter
sends it, Ctrl+Shift+Enter sends it and opens the next item, Alt+N opens the next item of the
queue, Alt+P the previous one, Alt+Q goes back to the queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import streamlit as st

from console import evidence, judgements, mode, quoting, reflection
from console.client import ApiError, get_client, new_idempotency_key
from console.navigation import neighbour, queue_items
from console.view import (
    ago,
    answer_words,
    check_words,
    claimer,
    decision_banner,
    friendly_detail,
    kind_words,
    marked_output,
    md_literal,
    point_outcomes,
    quote_spans,
    quoted_point,
    renew_due,
    side_by_side,
    time_left,
    unified_diff,
    why_words,
)
from console.views import login as session
from shared.contracts import MAX_POINT_CHARS, MAX_POINTS
from shared.orchestration import comment_points

ACTIONS = {
    "pre_critique": ["comment", "approve", "edit", "reject"],
    "escalation": ["comment", "retry", "approve", "edit", "reject"],
}
ACTION_LABEL = {
    "comment": "Comment",
    "approve": "Approve",
    "edit": "Edit",
    "reject": "Reject",
    "retry": "Retry",
}
ACTION_HELP = {
    "comment": "The Actor revises next and must apply each point; the run cannot pass until "
    "the Critic finds every point applied.",
    "approve": "The current output becomes the run's final output.",
    "edit": "Your version becomes a new round (the current one stays in the history).",
    "reject": "The run stops as failed, with your reason.",
    "retry": "The run gets more rounds, starting from a revision.",
}
SHORTCUTS = {
    "claim": "Alt+K",
    "release": "Alt+U",
    "send": "Ctrl+Enter",
    "send_next": "Ctrl+Shift+Enter",
    "next": "Alt+N",
    "previous": "Alt+P",
    "queue": "Alt+Q",
}
TERMINAL = {"succeeded", "failed", "cancelled", "escalated", "awaiting_review"}
SEVERITY_COLOR = {
    "critical": "red",
    "high": "red",
    "major": "orange",
    "medium": "orange",
    "minor": "yellow",
    "low": "gray",
}
SOURCE_LABEL = {"human": "person", "critic": "Critic", "evaluator": "evaluator"}

# who wrote a round, by its provenance (the Actor when it says nothing else)
AUTHORS = {"human": "person", "given": "run's creator"}


def _holds(review: dict[str, Any]) -> bool:
    """Whether this session holds the claim: the orchestrator records the claiming token's
    id, and only that token can decide, so the claim is ours when that id is this session's
    (``GET /v1/auth/me``), after a reload too, whether we logged in with a password or a
    token. Another session of the same account reads it like anyone else."""
    holder = review.get("claimed_by")
    if review.get("status") != "claimed" or not holder:
        return False
    return holder in st.session_state.get("my_claims", {}) or holder == session.my_id()


def _remember_claim(answer: Any) -> None:
    if isinstance(answer, dict) and answer.get("claimed_by"):
        st.session_state.setdefault("my_claims", {})[answer["claimed_by"]] = answer.get(
            "claimed_by_name"
        )


@st.fragment(run_every=5)
def lease(review_id: str, expires_at: Any) -> None:
    """The lease's time left, renewed (claimed again by its holder) while the page is open
    and the reviewer active; a lapsed lease says so."""
    expires_at = st.session_state.get(f"lease-{review_id}", expires_at)
    if renew_due(expires_at, st.session_state.get("review-active-at", 0.0), time.time()):
        try:
            renewed = get_client().claim(review_id)
        except ApiError as exc:
            st.warning(f"Could not renew your claim: {md_literal(friendly_detail(exc.detail))}")
            return
        _remember_claim(renewed)
        expires_at = renewed.get("lease_expires_at") or expires_at
        st.session_state[f"lease-{review_id}"] = expires_at
    left = time_left(expires_at)
    if left.startswith("until now"):
        st.warning("Your claim has lapsed: claim again before deciding.")
    else:
        st.caption(f"You hold this item {left}; it renews while you work on it.")


# ---------------------------------------------------------------- output and critique
def _issues(critique: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((critique or {}).get("issues") or [])


def _numbered(issues: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(n, issue.get("quote") or "") for n, issue in enumerate(issues, start=1)]


def _show_output(
    text: str,
    critique: dict[str, Any] | None,
    *,
    code: bool,
    cite: Callable[[str], str] | None = None,
) -> None:
    st.html(marked_output(text, _numbered(_issues(critique)), code=code, decorate=cite))


def _issue_cards(text: str, critique: dict[str, Any] | None, *, code: bool) -> None:
    issues = _issues(critique)
    if not issues:
        st.caption("The Critic quoted nothing in this version.")
        reflection.no_error_panel(critique)
        return
    found = {n for _, _, n in quote_spans(text, _numbered(issues))}
    for n, issue in enumerate(issues, start=1):
        with st.container(border=True, key=f"issue-{n}"):
            sev = str(issue.get("severity") or "?")
            badge = (
                f":{SEVERITY_COLOR[sev]}-badge[{sev}]" if sev in SEVERITY_COLOR else md_literal(sev)
            )
            st.markdown(f"**{n}.** {badge} · {md_literal(issue.get('dimension') or '')}")
            quote = issue.get("quote")
            if quote:
                if code:
                    st.code(quote, language=None, wrap_lines=True)
                else:
                    st.text(f"“{quote}”")
                if n not in found:
                    st.caption("This quote is not in the output word for word.")
            if issue.get("suggestion"):
                st.text(f"Suggestion: {issue['suggestion']}")
            reflection.issue_record(issue)


def _critique_line(critique: dict[str, Any] | None) -> str:
    if not critique:
        return "No critique of this version yet."
    verdict = critique.get("verdict") or critique.get("error_class") or "?"
    line = f"The Critic's verdict: **{md_literal(verdict)}**"
    if critique.get("confidence") is not None:
        line += f" (confidence {float(critique['confidence']):.2f})"
    return line


def _output(review: dict[str, Any], run: dict[str, Any] | None, *, pick: bool = False) -> None:
    """The output of the item's round in tabs; with ``pick`` (the claim's holder) a selection
    in it, or a line chosen under it, starts a point that quotes it."""
    ctx = review.get("context") or {}
    output = ctx.get("output") or ""
    previous = ctx.get("previous_output")
    number = int(ctx.get("round") or review["round"])
    code = ctx.get("kind") == "code"
    by_round = {int(c.get("round") or 0): c for c in ctx.get("critiques") or []}
    critique, earlier = by_round.get(number), by_round.get(number - 1)
    rounds = {int(r.get("number") or 0): r for r in (run or {}).get("rounds") or []}
    this = rounds.get(number) or {}
    research, citations = evidence.round_research(this, ctx)
    cite = evidence.citation_linker(number, research, citations, output=output)

    st.subheader(f"Output, round {number}")
    if this.get("provenance") == "human":
        edited = this.get("review") or {}
        st.info(
            f"A person ({md_literal(edited.get('edited_by') or 'a reviewer')}) wrote this version; "
            "the version it replaced is beside it under “Beside the previous round”."
        )
    elif this.get("provenance") == "given":
        st.info(
            "The run's creator gave this text: no model wrote it. It ships only when a person "
            "approves it."
        )
    st.markdown(_critique_line(critique))
    reflection.depth_panel(critique)
    tabs = ["Quotes marked", "Beside the previous round", "Changes"]
    if code:
        tabs.insert(1, "Highlighted")
    shown = dict(zip(tabs, st.tabs(tabs), strict=True))
    with shown["Quotes marked"]:
        with st.container(key="output-marked"):  # the output as the reviewer first sees it
            if pick:
                marked = marked_output(
                    output, _numbered(_issues(critique)), code=code, decorate=cite, lines=True
                )
                quoting.pickable_output(review["id"], output, marked)
                quoting.line_picker(review["id"], output)
            else:
                _show_output(output, critique, code=code, cite=cite)
        _issue_cards(output, critique, code=code)
        judgements.controls(review)
    if code:
        with shown["Highlighted"]:
            st.code(output, language="python", line_numbers=True, wrap_lines=True)
    with shown["Beside the previous round"]:
        if previous is None:
            st.caption("This is the first round.")
        else:
            left, right = st.columns(2)
            with left:
                st.markdown(f"**Round {number - 1}**")
                _show_output(previous, earlier, code=code)
            with right:
                st.markdown(f"**Round {number}** (this one)")
                _show_output(output, critique, code=code, cite=cite)
    with shown["Changes"]:
        if previous is None:
            st.caption("This is the first round.")
        else:
            st.html(side_by_side(previous, output))
            with st.expander("As a unified diff"):
                st.code(unified_diff(previous, output) or "(no change)", "diff")
    evidence.panel(number, research, citations)


def _edit_beside(review: dict[str, Any], run: dict[str, Any] | None) -> None:
    """A version a reviewer wrote for this item beside the version it replaced, across the
    page's whole width (each side about 480 px at 1280 px), then the changed lines."""
    ctx = review.get("context") or {}
    output = ctx.get("output") or ""
    code = ctx.get("kind") == "code"
    for row in (run or {}).get("rounds") or []:
        meta = row.get("review") or {}
        if row.get("provenance") != "human" or meta.get("review_id") != review["id"]:
            continue
        number = row.get("number")
        edited = str(row.get("output") or "")
        original = f"Original (round {meta.get('from_round', review['round'])})"
        st.subheader(
            f"Edited by {md_literal(meta.get('edited_by') or 'a reviewer')} "
            f"(round {md_literal(number)})"
        )
        with st.container(key="edit-beside"):
            left, right = st.columns(2)
            with left:
                st.markdown(f"**{md_literal(original)}**")
                st.html(marked_output(output, [], code=code))
            with right:
                st.markdown(f"**Edited (round {md_literal(number)})**")
                st.html(marked_output(edited, [], code=code))
            with st.expander("Changed lines", expanded=True):
                st.html(side_by_side(output, edited, before=original, after="edited"))


def _history(review: dict[str, Any], run: dict[str, Any] | None) -> None:
    """Each earlier round's critique: its verdict, and its issues as a table."""
    ctx = review.get("context") or {}
    number = int(ctx.get("round") or review["round"])
    critiques = {int(c.get("round") or 0): c for c in ctx.get("critiques") or []}
    for row in (run or {}).get("rounds") or []:  # the run has every round; the item some
        if row.get("critique") and int(row.get("number") or 0) not in critiques:
            critiques[int(row["number"])] = row["critique"]
    earlier = sorted(n for n in critiques if 0 < n < number)
    if not earlier:
        return
    st.subheader("Earlier rounds")
    for n in reversed(earlier):  # the most recent first
        critique = critiques[n]
        issues = [i for i in critique.get("issues") or [] if isinstance(i, dict)]
        title = f"Round {n} · verdict {critique.get('verdict') or '?'}"
        if isinstance(critique.get("confidence"), int | float):
            title += f" ({float(critique['confidence']):.2f})"
        title += f" · {len(issues)} issue{'s' if len(issues) != 1 else ''}"
        with st.expander(md_literal(title), expanded=n == earlier[-1]):
            if not issues:
                st.caption("The Critic raised no issue on this round.")
                continue
            st.dataframe(
                [
                    {
                        "severity": str(i.get("severity") or ""),
                        "dimension": str(i.get("dimension") or ""),
                        "quote": str(i.get("quote") or ""),
                        "suggestion": str(i.get("suggestion") or ""),
                    }
                    for i in issues
                ],
                hide_index=True,
                width="stretch",
                key=f"history-issues-{n}",
                column_config={
                    "severity": st.column_config.TextColumn("Severity", width="small"),
                    "dimension": st.column_config.TextColumn("Dimension", width="small"),
                    "quote": st.column_config.TextColumn("Quote", width="medium"),
                    "suggestion": st.column_config.TextColumn("Suggestion", width="large"),
                },
            )


# ---------------------------------------------------------------- evidence
def _evaluation(ctx: dict[str, Any]) -> None:
    st.subheader("Evaluation")
    evaluation = ctx.get("evaluation")
    if not evaluation:
        st.caption("No evaluator ran on this version.")
        return
    if evaluation.get("passed"):
        st.markdown(":green-badge[passed]")
    else:
        st.markdown(":red-badge[failed]")
    if evaluation.get("summary"):
        st.text(evaluation["summary"])
    tests = evaluation.get("tests") or []
    if tests:
        frame = [
            {
                "test": t.get("name") or "?",
                "status": t.get("status") or "?",
                "message": t.get("message") or "",
            }
            for t in tests
        ]
        st.dataframe(
            frame,
            hide_index=True,
            width="stretch",
            key="eval-tests",
            column_config={
                "test": st.column_config.TextColumn("Test"),
                "status": st.column_config.TextColumn("Status", width="small"),
                "message": st.column_config.TextColumn("Message"),
            },
        )
    for stream in ("stdout", "stderr"):
        if evaluation.get(stream):
            with st.expander(stream):
                st.code(evaluation[stream], language=None)


def _binding_checks(critique: dict[str, Any] | None) -> None:
    checks = (critique or {}).get("binding_checks") or []
    if not checks:
        return
    st.subheader("Reviewer points")
    frame = [
        {
            "point": c.get("point") or "",
            "applied": bool(c.get("satisfied")),
            "where": c.get("quote") or "",
        }
        for c in checks
    ]
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        key="binding-checks",
        column_config={
            "point": st.column_config.TextColumn("Point"),
            "applied": st.column_config.CheckboxColumn("Applied", width="small"),
            "where": st.column_config.TextColumn("Where (quote)"),
        },
    )


def _discipline(
    client: Any,
    review: dict[str, Any],
    run: dict[str, Any] | None,
    critiques: dict[int, dict[str, Any]],
) -> None:
    """What the Critic received, and how the revision that made this version behaved: its
    answer to each point, the hunks put back, over-correction, best-of-N drafts (each shown
    only when the round records it)."""
    ctx = review.get("context") or {}
    number = int(ctx.get("round") or review["round"])
    row = (
        next((r for r in (run or {}).get("rounds") or [] if r.get("number") == number), None) or {}
    )
    merged = {k: row.get(k) or ctx.get(k) for k in reflection.ROUND_FIELDS}
    code = ctx.get("kind") == "code"
    reflection.knowledge_panel(client, critiques.get(number), merged.get("actor_knowledge"))
    reflection.responses_panel(merged)
    reflection.reverted_panel(merged, code=code)
    reflection.drafts_panel(merged, code=code)


def _usage(run: dict[str, Any] | None, number: int) -> None:
    row = next((r for r in (run or {}).get("rounds") or [] if r.get("number") == number), None)
    usage = (row or {}).get("usage") or {}
    lines = [
        {
            "role": role,
            "provider": u.get("provider") or "",
            "model": u.get("model") or "",
            "input tokens": u.get("input_tokens") or 0,
            "output tokens": u.get("output_tokens") or 0,
            "cost": u.get("cost_usd"),
            "latency ms": u.get("latency_ms"),
        }
        for role, u in usage.items()
        if isinstance(u, dict)
    ]
    if not lines:
        return
    with st.expander("Model usage for this round"):
        st.dataframe(
            lines,
            hide_index=True,
            width="stretch",
            key="usage",
            column_config={
                "cost": st.column_config.NumberColumn("Cost", format="$%.4f"),
                "latency ms": st.column_config.NumberColumn("Latency", format="%d ms"),
            },
        )


def _reflections(ctx: dict[str, Any]) -> None:
    st.subheader("Reflections")
    reflections = ctx.get("reflections") or []
    if not reflections:
        st.caption("None yet.")
    for r in reflections:
        source = SOURCE_LABEL.get(str(r.get("source")), str(r.get("source")))
        who = f" ({r['author']})" if r.get("author") and r.get("author") != r.get("source") else ""
        badge = ":blue-badge[binding]" if r.get("source") == "human" else ""
        st.markdown(f"**Round {md_literal(r.get('round'))}** · {md_literal(source + who)} {badge}")
        st.text(r.get("content") or "")


def _escalation(ctx: dict[str, Any]) -> None:
    st.subheader("Why it stopped")
    st.markdown(f"Stop reason: **{md_literal(ctx.get('stop_reason'))}**")
    if ctx.get("error_class") and ctx.get("error_class") != "none":
        st.markdown(f"Error class: **{md_literal(ctx['error_class'])}**")
    if ctx.get("detail"):
        st.text(ctx["detail"])
    rounds = ctx.get("rounds") or []
    if rounds:
        frame = [
            {
                "round": r.get("number"),
                "by": AUTHORS.get(str(r.get("provenance")), "Actor"),
                "verdict": (r.get("critique") or {}).get("verdict") or "",
                "tests": ""
                if not r.get("evaluation")
                else ("passed" if r["evaluation"].get("passed") else "failed"),
                "output": (r.get("output") or "").strip().split("\n", 1)[0][:80],
            }
            for r in rounds
        ]
        st.dataframe(frame, hide_index=True, width="stretch", key="esc-rounds")


# ---------------------------------------------------------------- decisions
def _next_after(review_id: str) -> str | None:
    """The item after this one in the queue (the first other one when it is the last)."""
    try:
        items = queue_items(get_client())
    except ApiError:
        return None
    return neighbour(items, review_id, 1) or neighbour(
        [i for i in items if str(i["id"]) != review_id], review_id, 1
    )


def _send(review: dict[str, Any], action: str, *, then_next: bool = False, **fields: Any) -> None:
    """Send the decision; then stay on the item (it follows the run), or open the queue's next
    item (``then_next``: the queue's order before this one left it)."""
    idem_key = f"idem-{review['id']}"
    following = _next_after(review["id"]) if then_next else None
    try:
        result = get_client().decide(
            review["id"], action=action, idempotency_key=st.session_state[idem_key], **fields
        )
    except ApiError as exc:
        st.session_state[idem_key] = new_idempotency_key()  # a corrected form is a new request
        st.error(f"Decision refused: {md_literal(friendly_detail(exc.detail))}")
        return
    st.session_state["last_decision"] = result
    mine = st.session_state.setdefault("my_decisions", [])
    if review["id"] not in mine:
        mine.append(review["id"])
    st.session_state.pop("reject-pending", None)
    st.session_state.pop("queue_items", None)
    quoting.drop(review["id"])
    if then_next:
        if following:
            st.toast(f"{decision_banner(result)} Opened the next item.")
            _go(following)
        st.toast(f"{decision_banner(result)} The queue has nothing else waiting.")
    st.rerun()


class Sent:
    """Which of a decision form's two send buttons was pressed (neither: nothing to send)."""

    def __init__(self, stay: bool, then_next: bool) -> None:
        self.then_next = then_next
        self.pressed = stay or then_next

    def __bool__(self) -> bool:
        return self.pressed


def _submit(label: str, *, kind: Any = "secondary") -> Sent:
    row = st.container(horizontal=True, key="decision-sends")
    with row:
        stay = st.form_submit_button(
            label,
            type=kind,
            key="decision-submit",
            shortcut=SHORTCUTS["send"],
            help=f"Sends the decision ({SHORTCUTS['send']}); the page then follows the run.",
        )
        then_next = st.form_submit_button(
            "and open next",
            key="decision-submit-next",
            shortcut=SHORTCUTS["send_next"],
            help=f"Sends the decision and opens the queue's next item ({SHORTCUTS['send_next']}).",
        )
    return Sent(stay, then_next)


def _comment_form(review: dict[str, Any]) -> None:
    # Enter in a quoted point's box is a newline's worth of intent, not a send (Ctrl+Enter)
    with st.form("decision-form-comment", enter_to_submit=False):
        quoted = quoting.quotes(review["id"])
        # with quoted points the box is smaller and unlabelled: Send stays in view at 1280x800
        text = st.text_area(
            "Points for the next revision, one per line",
            key="decision-comment",
            height=68 if quoted else 120,
            placeholder="More points, one per line"
            if quoted
            else "Mention the Moon.\nSay why there are two high tides a day.",
            label_visibility="collapsed" if quoted else "visible",
        )
        written = quoting.form_fields(review["id"])
        with st.expander("Keep as a lesson"):
            lesson = st.checkbox(
                "Also keep this as a lesson for similar future tasks", key="decision-lesson"
            )
            scope = st.text_input(
                "Lesson scope: 'global' or a tag runs opt into",
                value="global",
                key="decision-scope",
            )
        submitted = _submit("Send comment", kind="primary")
        dropped = bool(quoted) and st.form_submit_button(
            "Drop the quoted lines", key="decision-drop-quotes"
        )
    if mode.current(get_client()) == "demo":  # so the next round's shape is no surprise
        st.caption(mode.DEMO_POINTS)  # under the form: Send stays in view at 1280x800
    if dropped:
        quoting.drop(review["id"])
        st.rerun()
    if not submitted:
        return
    unsaid = [n for n, (_, said) in enumerate(written, start=1) if not said.strip()]
    if unsaid:
        st.error(
            "Say what should change where you quoted the output "
            f"(quote {', '.join(map(str, unsaid))}), or drop the quoted lines."
        )
        return
    quoted_points = [quoted_point(picked, said) for picked, said in written]
    points = comment_points(text) + quoted_points
    written_lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(written_lines) + len(written) > MAX_POINTS:
        st.error(
            f"A comment holds at most {MAX_POINTS} points; this one has "
            f"{len(written_lines) + len(written)}. Merge some, or send the rest next round."
        )
        return
    if long := [p for p in written_lines + quoted_points if len(p) > MAX_POINT_CHARS]:
        st.error(
            f"A point holds at most {MAX_POINT_CHARS} characters; shorten the one that starts "
            f"{md_literal(long[0][:40])}…"
        )
        return
    if not points:
        st.error("A comment needs at least one point: write one per line.")
        return
    _send(
        review,
        "comment",
        then_next=submitted.then_next,
        comment="\n".join(points) if quoted else text.strip(),
        points=points,
        lesson=lesson,
        lesson_scope=scope.strip() or "global",
    )


def _approve_form(review: dict[str, Any]) -> None:
    with st.form("decision-form-approve"):
        st.markdown("The current output becomes final and the run ends as succeeded.")
        submitted = _submit("Approve", kind="primary")
    if submitted:
        _send(review, "approve", then_next=submitted.then_next)


def _edit_form(review: dict[str, Any]) -> None:
    ctx = review.get("context") or {}
    with st.form("decision-form-edit"):
        output = st.text_area(
            "Your version of the output",
            value=ctx.get("output") or "",
            key="decision-output",
            height=320,
        )
        finish = st.checkbox(
            "Finish with it (otherwise the Critic checks it next)", key="decision-finish"
        )
        submitted = _submit("Save edit", kind="primary")
    if not submitted:
        return
    if not output.strip():
        st.error("An edit needs the edited output.")
        return
    _send(review, "edit", then_next=submitted.then_next, output=output, finish=finish)


def _reject_form(review: dict[str, Any]) -> None:
    pending = st.session_state.get("reject-pending")
    if pending and pending.get("review_id") == review["id"]:
        st.warning(
            "Reject this run? It stops as failed and cannot be resumed.\n\n"
            f"Your reason: {md_literal(pending['reason'])}"
        )
        yes, no = st.columns(2)
        if yes.button("Yes, reject", type="primary", key="decision-reject-confirm"):
            _send(review, "reject", then_next=pending["then_next"], comment=pending["reason"])
        if no.button("Cancel", key="decision-reject-cancel"):
            st.session_state.pop("reject-pending", None)
            st.session_state["reject-draft"] = pending["reason"]  # the form shows it again
            st.rerun()
        return
    with st.form("decision-form-reject"):
        reason = st.text_area(
            "Why reject? (required)",
            value=st.session_state.pop("reject-draft", ""),
            key="decision-reason",
            height=100,
        )
        submitted = _submit("Reject…")
    if not submitted:
        return
    if not reason.strip():
        st.error("A reject needs the reason: say why the run should stop.")
        return
    st.session_state["reject-pending"] = {
        "review_id": review["id"],
        "reason": reason.strip(),
        "then_next": submitted.then_next,
    }
    st.rerun()


def _retry_form(review: dict[str, Any]) -> None:
    with st.form("decision-form-retry"):
        rounds = st.number_input("More rounds", 1, 10, 1, key="decision-rounds")
        submitted = _submit("Retry", kind="primary")
    if submitted:
        _send(review, "retry", then_next=submitted.then_next, rounds=int(rounds))


def action_key(position: int) -> str:
    """The shortcut that chooses the decision shown at ``position`` (1-based)."""
    return f"Alt+{position}"


def _choose(action: str) -> None:
    st.session_state["decision-action"] = action


def _action_keys(actions: list[str]) -> None:
    """Alt+1 ... choose a decision: buttons the keyboard presses, kept out of sight (the radio
    below shows the choice; its caption names the keys)."""
    with st.container(key="decision-keys"):
        st.html("<style>.st-key-decision-keys { display: none; }</style>")
        for n, action in enumerate(actions, start=1):
            st.button(
                ACTION_LABEL[action],
                key=f"decision-key-{action}",
                shortcut=action_key(n),
                on_click=_choose,
                args=(action,),
            )


FORMS = {
    "comment": _comment_form,
    "approve": _approve_form,
    "edit": _edit_form,
    "reject": _reject_form,
    "retry": _retry_form,
}


def _decision_panel(review: dict[str, Any]) -> None:
    st.session_state.setdefault(f"idem-{review['id']}", new_idempotency_key())
    with st.container(border=True, key="decision-panel"):
        actions = ACTIONS.get(review["kind"], ACTIONS["pre_critique"])
        _action_keys(actions)
        keys = " · ".join(f"{action_key(n)} {a}" for n, a in enumerate(actions, start=1))
        action = st.radio(
            "Decision",
            actions,
            horizontal=True,
            key="decision-action",
            help=f"Keys: {keys}; {SHORTCUTS['send']} sends, {SHORTCUTS['send_next']} sends "
            "and opens the next item.",
        )
        st.caption(ACTION_HELP[action])
        FORMS[action](review)


def _decided(review: dict[str, Any]) -> None:
    decision = review.get("decision") or {}
    st.subheader("Decision")
    action = str(decision.get("action") or "?")
    who = decision.get("author") or "a reviewer"
    st.markdown(
        f"**{md_literal(ACTION_LABEL.get(action, action))}** by {md_literal(who)}, "
        f"{ago(decision.get('at'))}."
    )
    points = decision.get("points") or []
    if points:
        st.text("\n".join(f"{n}. {p}" for n, p in enumerate(points, start=1)))
    elif decision.get("comment"):
        st.text(decision["comment"])
    if decision.get("rounds"):
        st.markdown(f"More rounds given: {md_literal(decision['rounds'])}")
    if decision.get("critic_verdict"):
        agreed = "agreed" if decision.get("agreed_with_critic") else "did not agree"
        verdict = md_literal(decision["critic_verdict"])
        st.caption(f"The Critic's verdict was {verdict}; the reviewer {agreed}.")
    if decision.get("lesson_id"):
        st.caption("The comment was kept as a lesson.")


def _raw(review: dict[str, Any]) -> None:
    with st.expander("Raw"):
        decision = {
            k: v
            for k, v in (review.get("decision") or {}).items()
            if v is not None and k not in ("by", "idempotency_key")
        }
        st.json({"context": review.get("context") or {}, "decision": decision}, expanded=False)


# ---------------------------------------------------------------- what became of the points
def _outcome_cards(review: dict[str, Any], run: dict[str, Any] | None) -> bool:
    """Per point: the Actor's answer and the Critic's check, each linking to its round. True
    when every point is checked or the run has stopped (nothing more will come)."""
    decision = review.get("decision") or {}
    points = [str(p) for p in decision.get("points") or []]
    rounds = (run or {}).get("rounds") or []
    status = str((run or {}).get("status") or "")
    outcomes = point_outcomes(points, int(review["round"]), rounds)
    st.subheader("What became of your points")
    if run is not None:
        latest = max((int(r.get("number") or 0) for r in rounds), default=0)
        st.markdown(
            f"Run {md_literal(run['id'])}: **{md_literal(status.replace('_', ' '))}**, "
            f"round {latest}."
        )
    for n, outcome in enumerate(outcomes, start=1):
        with st.container(border=True, key=f"outcome-{n}"):
            st.markdown(f"**Point {n}**")
            st.text(outcome["point"])
            st.text(answer_words(outcome))
            st.text(check_words(outcome))
            shown = sorted({r for r in (outcome["answered_in"], outcome["checked_in"]) if r})
            for number in shown:
                st.page_link(
                    "views/runs.py",
                    label=f"Round {number} in the run's timeline",
                    query_params={"run": review["run_id"], "round": str(number)},
                )
    checked = all(o["satisfied"] is not None for o in outcomes)
    return checked or status in TERMINAL or run is None


@st.fragment(run_every=2)
def _follow(review: dict[str, Any]) -> None:
    """The run's progress after the comment, read again every 2 s until every point is
    checked or the run stops; then the whole page reruns once, without the timer."""
    try:
        run = get_client().get_run(review["run_id"])
    except ApiError as exc:
        st.warning(f"Could not read the run: {md_literal(friendly_detail(exc.detail))}")
        return
    if _outcome_cards(review, run):
        st.session_state[f"followed-{review['id']}"] = True
        st.rerun()


def _outcomes(review: dict[str, Any], run: dict[str, Any] | None) -> None:
    if not (review.get("decision") or {}).get("points"):
        return
    with st.container(key="point-outcomes"):
        if st.session_state.get(f"followed-{review['id']}") or _outcome_cards_done(review, run):
            _outcome_cards(review, run)
        else:
            _follow(review)


def _outcome_cards_done(review: dict[str, Any], run: dict[str, Any] | None) -> bool:
    points = [str(p) for p in (review.get("decision") or {}).get("points") or []]
    outcomes = point_outcomes(points, int(review["round"]), (run or {}).get("rounds") or [])
    status = str((run or {}).get("status") or "")
    return run is None or status in TERMINAL or all(o["satisfied"] is not None for o in outcomes)


def _go(review_id: str | None) -> None:
    if review_id:
        st.session_state["review_id"] = review_id
        st.query_params["review"] = review_id
        st.rerun()


def _queue_bar(client: Any, review_id: str) -> None:
    """Back to the queue, and the queue's previous and next item (with their shortcuts)."""
    # a row of buttons as wide as their labels and shortcuts, wrapping when they do not fit
    row = st.container(horizontal=True, horizontal_alignment="right", key="queue-bar")
    if row.button("Queue", key="go-queue", shortcut=SHORTCUTS["queue"]):
        st.switch_page("views/queue.py")
    try:
        items = queue_items(client)
    except ApiError:
        items = []
    before, after = neighbour(items, review_id, -1), neighbour(items, review_id, 1)
    if row.button(
        "Previous", key="go-previous", disabled=before is None, shortcut=SHORTCUTS["previous"]
    ):
        _go(before)
    if row.button("Next", key="go-next", disabled=after is None, shortcut=SHORTCUTS["next"]):
        _go(after)


# ---------------------------------------------------------------- the page
# Streamlit's 6rem above the title would push the Send button below a 800 px window
st.html("<style>[data-testid='stMainBlockContainer'] { padding-top: 2.5rem; }</style>")
st.title("Review")
if requested := st.query_params.get("review"):  # a link from the queue, or a shared URL
    st.session_state["review_id"] = requested
review_id = st.session_state.get("review_id")
if not review_id:
    st.info("Open an item in the queue to review it.")
    st.page_link("views/queue.py", label="Go to the queue")
    st.stop()
if st.query_params.get("review") != review_id:
    st.query_params["review"] = review_id  # the address bar is a link to this item
st.session_state["review-active-at"] = time.time()  # a full rerun: the reviewer did something

client = get_client()
try:
    review = client.get_review(review_id)
except ApiError as exc:
    st.error(
        f"Could not load review {md_literal(review_id)}: {md_literal(friendly_detail(exc.detail))}"
    )
    st.page_link("views/queue.py", label="Back to the queue")
    st.stop()
try:
    run: dict[str, Any] | None = client.get_run(review["run_id"])
except ApiError:
    run = None  # the review still shows; only usage and edit provenance are missing

ctx = review.get("context") or {}
holder = _holds(review)
# the buttons show their labels and shortcuts at 1280 px
head, nav = st.columns([5, 4], vertical_alignment="center")
head.markdown(
    f"**{md_literal(kind_words(review))}**"
    f" · status **{md_literal(review['status'])}** · round {md_literal(review['round'])}"
    f" · run {md_literal(review['run_id'])}"
    + (f"  \nWhy it waits: {md_literal(why_words(review))}." if review.get("reason") else "")
)
with nav:
    _queue_bar(client, review_id)

done = st.session_state.get("last_decision")
if done and done.get("review_id") == review_id:
    st.success(md_literal(decision_banner(done)))
if review["status"] == "resolved":
    _outcomes(review, run)

bar = st.columns([4, 1, 1.4])
if review["status"] == "pending":
    bar[0].info(
        "Nobody holds this item. Claim this item to decide it: the claim keeps other "
        f"reviewers off it meanwhile ({SHORTCUTS['claim']})."
    )
    if bar[1].button("Claim", key="review-claim", type="primary", shortcut=SHORTCUTS["claim"]):
        try:
            _remember_claim(client.claim(review_id))
        except ApiError as exc:
            st.error(f"Could not claim: {md_literal(friendly_detail(exc.detail))}")
        else:
            st.session_state.pop("queue_items", None)
            st.rerun()
elif review["status"] == "claimed" and holder:
    with bar[0]:
        lease(review_id, review.get("lease_expires_at"))
    if bar[1].button("Renew", key="renew", help="Hold it 5 more minutes"):
        try:
            _remember_claim(client.claim(review_id))
            st.rerun()
        except ApiError as exc:
            st.error(f"Could not renew: {md_literal(friendly_detail(exc.detail))}")
    if bar[2].button(
        "Release",
        key="release",
        help=f"Give it back to the queue ({SHORTCUTS['release']})",
        shortcut=SHORTCUTS["release"],
    ):
        try:
            client.release(review_id)
        except ApiError as exc:
            st.error(f"Could not release: {md_literal(friendly_detail(exc.detail))}")
        else:  # stay here: it is pending again
            st.session_state.pop("queue_items", None)
            st.rerun()
elif review["status"] == "claimed":
    until = time_left(review.get("lease_expires_at"))
    bar[0].info(
        f"{md_literal(claimer(review))} holds this item {until}: "
        "you can read it; only they can decide it until they decide or release it."
    )

# the task and the output left, the decision at the top right: both show at 1280x800
left, right = st.columns([3, 2], gap="medium")
critiques = {int(c.get("round") or 0): c for c in ctx.get("critiques") or []}
with left:
    st.subheader("Task")
    st.text(ctx.get("task") or review["task"])
    _output(review, run, pick=holder)
with right:
    if holder:
        _decision_panel(review)
    elif review["status"] in ("resolved", "expired") and review.get("decision"):
        _decided(review)
    _evaluation(ctx)
    _binding_checks(critiques.get(int(ctx.get("round") or review["round"])))
    _discipline(client, review, run, critiques)
    _usage(run, int(ctx.get("round") or review["round"]))
    _reflections(ctx)
    if review["kind"] == "escalation":
        _escalation(ctx)
_edit_beside(review, run)
_history(review, run)
_raw(review)

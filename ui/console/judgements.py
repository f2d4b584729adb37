"""Judge the Critic on the Review page: agree with or dismiss (saying why) each issue of the
critique the item shows. The words feed the human-vs-Critic agreement of ``/v1/stats`` and
the critique dataset; the item's holder (or whoever decided it, or an admin) may give them."""

from __future__ import annotations

from typing import Any

import streamlit as st

from console.client import ApiError, get_client
from console.view import md_literal
from console.views import login as session

VERDICTS = ("not judged", "agree", "dismiss")
MAX_REASON = 300


def judged_critique(review: dict[str, Any]) -> dict[str, Any] | None:
    """The critique the API judges for this item: its round's, else the previous round's."""
    ctx = review.get("context") or {}
    number = int(ctx.get("round") or review.get("round") or 0)
    by_round = {
        int(c.get("round") or 0): c for c in ctx.get("critiques") or [] if isinstance(c, dict)
    }
    return by_round.get(number) or by_round.get(number - 1)


def may_judge(review: dict[str, Any]) -> bool:
    me = session.my_id()
    user = st.session_state.get("user") or {}
    if user.get("role") == "admin":
        return True
    if review.get("status") == "claimed":
        holder = review.get("claimed_by")
        return bool(holder) and (holder == me or holder in st.session_state.get("my_claims", {}))
    decided = review.get("decision") or {}
    return review.get("status") == "resolved" and bool(me) and decided.get("by") == me


def _known(review: dict[str, Any]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for word in review.get("judgements") or []:
        if isinstance(word, dict) and isinstance(word.get("issue"), int):
            out[word["issue"]] = word
    return out


def _label(n: int, issue: dict[str, Any]) -> str:
    kind = " · ".join(
        md_literal(str(issue.get(f) or "")) for f in ("dimension", "error_type") if issue.get(f)
    )
    suggestion = md_literal(str(issue.get("suggestion") or "")[:200])
    return f"Issue {n + 1} · {kind}: {suggestion}" if kind else f"Issue {n + 1}: {suggestion}"


def controls(review: dict[str, Any]) -> None:
    """One agree / dismiss choice per Critic issue, sent together."""
    critique = judged_critique(review)
    issues = [i for i in (critique or {}).get("issues") or [] if isinstance(i, dict)]
    if not issues:
        return
    known = _known(review)
    mine = may_judge(review)
    number = (critique or {}).get("round")
    title = f"Judge the Critic: round {number}, {len(known)} of {len(issues)} issues judged"
    with st.expander(title, expanded=mine and not known):
        if not mine:
            for n, issue in enumerate(issues):
                word = known.get(n)
                said = f" — **{word['verdict']}**" if word else ""
                st.markdown(_label(n, issue) + said)
            st.caption("Claim the item to agree with or dismiss the Critic's issues.")
            return
        with st.form(key=f"judge-{review['id']}", border=False):
            chosen: list[tuple[int, str, str]] = []
            for n, issue in enumerate(issues):
                word = known.get(n) or {}
                st.markdown(_label(n, issue))
                verdict = st.radio(
                    f"Issue {n + 1}",
                    VERDICTS,
                    index=VERDICTS.index(word.get("verdict") or "not judged"),
                    horizontal=True,
                    key=f"judge-{review['id']}-{n}",
                    label_visibility="collapsed",
                )
                reason = st.text_input(
                    f"Why dismiss issue {n + 1}",
                    value=str(word.get("reason") or ""),
                    max_chars=MAX_REASON,
                    key=f"judge-{review['id']}-{n}-reason",
                    placeholder="Required to dismiss",
                )
                chosen.append((n, verdict, reason.strip()))
            sent = st.form_submit_button("Save judgements")
        if sent:
            _send(review["id"], chosen)


def _send(review_id: str, chosen: list[tuple[int, str, str]]) -> None:
    missing = [n + 1 for n, verdict, reason in chosen if verdict == "dismiss" and not reason]
    if missing:
        st.error(f"Say why you dismiss issue {', '.join(map(str, missing))}.")
        return
    words = [
        {"issue": n, "verdict": verdict, **({"reason": reason} if reason else {})}
        for n, verdict, reason in chosen
        if verdict != "not judged"
    ]
    if not words:
        st.warning("Choose agree or dismiss for at least one issue.")
        return
    try:
        saved = get_client().judge_critic(review_id, words)
    except ApiError as exc:
        st.error(f"Could not save: {md_literal(exc.detail)}")
        return
    st.success(f"Saved your word on {len(saved)} issue{'s' if len(saved) != 1 else ''}.")

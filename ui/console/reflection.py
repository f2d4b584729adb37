"""The Review page's reflection panels: how deep the Critic looked and what it received, the
reflection record of each issue, and the revision's discipline (the Actor's answer to each
point, hunks put back, over-correction, best-of-N drafts).

Fields a backend does not send yet are simply absent: each panel shows nothing then. Text from
models, reviewers and users goes to ``st.text``, tables, or through ``md_literal``.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from console.client import ApiError
from console.view import md_literal

DEPTH_WORDS = {
    "L1": "L1 consistency",
    "L2": "L2 evidence",
    "L3": "L3 counterfactual",
    "auto": "auto",
}
ACTION_BADGE = {"applied": ":green-badge[applied]", "declined": ":orange-badge[declined]"}


def words(value: Any) -> str:
    """A field that may be text, a number or a small object, as one line of text."""
    if value is None:
        return ""
    if isinstance(value, dict):
        for name in ("quote", "original_text", "point", "suggestion", "text", "title"):
            if value.get(name):
                return str(value[name])
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(words(v) for v in value)
    return str(value)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def depth_line(critique: dict[str, Any]) -> str:
    """``Profile legal (risk high) · depth asked auto, done L2 evidence``, or "" when the
    critique carries none of these."""
    parts: list[str] = []
    if critique.get("profile"):
        profile = f"Profile **{md_literal(critique['profile'])}**"
        if critique.get("risk"):
            profile += f" (risk {md_literal(critique['risk'])})"
        parts.append(profile)
    asked, done = critique.get("requested_depth"), critique.get("depth")
    if asked or done:
        asked_words = md_literal(DEPTH_WORDS.get(str(asked), str(asked))) if asked else "—"
        done_words = md_literal(DEPTH_WORDS.get(str(done), str(done))) if done else "—"
        parts.append(f"depth asked **{asked_words}**, done **{done_words}**")
    if isinstance(critique.get("rounds"), int) and critique["rounds"] > 1:
        parts.append(f"{critique['rounds']} model rounds")
    return " · ".join(parts)


def depth_panel(critique: dict[str, Any] | None) -> None:
    """Profile, risk, the depth asked and the depth done; a degraded critique as a warning
    with its reason."""
    if not critique:
        return
    line = depth_line(critique)
    if line:
        st.markdown(line)
    if critique.get("degraded"):
        reason = critique.get("degraded_reason") or "no reason recorded"
        st.warning(
            "Degraded critique: the depth asked for timed out or failed, so this is an L1 "
            f"consistency check only. Reason: {md_literal(reason)}"
        )


def issue_record(issue: dict[str, Any]) -> None:
    """An issue's reflection record under its quote: the error type, the suggested
    replacement for the span, and what the finding rests on."""
    if issue.get("corrected_text"):
        st.text(f"Corrected text: {issue['corrected_text']}")
    facts = []
    if issue.get("error_type"):
        facts.append(f"error type {md_literal(issue['error_type'])}")
    if issue.get("evidence_source"):
        facts.append(f"evidence {md_literal(issue['evidence_source'])}")
    if facts:
        st.caption(" · ".join(facts))


def no_error_panel(critique: dict[str, Any] | None) -> None:
    """A critique with no issue: ``no_error_found`` and the Critic's justification."""
    if not critique or _dicts(critique.get("issues")) or not critique.get("no_error_found"):
        return
    st.markdown("**No error found.** The Critic's justification:")
    st.text(critique.get("justification") or "(none given)")


def knowledge_titles(client: Any, ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each id's entry from the knowledge API (None when it cannot be read)."""
    found: dict[str, dict[str, Any] | None] = {}
    for entry_id in ids:
        try:
            found[entry_id] = client.get_knowledge(entry_id)
        except ApiError:
            found[entry_id] = None
    return found


def knowledge_panel(client: Any, critique: dict[str, Any] | None, actor_ids: Any = None) -> None:
    """The knowledge entries the Critic's call (and the Actor's, when recorded) received, by
    title, each a link to it on the Knowledge page."""
    critic_ids = [str(i) for i in (critique or {}).get("knowledge_used") or []]
    actor = [str(i) for i in actor_ids or []] if isinstance(actor_ids, list) else []
    if not critic_ids and not actor:
        return
    st.subheader("Knowledge received")
    entries = knowledge_titles(client, list(dict.fromkeys(critic_ids + actor)))
    for who, ids in (("The Critic", critic_ids), ("The Actor", actor)):
        if not ids:
            continue
        st.caption(f"{who} received {len(ids)} entr{'ies' if len(ids) != 1 else 'y'}:")
        for entry_id in ids:
            entry = entries.get(entry_id)
            if entry is None:
                st.caption(f"{md_literal(entry_id)} (no longer readable)")
                continue
            label = md_literal(entry.get("title") or entry_id)
            if entry.get("retired"):
                label += " (retired since)"
            st.page_link(
                "views/knowledge.py",
                label=label,
                query_params={"entry": entry_id},
                help=f"{entry.get('kind', '')} · {entry_id}",
            )


def responses_panel(row: dict[str, Any]) -> None:
    """The Actor's answer to each point of the critique it revised after."""
    answers = _dicts(row.get("responses"))
    if not answers:
        return
    st.subheader("The Actor's answers")
    st.caption("How the revision that made this version answered each point it was given.")
    applied = sum(1 for a in answers if a.get("action") == "applied")
    st.markdown(
        f"{applied} applied, {len(answers) - applied} declined "
        f"(of {len(answers)} point{'s' if len(answers) != 1 else ''})"
    )
    st.dataframe(
        [
            {
                "point": words(a.get("issue") if a.get("issue") is not None else a.get("point")),
                "action": str(a.get("action") or ""),
                "reason": str(a.get("reason") or ""),
                "where": str(a.get("where") or ""),
            }
            for a in answers
        ],
        hide_index=True,
        width="stretch",
        key="actor-responses",
        column_config={
            "point": st.column_config.TextColumn("Point"),
            "action": st.column_config.TextColumn("Action", width="small"),
            "reason": st.column_config.TextColumn("Reason"),
            "where": st.column_config.TextColumn("Where"),
        },
    )


def reverted_panel(row: dict[str, Any], *, code: bool) -> None:
    """Hunks of the revision the diff lock put back, and an over-correction."""
    hunks = _dicts(row.get("reverted_hunks"))
    over = row.get("over_correction")
    if not hunks and not over:
        return
    st.subheader("Changes put back")
    if over:
        detail = "" if over is True else f" {md_literal(words(over))}"
        st.warning(
            "Over-correction: a revision made a passing version worse (or reopened a closed "
            f"issue) twice; the better version was kept.{detail}"
        )
    if not hunks:
        return
    undone_count = sum(1 for h in hunks if h.get("overridden"))
    reverted = len(hunks) - undone_count
    summary = (
        f"{reverted} change{'s' if reverted != 1 else ''} outside what the critique asked "
        "for (or inside a locked region) reverted"
    )
    if undone_count:
        plural = "s" if undone_count != 1 else ""
        summary += f"; {undone_count} revert{plural} undone because the locked version broke"
    st.caption(summary + ":")
    for n, hunk in enumerate(hunks, start=1):
        undone = hunk.get("overridden")
        with st.container(border=True, key=f"reverted-{n}"):
            st.markdown(f"**{n}.** {md_literal(hunk.get('reason') or 'no reason recorded')}")
            if hunk.get("rule"):
                st.caption(md_literal(hunk["rule"]))
            if undone:
                why = words(undone.get("detail") if isinstance(undone, dict) else undone)
                st.info(f"Revert undone, the revision's change went on: {md_literal(why)}")
            before, after = st.columns(2)
            with before:
                st.caption("Before" if undone else "Kept (before)")
                _snippet(hunk.get("before"), code=code)
            with after:
                st.caption("The revision's (restored)" if undone else "The revision's (reverted)")
                _snippet(hunk.get("after"), code=code)


def _snippet(text: Any, *, code: bool) -> None:
    value = "" if text is None else str(text)
    if not value:
        st.caption("(nothing)")
    elif code:
        st.code(value, language=None)
    else:
        st.text(value)


def _cost(draft: dict[str, Any]) -> float | None:
    for value in (draft.get("cost_usd"), (draft.get("usage") or {}).get("cost_usd")):
        if isinstance(value, int | float):
            return float(value)
    return None


def _tests(draft: dict[str, Any]) -> str:
    evaluation = draft.get("evaluation")
    if isinstance(evaluation, dict) and evaluation.get("passed") is not None:
        return "passed" if evaluation["passed"] else "failed"
    if isinstance(draft.get("passed"), bool):
        return "passed" if draft["passed"] else "failed"
    return ""


def drafts_panel(row: dict[str, Any], *, code: bool) -> None:
    """Best of N: every draft with its score and cost, the one kept marked."""
    drafts = _dicts(row.get("drafts"))
    if not drafts:
        return
    st.subheader(f"Drafts (best of {len(drafts)})")
    chosen_index = next(
        (n for n, d in enumerate(drafts) if d.get("chosen") or d.get("kept") or d.get("best")),
        None,
    )
    table = []
    for n, d in enumerate(drafts):
        critique = d.get("critique") if isinstance(d.get("critique"), dict) else {}
        output = str(d.get("output") or "")
        table.append(
            {
                "draft": n + 1,
                "kept": n == chosen_index,
                "temperature": d.get("temperature"),
                "tests": _tests(d),
                "verdict": str(d.get("verdict") or (critique or {}).get("verdict") or ""),
                "cost": _cost(d),
                "begins": output.strip().split("\n", 1)[0][:80],
            }
        )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        key="drafts",
        column_config={
            "draft": st.column_config.NumberColumn("Draft", width="small"),
            "kept": st.column_config.CheckboxColumn("Kept", width="small"),
            "temperature": st.column_config.NumberColumn("Temperature", format="%.2f"),
            "tests": st.column_config.TextColumn("Tests", width="small"),
            "verdict": st.column_config.TextColumn("Verdict", width="small"),
            "cost": st.column_config.NumberColumn("Cost", format="$%.4f"),
            "begins": st.column_config.TextColumn("Begins with"),
        },
    )
    if chosen_index is not None:
        st.caption(f"Draft {table[chosen_index]['draft']} was kept.")
    with st.expander("Every draft in full"):
        for n, d in enumerate(drafts):
            mark = " (kept)" if n == chosen_index else ""
            st.markdown(f"**Draft {table[n]['draft']}**{mark}")
            _snippet(d.get("output"), code=code)


ROUND_FIELDS = (
    "responses",
    "reverted_hunks",
    "over_correction",
    "drafts",
    "actor_knowledge",
)
"""A round's fields these panels read (from the run's round, or the review's context)."""

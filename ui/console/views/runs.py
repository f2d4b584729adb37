"""Runs, searched and filtered by status; the run picked in the table, round by round.

A row is picked in the table (or named by ``?run=<id>``, which the Escalations page links);
its timeline shows each round in order: the output as it ships (code as code), the
evaluation and the critique's issues as tables, the reflections written on that round, the
person's decision on it, and what its model calls cost and took.
"""

from typing import Any

import streamlit as st

from console import events, evidence
from console.client import ApiError, get_client
from console.view import (
    answer_words,
    check_words,
    marked_output,
    md_literal,
    parse_time,
    round_points,
    short_id,
)
from shared.orchestration import RunStatus

STATUSES = ["", *(s.value for s in RunStatus)]
ACTION_WORDS = {
    "comment": "commented",
    "approve": "approved",
    "edit": "edited the output",
    "reject": "rejected the run",
    "retry": "gave the run more rounds",
}

COLUMNS = {  # about 750 px: all seven fit the main column at 1280 px
    "run": st.column_config.TextColumn("Run", width=100, help="Short id; the full one is below."),
    "status": st.column_config.TextColumn("Status", width=110),
    "kind": st.column_config.TextColumn("Kind", width=45),
    "task": st.column_config.TextColumn("Task", width=200),
    "rounds": st.column_config.NumberColumn("Rounds", width=55),
    "stop_reason": st.column_config.TextColumn("Stop reason", width=110),
    "updated": st.column_config.DatetimeColumn("Updated", width=100, format="distance"),
}


def _money(value: Any) -> str:
    return "unpriced" if value is None else f"${float(value):.4f}"


def _usage_rows(usage: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for role in ("actor", "critic"):
        call = usage.get(role)
        if not call:
            continue
        rows.append(
            {
                "role": role,
                "model": f"{call.get('provider') or '?'} / {call.get('model') or '?'}",
                "input tokens": call.get("input_tokens") or 0,
                "output tokens": call.get("output_tokens") or 0,
                "cost": _money(call.get("cost_usd")),
                "latency": f"{float(call.get('latency_ms') or 0) / 1000:.2f} s",
            }
        )
    return rows


def _round_title(rnd: dict[str, Any], decisions: list[dict[str, Any]]) -> str:
    bits = [f"Round {rnd['number']}"]
    if rnd.get("provenance") == "human":
        bits.append("edited by a person")
    elif rnd.get("provenance") == "given":
        bits.append("given by the run's creator")
    critique = rnd.get("critique") or {}
    if critique.get("verdict"):
        conf = critique.get("confidence")
        bits.append(
            f"critic: {md_literal(critique['verdict'])}"
            + (f" ({float(conf):.2f})" if isinstance(conf, int | float) else "")
        )
    evaluation = rnd.get("evaluation")
    if evaluation:
        bits.append("evaluation passed" if evaluation.get("passed") else "evaluation failed")
    for d in decisions:
        who = md_literal(d.get("author") or "a person")
        bits.append(f"{who} {ACTION_WORDS.get(str(d.get('action')), '?')}")
    return " · ".join(bits)


def _evaluation(evaluation: dict[str, Any], key: str) -> None:
    st.markdown("**Evaluation**: " + ("passed" if evaluation.get("passed") else "failed"))
    if evaluation.get("summary"):
        st.text(str(evaluation["summary"]))
    tests = evaluation.get("tests") or []
    if tests:
        st.dataframe(
            [
                {
                    "test": t.get("name") or "?",
                    "status": t.get("status") or "?",
                    "message": t.get("message") or "",
                }
                for t in tests
                if isinstance(t, dict)
            ],
            hide_index=True,
            key=key,
            column_config={
                "test": st.column_config.TextColumn("Test", width="medium"),
                "status": st.column_config.TextColumn("Status", width="small"),
                "message": st.column_config.TextColumn("Message", width="large"),
            },
        )


def _critique(critique: dict[str, Any], key: str) -> None:
    conf = critique.get("confidence")
    head = f"**Critique**: {md_literal(critique.get('verdict') or '?')}"
    if isinstance(conf, int | float):
        head += f", confidence {float(conf):.2f}"
    if critique.get("error_class") and critique["error_class"] != "none":
        head += f", error class {md_literal(critique['error_class'])}"
    st.markdown(head)
    issues = [i for i in critique.get("issues") or [] if isinstance(i, dict)]
    if issues:
        st.dataframe(
            [
                {
                    "severity": i.get("severity") or "",
                    "dimension": i.get("dimension") or "",
                    "quote": i.get("quote") or "",
                    "suggestion": i.get("suggestion") or "",
                }
                for i in issues
            ],
            hide_index=True,
            key=key,
            column_config={
                "severity": st.column_config.TextColumn("Severity", width="small"),
                "dimension": st.column_config.TextColumn("Dimension", width="small"),
                "quote": st.column_config.TextColumn("Quote", width="medium"),
                "suggestion": st.column_config.TextColumn("Suggestion", width="large"),
            },
        )
    else:
        st.caption("No issues.")


def _decision_line(d: dict[str, Any]) -> str:
    who = md_literal(d.get("author") or "a person")
    action = str(d.get("action"))
    line = f"**Human decision**: {who} {ACTION_WORDS.get(action) or md_literal(action)}"
    if d.get("rounds"):
        line += f" ({md_literal(d['rounds'])} more)"
    return line


def _decisions(client, run_id: str) -> dict[int, list[dict[str, Any]]]:
    """The decisions people made on this run's review items, by round (one read per item)."""
    out: dict[int, list[dict[str, Any]]] = {}
    try:
        items = client.list_reviews(run_id=run_id, limit=50)["items"]
        for item in items:
            if item.get("status") != "resolved":
                continue
            decision = client.get_review(item["id"]).get("decision")
            if decision:
                out.setdefault(int(item["round"]), []).append(decision)
    except ApiError as exc:
        st.caption(f"Could not read the decisions on this run: {md_literal(exc.detail)}")
    return out


EVENTS_PAGE = 500
EVENT_PAGES = 10  # a run's first 5000 events; far more than a run of many rounds writes
EVENT_COLUMNS = {
    "when": st.column_config.DatetimeColumn("When", width=90, format="HH:mm:ss"),
    "event": st.column_config.TextColumn("Event", width=300),
    "detail": st.column_config.TextColumn("Detail", width=340),
}


def _run_events(client, run_id: str) -> list[dict[str, Any]] | ApiError:
    """The run's events, oldest first, or why they could not be read."""
    found: list[dict[str, Any]] = []
    since = 0
    try:
        for _ in range(EVENT_PAGES):
            page = client.events(since=since, limit=EVENTS_PAGE, run_id=run_id)
            found.extend(page)
            if len(page) < EVENTS_PAGE:
                break
            since = int(page[-1]["seq"])
    except ApiError as exc:
        return exc
    return found


def _events(found: list[dict[str, Any]] | ApiError) -> None:
    """Every event of the run in words: peer retries (``critic 504, retry 2/3 in 4 s``),
    statuses, outputs, evaluations, critiques, review items."""
    if isinstance(found, ApiError):
        st.caption(f"Could not read this run's events: {md_literal(found.detail)}")
        return
    if not found:
        return
    retried = events.retries(found)
    label = f"Events ({len(found)}" + (
        f", {retried} peer {'retry' if retried == 1 else 'retries'})" if retried else ")"
    )
    with st.expander(label):
        rows = []
        for event in found:
            what, detail = events.event_words(event)
            rows.append(
                {"when": parse_time(event.get("created_at")), "event": what, "detail": detail}
            )
        st.dataframe(
            rows,
            column_config=EVENT_COLUMNS,
            column_order=list(EVENT_COLUMNS),
            hide_index=True,
            key="run-events",
        )


def _points(rnd: dict[str, Any]) -> None:
    """The reviewer's points this round answered: the Actor's answer, the Critic's check."""
    outcomes = round_points(rnd)
    if not outcomes:
        return
    st.markdown("**Reviewer points**")
    for n, outcome in enumerate(outcomes, start=1):
        with st.container(border=True, key=f"run-point-{rnd['number']}-{n}"):
            st.text(f"{n}. {outcome['point']}")
            st.text(answer_words(outcome))
            st.text(check_words(outcome))


def timeline(client, run: dict[str, Any], focus: int | None = None) -> None:
    code = run.get("kind") == "code"
    facts = [f"**{md_literal(run['status'])}**"]
    if run.get("stop_reason"):
        facts.append(f"stopped: {md_literal(run['stop_reason'])}")
    if run.get("shipped_by"):
        facts.append(f"shipped by: {md_literal(run['shipped_by'])}")
    if run.get("error_class") and run["error_class"] != "none":
        facts.append(f"error class {md_literal(run['error_class'])}")
    facts.append(f"tokens {run.get('input_tokens') or 0} in / {run.get('output_tokens') or 0} out")
    facts.append(f"cost {_money(run.get('cost_usd'))}")
    found = _run_events(client, run["id"])
    retried = 0 if isinstance(found, ApiError) else events.retries(found)
    if retried:
        facts.append(f"{retried} peer {'retry' if retried == 1 else 'retries'}")
    st.subheader("Timeline")
    st.code(run["id"], language=None)
    st.markdown(" · ".join(facts))
    if run.get("detail"):
        st.text(str(run["detail"]))
    st.text(run["task"])
    _events(found)
    reflections: dict[int, list[dict[str, Any]]] = {}
    for r in run.get("reflections") or []:
        reflections.setdefault(int(r.get("round") or 0), []).append(r)
    decisions = _decisions(client, run["id"])
    rounds = run.get("rounds") or []
    if not rounds:
        st.caption("No round yet: the Actor has not answered.")
    for i, rnd in enumerate(rounds):
        number = int(rnd["number"])
        said = decisions.get(number, [])
        wanted = number == focus if focus is not None else i == len(rounds) - 1
        with st.expander(_round_title(rnd, said), expanded=wanted):
            if rnd.get("provenance") == "human":
                edit = rnd.get("review") or {}
                by = md_literal(edit.get("edited_by") or "a reviewer")
                st.markdown(
                    f"**Edited by {by}** (from round {md_literal(edit.get('from_round', '?'))})"
                )
            elif rnd.get("provenance") == "given":
                st.markdown("**Given by the run's creator**: no model drafted it")
            research, citations = evidence.round_research(rnd)
            cite = evidence.citation_linker(
                number, research, citations, output=str(rnd.get("output") or "")
            )
            st.html(marked_output(str(rnd.get("output") or ""), [], code=code, decorate=cite))
            evidence.panel(number, research, citations)
            if rnd.get("evaluation"):
                _evaluation(rnd["evaluation"], key=f"run-eval-{number}")
            if rnd.get("critique"):
                _critique(rnd["critique"], key=f"run-issues-{number}")
            _points(rnd)
            for r in reflections.get(number, []):
                who = "human" if r.get("source") == "human" else str(r.get("source"))
                st.markdown(
                    f"**Reflection** ({md_literal(who)}, {md_literal(r.get('author') or '?')}):"
                )
                st.text(str(r.get("content") or ""))
            for d in said:
                st.markdown(_decision_line(d))
                if d.get("comment"):
                    st.text(str(d["comment"]))
            usage = _usage_rows(rnd.get("usage") or {})
            if usage:
                st.dataframe(usage, hide_index=True, key=f"run-usage-{number}")
    if run.get("final_output") is not None:
        st.subheader("Final output")
        st.html(marked_output(run["final_output"], [], code=code))


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
    st.error(f"Could not list runs: {md_literal(exc.detail)}")
    st.stop()
if not runs:
    wanted = [f"“{md_literal(query)}”" if query else "", f"status {status}" if status else ""]
    match = " with ".join(w for w in wanted if w)
    st.info(f"No runs match {match}." if match else "No runs.")
    st.stop()

picked = st.dataframe(
    [
        {
            "run": short_id(r["id"]),
            "status": r["status"],
            "kind": r["kind"],
            "task": (r["task"] or "").split("\n", 1)[0],
            "rounds": r["rounds"],
            "stop_reason": r.get("stop_reason") or "",
            "updated": parse_time(r.get("updated_at")),
        }
        for r in runs
    ],
    column_config=COLUMNS,
    column_order=list(COLUMNS),
    hide_index=True,
    key="runs-table",
    on_select="rerun",
    selection_mode="single-row",
)
rows = [i for i in picked.selection.rows if i < len(runs)]
run_id = runs[rows[0]]["id"] if rows else st.query_params.get("run")
if not run_id:
    st.caption("Select a run in the table to see its timeline.")
    st.stop()
try:
    run = client.get_run(run_id)
except ApiError as exc:
    st.error(f"Could not load run {md_literal(run_id)}: {md_literal(exc.detail)}")
    st.stop()
focus = st.query_params.get("round")  # the Review page links a round
timeline(client, run, int(focus) if focus and focus.isdigit() and not rows else None)

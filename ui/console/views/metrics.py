"""How runs end, how long they take, and what the models cost (GET /v1/stats, charted); beside
them the latest evaluation of the loop `crosscheck eval` published (GET
/v1/evaluations/latest), and the history of the Critic's intercept rate (GET
/v1/evaluations?dataset=intercept)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from console import evaluation as ev
from console.client import ApiError, get_client
from console.view import md_literal
from shared.evaluations import INTERCEPT_TARGET

PERIODS = {
    "all": ("All time", None),
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}


def column_chart(rows: list[dict], x: str, y: str, x_title: str, y_title: str) -> None:
    """Vertical bars in the order given, the category labels written horizontally."""
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:N", sort=None, title=x_title, axis=alt.Axis(labelAngle=0)),
            y=alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(tickMinStep=1)),
            tooltip=[x, y],
        )
        .properties(height=220)
    )
    st.altair_chart(chart)


def provider_chart(rows: list[dict], values: list[str], title: str, fmt: str) -> None:
    """Horizontal bars, one group per provider (role), so long labels read across; every
    value is written at its bar's end, which keeps tiny costs visible."""
    fold: list[Any] = list(values)
    base = alt.Chart(pd.DataFrame(rows)).transform_fold(fold, as_=["measure", "value"])
    encoding: dict[str, Any] = {
        "y": alt.Y("provider:N", sort=None, title=None, axis=alt.Axis(labelLimit=220)),
        "x": alt.X("value:Q", title=title, axis=alt.Axis(format=fmt)),
    }
    if len(values) > 1:
        encoding["yOffset"] = alt.YOffset("measure:N")
    bars = base.mark_bar().encode(
        **encoding,
        color=alt.Color("measure:N", title=None) if len(values) > 1 else alt.value("#4c78a8"),
    )
    labels = base.mark_text(align="left", dx=3).encode(
        **encoding, text=alt.Text("value:Q", format=fmt)
    )
    st.altair_chart((bars + labels).properties(height=max(120, 24 * len(rows) * len(values))))


def _bars(counts: dict[str, int], x: str, y: str = "runs") -> None:
    rows = [{x: name, y: count} for name, count in sorted(counts.items(), key=lambda p: -p[1])]
    column_chart(rows, x, y, x.capitalize(), y.capitalize())


TRIGGER_TARGET = 0.95  # seed 000: at least 95% of versions critiqued
ADOPTION_BAND = (0.15, 0.70)  # seed 000: below, the critic is ignored; above, drafts are poor


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def reflection_health(stats: dict) -> None:
    """Whether reflection works (seed 000): trigger rate against its target, adoption against
    its band (an alert outside it), the degraded-critique rate, and critiques by depth."""
    st.subheader("Reflection health")
    trigger = stats.get("trigger_rate")
    judged = int(stats.get("versions_judged", stats.get("versions_critiqued", 0)))
    rate = stats.get("adoption_rate")
    degraded = stats.get("degraded_rate")
    low, high = ADOPTION_BAND
    in_band = stats.get("adoption_in_band")
    if in_band is None and rate is not None:
        in_band = low <= rate <= high
    cells = st.columns(4)
    cells[0].metric(
        "Trigger rate",
        _share(trigger),
        delta=None if trigger is None else f"target {TRIGGER_TARGET:.0%}",
        delta_color="green" if trigger is None or trigger >= TRIGGER_TARGET else "red",
        delta_arrow="off",
        help="Share of the versions that settled (revised, or shipped by a succeeded run) "
        "that the Critic critiqued or a person decided on first "
        f"({judged} of {stats.get('versions', 0)}; the Critic "
        f"{stats.get('versions_critiqued', 0)}).",
    )
    cells[1].metric(
        "Adoption rate",
        _share(rate),
        delta=None if rate is None else f"band {low:.0%}–{high:.0%}",
        delta_color="green" if in_band or in_band is None else "red",
        delta_arrow="off",
        help="Share of the critic's issues the critique of the next revision did not raise "
        f"again (same span or dimension), over {stats['adoption_rounds']} revision(s).",
    )
    cells[2].metric(
        "Degraded critiques",
        _share(degraded),
        help="Critiques whose depth timed out or failed and fell back to L1 "
        f"({stats.get('critiques_degraded', 0)} of {stats.get('critiques', 0)}).",
    )
    cells[3].metric("Critiques", stats.get("critiques", 0))
    if trigger is not None and trigger < TRIGGER_TARGET:
        missed = int(stats.get("versions", 0)) - judged
        st.error(
            f"Trigger rate {trigger:.0%} is below the {TRIGGER_TARGET:.0%} target: "
            f"{missed} version{'s were' if missed != 1 else ' was'} revised or shipped "
            "without a critique or a person's decision."
        )
    if rate is not None and not in_band:
        why = (
            "the revisions ignore the Critic, or it is too timid"
            if rate < low
            else "the drafts are poor, or the Critic is too aggressive"
        )
        st.error(f"Adoption {rate:.0%} is outside the healthy {low:.0%}–{high:.0%} band: {why}.")
    by_depth = stats.get("critiques_by_depth") or {}
    if by_depth:
        column_chart(
            [{"depth": depth, "critiques": n} for depth, n in sorted(by_depth.items())],
            "depth",
            "critiques",
            "Depth",
            "Critiques",
        )


def live_metrics() -> None:
    """Runs, reflection health and model calls over the chosen period."""
    period = st.selectbox(
        "Period", list(PERIODS), format_func=lambda k: PERIODS[k][0], key="metrics-period"
    )
    span = PERIODS[period][1]
    since = datetime.now(UTC) - span if span is not None else None
    try:
        stats = get_client().stats(since=since)
    except ApiError as exc:
        st.error(f"Could not load the metrics: {md_literal(exc.detail)}")
        return

    if not stats["runs_total"] and not stats["providers"]:
        st.info(
            "No runs in this period yet: metrics appear once runs are created."
            if since is None
            else "No runs in this period. Pick a longer one."
        )
        return

    providers = stats["providers"]
    finished = sum(bucket["runs"] for bucket in stats["rounds_per_run"])
    cost = sum(p["cost_usd"] or 0.0 for p in providers)
    top = st.columns(3)
    top[0].metric("Runs", stats["runs_total"])
    top[1].metric("Finished", finished)
    top[2].metric("Model cost", f"${cost:.4f}")
    reflection_health(stats)

    left, right = st.columns(2)
    with left:
        st.subheader("Runs by status")
        _bars(stats["runs_by_status"], "status")
    with right:
        st.subheader("Finished runs by stop reason")
        if stats["runs_by_stop_reason"]:
            _bars(stats["runs_by_stop_reason"], "stop reason")
        else:
            st.caption("No run has finished yet.")

    st.subheader("Rounds per finished run")
    if stats["rounds_per_run"]:
        column_chart(
            [{"rounds": str(b["rounds"]), "runs": b["runs"]} for b in stats["rounds_per_run"]],
            "rounds",
            "runs",
            "Rounds",
            "Runs",
        )
    else:
        st.caption("No run has finished yet.")

    st.subheader("A person and the Critic")
    agreement = stats.get("critic_agreement") or []
    if agreement:
        st.caption(
            "How often a reviewer's decision agreed with the Critic's verdict on the same "
            "version. Overruled: a comment, edit, reject or retry on what the Critic passed, "
            "or an approval of what it wanted revised."
        )
        st.dataframe(
            [
                {
                    "critic provider": a["provider"],
                    "profile": a["profile"],
                    "decisions": a["decisions"],
                    "agreed": a["agreed"],
                    "overruled": a["overruled"],
                    "agreement": f"{a['rate']:.0%}",
                }
                for a in agreement
            ],
            hide_index=True,
        )
    else:
        st.caption("No reviewer has decided on a version the Critic had judged yet.")

    st.subheader("Model calls by provider")
    if not providers:
        st.caption("No model calls yet.")
        return
    if stats.get("model_calls_truncated"):
        st.caption(f"Based on the newest {stats['model_calls']} model calls only.")
    labels = [f"{p['provider']} ({p['role']})" for p in providers]
    st.dataframe(
        [
            {
                "provider": p["provider"],
                "role": p["role"],
                "models": ", ".join(p["models"]),
                "calls": p["calls"],
                "avg ms": round(p["latency_ms_avg"], 1),
                "p50 ms": round(p["latency_ms_p50"], 1),
                "p95 ms": round(p["latency_ms_p95"], 1),
                "input tokens": p["input_tokens"],
                "output tokens": p["output_tokens"],
                "cost usd": round(p["cost_usd"], 6),
                "unpriced calls": p["unpriced_calls"],
            }
            for p in providers
        ],
        hide_index=True,
    )
    left, right = st.columns(2)
    with left:
        st.subheader("Latency (ms)")
        provider_chart(
            [
                {"provider": label, "p50": p["latency_ms_p50"], "p95": p["latency_ms_p95"]}
                for label, p in zip(labels, providers, strict=True)
            ],
            ["p50", "p95"],
            "Milliseconds",
            ",.0f",
        )
    with right:
        st.subheader("Cost (USD)")
        calls = sum(p["calls"] for p in providers)
        unpriced = sum(p["unpriced_calls"] for p in providers)
        if calls and unpriced >= calls:
            st.caption(
                "No priced calls: every model used here has no price entry, so its cost is unknown."
            )
        else:
            provider_chart(
                [
                    {"provider": label, "cost": float(p["cost_usd"] or 0.0)}
                    for label, p in zip(labels, providers, strict=True)
                ],
                ["cost"],
                "USD",
                "$.3~g",
            )
            if unpriced:
                st.caption(f"{unpriced} of {calls} calls have no price and count as $0.")


def latest_evaluation() -> None:
    """The evaluation that finished last: what was evaluated, self and cross against single,
    and a row per mode; or how to make one."""
    try:
        found = get_client().latest_evaluation()
    except ApiError as exc:
        st.warning(f"Could not load the latest evaluation: {md_literal(exc.detail)}")
        return
    if not isinstance(found, dict) or not ev.by_mode(found):
        st.info(
            "No evaluation has been published yet. Run "
            f"`{ev.MAKE_ONE}` (or `crosscheck eval humaneval`) against this orchestrator: "
            "its summary appears here when it ends."
        )
        return
    st.subheader("Latest evaluation")
    st.markdown(" · ".join(f"{name} **{md_literal(value)}**" for name, value in ev.facts(found)))
    compared = ev.deltas(found)
    if compared:
        st.caption("Against single (one Actor call, no Critic):")
        for delta_row in compared.values():
            cells = st.columns(len(delta_row))
            for cell, delta in zip(cells, delta_row, strict=True):
                cell.metric(
                    delta.label,
                    delta.value,
                    delta=delta.delta,
                    delta_color="inverse" if delta.worse_when_higher else "normal",
                )
    else:
        st.caption("No single mode in this evaluation: nothing to compare self or cross with.")
    st.dataframe(ev.table(found), hide_index=True)
    st.caption(
        "score: share of items that pass; cost: USD over all items; p50/p95: seconds per item; "
        "rounds: mean per item; person saw: share of items a person had to see. Every item is "
        "in var/eval/ on the machine that ran the evaluation."
    )


def intercept_rate() -> None:
    """The Critic's critical-error intercept rate as `crosscheck eval intercept` published
    it, over time, against its target (the alert CrosscheckInterceptRateLow reads the
    latest)."""
    try:
        found = get_client().intercept_history()
    except ApiError as exc:
        st.warning(f"Could not load the intercept rate: {md_literal(exc.detail)}")
        return
    points = ev.intercept_points(found)
    if not points:
        st.info(
            "No intercept rate has been published yet. Run `crosscheck eval intercept` "
            "(it publishes to this orchestrator; `--url` names another): each result appears "
            "here."
        )
        return
    st.subheader("Critical-error intercept rate")
    latest = points[-1]
    met = latest.rate >= INTERCEPT_TARGET
    cells = st.columns(3)
    cells[0].metric(
        "Intercept rate",
        f"{latest.rate:.0%}",
        delta=f"target {INTERCEPT_TARGET:.0%}",
        delta_color="green" if met else "red",
        delta_arrow="off",
        help="The latest share of planted critical errors the Critic caught (it did not "
        "pass the output, and an issue named the error or quoted it).",
    )
    cells[1].metric("Items", "—" if latest.items is None else latest.items)
    cells[2].metric("Published results", len(points))
    if not met:
        caught = "" if latest.items is None else f" ({latest.intercepted} of {latest.items})"
        st.error(
            f"The latest intercept rate{caught}, {latest.rate:.0%}, is below the "
            f"{INTERCEPT_TARGET:.0%} target: the Critic lets planted critical errors through."
        )
    frame = pd.DataFrame(
        [
            {"finished": p.finished.isoformat(), "rate": p.rate, "target": INTERCEPT_TARGET}
            for p in points
        ]
    )
    base = alt.Chart(frame)
    rates = base.mark_line(point=True).encode(
        x=alt.X("finished:T", title="Finished"),
        y=alt.Y(
            "rate:Q",
            title="Intercept rate",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, 1]),
        ),
        tooltip=[alt.Tooltip("finished:T"), alt.Tooltip("rate:Q", format=".0%")],
    )
    target = base.mark_rule(color="#d62728", strokeDash=[4, 4]).encode(y="target:Q")
    st.altair_chart((rates + target).properties(height=240))
    st.caption(f"The dashed line is the {INTERCEPT_TARGET:.0%} target.")
    st.dataframe(
        [
            {
                "finished": ev.when(p.finished.isoformat()),
                "rate": f"{p.rate:.0%}",
                "intercepted": "—"
                if p.items is None
                else f"{'—' if p.intercepted is None else p.intercepted} of {p.items}",
                "critic": p.critic,
                "published by": p.published_by,
            }
            for p in reversed(points)
        ],
        hide_index=True,
    )


st.title("Metrics")
live, latest, intercept = st.tabs(["Live", "Latest evaluation", "Intercept rate"])
with live:
    live_metrics()
with latest:
    latest_evaluation()
with intercept:
    intercept_rate()

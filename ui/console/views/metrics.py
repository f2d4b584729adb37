"""How runs end, how long they take, and what the models cost: GET /v1/stats, charted."""

from datetime import UTC, datetime, timedelta
from typing import Any

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from console.client import ApiError, get_client
from console.view import md_literal

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


st.title("Metrics")
period = st.selectbox(
    "Period", list(PERIODS), format_func=lambda k: PERIODS[k][0], key="metrics-period"
)
span = PERIODS[period][1]
since = datetime.now(UTC) - span if span is not None else None
try:
    stats = get_client().stats(since=since)
except ApiError as exc:
    st.error(f"Could not load the metrics: {md_literal(exc.detail)}")
    st.stop()

if not stats["runs_total"] and not stats["providers"]:
    st.info(
        "No runs in this period yet: metrics appear once runs are created."
        if since is None
        else "No runs in this period. Pick a longer one."
    )
    st.stop()

providers = stats["providers"]
finished = sum(bucket["runs"] for bucket in stats["rounds_per_run"])
rate = stats.get("adoption_rate")
cost = sum(p["cost_usd"] or 0.0 for p in providers)
top = st.columns(4)
top[0].metric("Runs", stats["runs_total"])
top[1].metric("Finished", finished)
top[2].metric(
    "Adoption rate",
    "—" if rate is None else f"{rate:.0%}",
    help="Share of the critic's issues the next revision fixed, "
    f"over {stats['adoption_rounds']} round(s).",
)
top[3].metric("Model cost", f"${cost:.4f}")

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
    st.stop()
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

"""Prometheus metrics of the reflection loop (one registry per app)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

INTERCEPT_RATE = "crosscheck_intercept_rate"
INTERCEPT_HELP = (
    "The latest critical-error intercept rate `crosscheck eval intercept` published (the share "
    "of planted errors the Critic caught), read from the evaluations table when scraped; "
    "absent until one is published."
)


class LatestIntercept:
    """A collector of the published intercept rate: the database is the source, so every
    replica reports the same value, before and after a restart."""

    def __init__(self, read: Callable[[], float | None]) -> None:
        self.read = read

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(INTERCEPT_RATE, INTERCEPT_HELP)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        value = self.read()
        if value is not None:
            yield GaugeMetricFamily(INTERCEPT_RATE, INTERCEPT_HELP, value=value)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs_finished = Counter(
            "crosscheck_runs_finished",
            "Runs by final state and stop reason.",
            ["status", "stop_reason"],
            registry=self.registry,
        )
        self.rounds_per_run = Histogram(
            "crosscheck_rounds_per_run",
            "Rounds a run took before it stopped.",
            buckets=(1, 2, 3, 4, 5, 6, 8, 10, 20),
            registry=self.registry,
        )
        self.calls = Counter(
            "crosscheck_model_calls",
            "Model-facing calls by role and provider.",
            ["role", "provider", "model"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "crosscheck_tokens",
            "Tokens by role, provider and direction.",
            ["role", "provider", "direction"],
            registry=self.registry,
        )
        self.cost = Counter(
            "crosscheck_cost_usd",
            "Cost in USD by role and provider.",
            ["role", "provider"],
            registry=self.registry,
        )
        self.stage_latency = Histogram(
            "crosscheck_stage_latency_seconds",
            "Latency of each stage (draft, revise, evaluate, critique).",
            ["stage"],
            registry=self.registry,
        )
        self.critic_issues = Counter(
            "crosscheck_reflection_issues",
            "Critic issues an Actor revision was measured against (a refusal the Critic "
            "accepted is not counted).",
            registry=self.registry,
        )
        self.critic_issues_adopted = Counter(
            "crosscheck_reflection_issues_adopted",
            "Critic issues the critique of the revised version did not raise again (no issue "
            "on the same span or of the same dimension), whatever the Actor answered "
            "(adoption = adopted / issues).",
            registry=self.registry,
        )
        self.versions_settled = Counter(
            "crosscheck_versions_settled",
            "Versions that settled, once each: a later round revised them (the Actor, or a "
            "person's edit) or their run succeeded with them. judged: the Critic critiqued "
            "them or a person decided on them (comment, approve, edit, reject) first "
            '(trigger rate = judged="true" / all).',
            ["judged"],
            registry=self.registry,
        )
        for judged in ("true", "false"):  # both series from the start: a ratio needs them
            self.versions_settled.labels(judged)
        self.critiques = Counter(
            "crosscheck_critiques",
            "Critiques by profile, the depth that produced them and whether it degraded to L1.",
            ["profile", "depth", "degraded"],
            registry=self.registry,
        )
        self.environment_retries = Counter(
            "crosscheck_environment_retries",
            "Retried peer calls (environment errors), which never cost a round.",
            ["peer"],
            registry=self.registry,
        )
        self.revisions = Counter(
            "crosscheck_revisions",
            "Revisions the Actor returned (first attempts; over-correction rate = "
            "crosscheck_over_corrections / crosscheck_revisions).",
            registry=self.registry,
        )
        self.over_corrections = Counter(
            "crosscheck_over_corrections",
            "Revisions the over-correction guard rolled back (outcome rolled_back), and "
            "which version it kept when the re-ask broke it again (previous or current).",
            ["reason", "outcome"],
            registry=self.registry,
        )
        self.reverted_hunks = Counter(
            "crosscheck_reverted_hunks",
            "Hunks of revisions the diff lock reverted, by reason (locked, outside_flagged, "
            "cosmetic_whitespace, cosmetic_punctuation, cosmetic_case, cosmetic_reorder, "
            "cosmetic_wording).",
            ["reason"],
            registry=self.registry,
        )
        self.research_steps = Counter(
            "crosscheck_research_steps",
            "Research steps before a critique, by status (ok, degraded: the critique ran at L1).",
            ["status"],
            registry=self.registry,
        )
        self.research_evidence = Counter(
            "crosscheck_research_evidence",
            "Sources the research steps found (new to their run).",
            registry=self.registry,
        )
        self.refused_passes = Counter(
            "crosscheck_refused_passes",
            "Critiques whose `pass` was no pass (a major or critical issue listed, an "
            "off-profile issue, too little confidence): counted as `revise`.",
            registry=self.registry,
        )
        self.citation_checks = Counter(
            "crosscheck_citation_checks",
            "Revisions given evidence whose citations were checked, by outcome (ok: true or "
            "false).",
            ["ok"],
            registry=self.registry,
        )

    def read_intercept_rate(self, read: Callable[[], float | None]) -> None:
        """Expose ``crosscheck_intercept_rate`` as ``read`` finds it at each scrape (None:
        not published yet, or unreadable)."""
        self.registry.register(LatestIntercept(read))

"""Prometheus metrics of the reflection loop (one registry per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


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
            "Critic issues that a following round was checked against.",
            registry=self.registry,
        )
        self.critic_issues_adopted = Counter(
            "crosscheck_reflection_issues_adopted",
            "Critic issues no longer raised in the next round (adoption = adopted / issues).",
            registry=self.registry,
        )
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

"""Orchestrator settings: ``ORCHESTRATOR_*`` plus the platform-wide names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Self

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from orchestrator.evaluators.patterns import PatternLimits
from orchestrator.evaluators.pool import PoolConfig
from orchestrator.evaluators.schema import SchemaLimits
from orchestrator.webhooks.notify import notify_channels
from orchestrator.webhooks.targets import AllowList
from shared.contracts import MODEL_MODES, ModelMode
from shared.orchestration import WebhookEvent, webhook_secret_bytes
from shared.settings import MIN_TOKEN_CHARS, WEAK_TOKENS, ServiceSettings


class OrchestratorSettings(ServiceSettings):
    # Errors never echo a value: several settings are secrets.
    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRATOR_", extra="ignore", env_file=None, hide_input_in_errors=True
    )

    port: int = Field(default=8000, ge=1, le=65535)
    database_url: str = Field(
        default="sqlite:///var/crosscheck.sqlite",
        validation_alias=AliasChoices("DATABASE_URL", "database_url"),
        description="SQLAlchemy URL of the read model and the DBOS system tables.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("CROSSCHECK_ADMIN_TOKEN", "admin_token"),
        description="Bootstrap admin bearer token (stored hashed); mints the other tokens.",
    )
    models: ModelMode = Field(
        default="providers",
        description="What answers the model calls of the Actor and the Critic, as GET /v1/info "
        "(model_mode) and the console say it (ORCHESTRATOR_MODELS): demo, local or providers. "
        "`crosscheck up` sets it from its own mode; the orchestrator only reports it.",
    )
    actor_url: str = Field(
        default="http://127.0.0.1:8001", validation_alias=AliasChoices("ACTOR_URL", "actor_url")
    )
    critic_url: str = Field(
        default="http://127.0.0.1:8002", validation_alias=AliasChoices("CRITIC_URL", "critic_url")
    )
    knowledge_dir: Path | None = Field(
        default=None,
        description="A folder of knowledge packs (*.toml) loaded at start "
        "(ORCHESTRATOR_KNOWLEDGE_DIR).",
    )
    knowledge_min_score: float = Field(
        default=0.0,
        ge=0.0,
        description="Knowledge entries scoring below this are not given to the Actor or the "
        "Critic (SQLite: BM25; Postgres: ts_rank_cd). Not used with embeddings on.",
    )
    knowledge_embeddings: bool = Field(
        default=False,
        description="Rank knowledge by embeddings too (ORCHESTRATOR_KNOWLEDGE_EMBEDDINGS): "
        "entries and tasks are embedded through an OpenAI-compatible /v1/embeddings endpoint "
        "and ranked by cosine similarity plus a share of the text score. Off: the text index "
        "alone, and no embeddings request is sent.",
    )
    knowledge_embedding_model: str = Field(
        default="text-embedding-3-small", min_length=1, max_length=200
    )
    knowledge_min_similarity: float = Field(
        default=0.6,
        ge=-1.0,
        le=1.0,
        description="With embeddings on: the cosine similarity an entry needs to be given.",
    )
    knowledge_embedding_base_url: str | None = Field(
        default=None,
        max_length=2000,
        description="The embeddings endpoint's base URL (with /v1); default: OPENAI_BASE_URL.",
    )
    knowledge_embedding_api_key: SecretStr | None = Field(
        default=None, description="Its API key; default: OPENAI_API_KEY."
    )
    knowledge_embedding_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="How long one embeddings request may take before the text index ranks alone.",
    )
    sandbox_url: str = Field(
        default="http://127.0.0.1:8003",
        validation_alias=AliasChoices("SANDBOX_URL", "sandbox_url"),
    )
    research_url: str = Field(
        default="",
        max_length=2000,
        description="The Research service (ORCHESTRATOR_RESEARCH_URL); empty: no research, "
        "and a run's `policy.research: null` leaves it off. `crosscheck up` sets it to the "
        "Research service it starts.",
    )
    research_budget_s: float = Field(
        default=15.0,
        gt=0,
        le=300,
        description="How long one research step may take (ORCHESTRATOR_RESEARCH_BUDGET_S); "
        "past it the round goes on without evidence, `degraded`.",
    )
    step_budget_s: float = Field(
        default=900.0,
        gt=0,
        le=86_400,
        description="One deadline per step (ORCHESTRATOR_STEP_BUDGET_S): its peer calls, their "
        "retries and the peers' own model calls all fit in it; a peer that runs out of it "
        "answers BudgetExceeded, which is not retried.",
    )
    peer_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="The longest one attempt of a peer call may wait (ORCHESTRATOR_PEER_TIMEOUT_S)"
        ", within the step's deadline.",
    )
    peer_max_attempts: int = Field(default=6, ge=1, le=50)
    peer_retry_initial_s: float = Field(default=0.5, ge=0)
    peer_retry_backoff: float = Field(default=2.0, ge=1)
    executor_id: str = Field(
        default="local",
        min_length=1,
        max_length=100,
        description="This replica's DBOS executor id: stable across restarts, unique per "
        "replica sharing a Postgres database (a restarted replica resumes its own runs).",
    )
    application_version: str = Field(
        default="crosscheck-1", description="Pinned so pending runs recover across deploys."
    )
    executor_threads: int = Field(default=8, ge=1, le=256)
    run_migrations: bool = Field(default=True)
    review_sweep_s: float = Field(
        default=1.0, gt=0, description="How often review deadlines are checked."
    )
    dbos_poll_s: float = Field(
        default=1.0,
        ge=0.001,
        le=60,
        description="DBOS's notification-listener poll interval; shutdown waits up to this long.",
    )

    heartbeat_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Postgres: how often a replica writes its heartbeat and the leader checks "
        "for replicas whose heartbeat stopped.",
    )
    replica_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Postgres: a replica whose heartbeat is older than this is dead, and the "
        "leader recovers its runs on the live replicas.",
    )
    events_safety_poll_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Postgres: while LISTEN/NOTIFY is connected, how often a websocket still "
        "reads the events table without being woken (a safety net).",
    )
    db_pool_size: int = Field(
        default=10,
        ge=1,
        le=500,
        description="Postgres: connections each replica keeps for the read model. Replicas x "
        "(DB_POOL_SIZE + DB_MAX_OVERFLOW + SYSTEM_DB_POOL_SIZE + 2) must fit the server's "
        "max_connections.",
    )
    db_max_overflow: int = Field(
        default=20, ge=0, le=500, description="Postgres: extra read-model connections at peaks."
    )
    system_db_pool_size: int = Field(
        default=20, ge=1, le=500, description="Postgres: connections of DBOS's system tables."
    )
    advertise_url: str | None = Field(
        default=None,
        max_length=300,
        description="Where operators reach this replica, as listed by GET /v1/cluster "
        "(default http://HOST:PORT).",
    )

    webhook_secret: SecretStr | None = Field(
        default=None,
        description="The platform signing secret of per-run callback_url webhooks "
        "(whsec_<base64> or a string of at least 24 bytes). Unset: a run with a callback_url "
        "is refused (422).",
    )
    webhook_key: SecretStr | None = Field(
        default=None,
        description="Fernet key(s) that encrypt subscription secrets at rest, comma-separated "
        "(the first encrypts, every one decrypts: rotation). Unset: derived from "
        "CROSSCHECK_ADMIN_TOKEN with HKDF-SHA256.",
    )
    webhook_timeout_s: float = Field(
        default=5.0, gt=0, le=60, description="Timeout of one webhook POST."
    )
    webhook_retry_initial_s: float = Field(
        default=1.0, gt=0, le=3600, description="Delay before the first retry; doubles each time."
    )
    webhook_retry_max_s: float = Field(
        default=300.0, gt=0, le=86400, description="Longest delay between two attempts."
    )
    webhook_max_attempts: int = Field(
        default=10, ge=1, le=100, description="Attempts before a delivery is marked failed."
    )
    webhook_max_age_s: float = Field(
        default=86400.0,
        gt=0,
        le=30 * 86400,
        description="A delivery still undelivered this long after it was queued is failed.",
    )
    webhook_concurrency: int = Field(
        default=16, ge=1, le=256, description="Deliveries in flight at once, per process."
    )
    webhook_host_concurrency: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Deliveries in flight at once to one receiver (scheme, host and port), "
        "per process: a slow receiver never takes every slot.",
    )
    webhook_poll_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="How often the delivery worker looks for due deliveries when not woken.",
    )
    webhook_max_subscriptions: int = Field(default=100, ge=1, le=10_000)
    webhook_allow_hosts: str = Field(
        default="",
        max_length=10_000,
        description="Comma-separated host names and CIDRs that webhooks (subscriptions and "
        "callback_url) may reach although they are inside: loopback, private, link-local, "
        "CGNAT, metadata and other non-public addresses are refused otherwise, at registration "
        "and before each delivery; plain http:// is allowed to these hosts only. A name matches "
        "the URL's host exactly; a CIDR (or bare address) matches the addresses it resolves "
        "to. Empty: nothing inside is reachable.",
    )
    webhook_resolve_timeout_s: float = Field(
        default=3.0,
        gt=0,
        le=60,
        description="How long resolving a webhook's host may take, at registration (then 422) "
        "and before a delivery (then it is retried).",
    )

    # Notifications (Apprise) on the webhook outbox: see orchestrator/webhooks/notify.py
    notify_urls: SecretStr | None = Field(
        default=None,
        description="Where escalations and review items reach people: Apprise URLs "
        "(slack://..., msteams://..., mailtos://..., matrix://..., json://host/path and the "
        "rest of Apprise's list), separated by spaces or commas; each is a channel. They carry "
        "credentials: kept out of the database, logs and responses. Operator-set, so not "
        "checked against ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS. Unset: no notifications.",
    )
    notify_events: str = Field(
        default="run.escalated,review.created",
        max_length=200,
        description="Comma-separated events that notify every channel: run.escalated, "
        "review.created, review.decided, run.finished.",
    )
    notify_console_url: str = Field(
        default="http://127.0.0.1:8501",
        max_length=300,
        description="The reviewer console's address, for the links in notifications.",
    )

    # JSON schemas of runs (json_schema): limits at creation, and the evaluation workers
    schema_max_bytes: int = Field(
        default=65_536,
        ge=2,
        le=16 * 1024 * 1024,
        description="A run's json_schema may be at most this many bytes of (compact) JSON; "
        "larger is refused at creation (422 InvalidSchema).",
    )
    schema_max_nodes: int = Field(
        default=2_000,
        ge=1,
        le=1_000_000,
        description="A run's json_schema may hold at most this many nodes (objects, arrays "
        "and values); more is refused at creation. Checking costs time in proportion.",
    )
    schema_pattern_max_length: int = Field(
        default=1_000,
        ge=1,
        le=100_000,
        description="Longest regular expression (pattern, patternProperties key) a schema "
        "may hold, in characters.",
    )
    schema_pattern_max_repeat: int = Field(
        default=1_000,
        ge=1,
        le=1_000,
        description="Largest count of a repeat ({n}, {n,m}) in a schema's regular "
        "expression; RE2 allows no more than 1000, nested repeats included.",
    )
    schema_pattern_max_depth: int = Field(
        default=32,
        ge=1,
        le=1_000,
        description="How deep the groups of a schema's regular expression may nest.",
    )
    schema_pattern_max_mem_kb: int = Field(
        default=2_048,
        ge=64,
        le=1024 * 1024,
        description="RE2's memory budget for one compiled regular expression, in KB; one "
        "that needs more is refused at creation.",
    )
    schema_workers: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Worker processes that evaluate outputs against run schemas; started at "
        "first use and reused.",
    )
    schema_owner_share: int = Field(
        default=1,
        ge=1,
        le=64,
        description="How many of the schema workers the runs of one owner (the token that "
        "created them) may use at once (at most ORCHESTRATOR_SCHEMA_WORKERS); its other "
        "evaluations wait, owners served in turn.",
    )
    schema_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="One schema evaluation's time limit: past it the worker is killed and "
        "the evaluation fails (waiting for a worker does not count).",
    )
    schema_worker_memory_mb: int = Field(
        default=512,
        ge=128,
        le=1024 * 1024,
        description="Address-space cap of a schema worker (RLIMIT_AS), in MB; an evaluation "
        "that needs more fails.",
    )

    metrics_auth: bool = Field(
        default=False,
        description="GET /metrics needs a bearer token (any role). Off by default: the "
        "orchestrator listens on loopback, the exposition holds counters only, and scrapers "
        "usually carry no token; turn it on when the port is reachable by others.",
    )
    docs_auth: bool = Field(
        default=False,
        description="/docs, /redoc and /openapi.json need a bearer token (any role). Off by "
        "default: they describe the public API and hold no data.",
    )

    @field_validator("webhook_secret")
    @classmethod
    def _usable_webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        try:
            webhook_secret_bytes(value.get_secret_value())
        except ValueError as exc:
            raise ValueError(f"ORCHESTRATOR_WEBHOOK_SECRET {exc}") from None
        return value

    @field_validator("webhook_key")
    @classmethod
    def _fernet_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        from cryptography.fernet import Fernet

        for key in value.get_secret_value().split(","):
            try:
                Fernet(key.strip())
            except ValueError:
                raise ValueError(
                    "ORCHESTRATOR_WEBHOOK_KEY must be one or more Fernet keys separated by "
                    "commas (32 url-safe base64-encoded bytes each; make one with: "
                    "python -c 'from cryptography.fernet import Fernet; "
                    "print(Fernet.generate_key().decode())')"
                ) from None
        return value

    @field_validator("notify_urls")
    @classmethod
    def _notify_urls_parse(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            notify_channels(value.get_secret_value())  # raises naming the channel's number
        return value

    @field_validator("notify_events")
    @classmethod
    def _notify_events_known(cls, value: str) -> str:
        known = {event.value for event in WebhookEvent}
        for name in (part.strip() for part in value.split(",") if part.strip()):
            if name not in known:
                raise ValueError(
                    f"ORCHESTRATOR_NOTIFY_EVENTS: unknown event {name!r} "
                    f"(known: {', '.join(sorted(known))})"
                )
        return value

    @property
    def notify_channel_urls(self) -> list[str]:
        urls = self.notify_urls
        return notify_channels(urls.get_secret_value()) if urls is not None else []

    @property
    def notify_event_set(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.notify_events.split(",") if part.strip())

    @field_validator("webhook_allow_hosts")
    @classmethod
    def _allow_hosts_parse(cls, value: str) -> str:
        AllowList.parse(value)  # raises naming the entry that is neither a name nor a CIDR
        return value

    @property
    def webhook_allow_list(self) -> AllowList:
        return AllowList.parse(self.webhook_allow_hosts)

    @field_validator("models", mode="before")
    @classmethod
    def _known_models(cls, value: object) -> object:
        mode = value.strip().lower() if isinstance(value, str) else value
        if mode not in MODEL_MODES:
            raise ValueError(
                f"ORCHESTRATOR_MODELS must be one of {', '.join(MODEL_MODES)} "
                f"(got {str(value)[:40]!r}): "
                "demo is the scripted fake model, local a small model on this machine, "
                "providers the real provider APIs"
            )
        return mode

    @field_validator("executor_id")
    @classmethod
    def _plain_executor_id(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]*", value):
            raise ValueError(
                "ORCHESTRATOR_EXECUTOR_ID must start with a letter or digit and contain only "
                f"letters, digits, '.', '_', ':' and '-' (got {value!r})"
            )
        return value

    @model_validator(mode="after")
    def _timeout_covers_heartbeats(self) -> Self:
        if self.replica_timeout_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"ORCHESTRATOR_REPLICA_TIMEOUT_S ({self.replica_timeout_s:g}) must be at least "
                f"twice ORCHESTRATOR_HEARTBEAT_S ({self.heartbeat_s:g}), or one late heartbeat "
                "would make a live replica look dead"
            )
        return self

    @model_validator(mode="after")
    def _retry_cap_covers_start(self) -> Self:
        if self.webhook_retry_max_s < self.webhook_retry_initial_s:
            raise ValueError(
                f"ORCHESTRATOR_WEBHOOK_RETRY_MAX_S ({self.webhook_retry_max_s:g}) must be at least "
                f"ORCHESTRATOR_WEBHOOK_RETRY_INITIAL_S ({self.webhook_retry_initial_s:g})"
            )
        return self

    @field_validator("admin_token")
    @classmethod
    def _strong_admin(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        if raw.lower() in WEAK_TOKENS or len(raw) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"CROSSCHECK_ADMIN_TOKEN must be a random string of at least {MIN_TOKEN_CHARS} "
                "characters"
            )
        return value

    def schema_limits(self) -> SchemaLimits:
        return SchemaLimits(
            max_bytes=self.schema_max_bytes,
            max_nodes=self.schema_max_nodes,
            patterns=self.pattern_limits(),
        )

    def pattern_limits(self) -> PatternLimits:
        return PatternLimits(
            max_length=self.schema_pattern_max_length,
            max_repeat=self.schema_pattern_max_repeat,
            max_depth=self.schema_pattern_max_depth,
            max_mem_kb=self.schema_pattern_max_mem_kb,
        )

    def schema_pool(self) -> PoolConfig:
        return PoolConfig(
            workers=self.schema_workers,
            owner_share=self.schema_owner_share,
            timeout_s=self.schema_timeout_s,
            memory_mb=self.schema_worker_memory_mb,
            patterns=self.pattern_limits(),
        )

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def address(self) -> str:
        return self.advertise_url or f"http://{self.host}:{self.port}"

    def secrets(self) -> list[str]:
        """Also each key of a comma-separated ORCHESTRATOR_WEBHOOK_KEY on its own."""
        found = super().secrets()
        if self.webhook_key is not None:
            found.extend(k.strip() for k in self.webhook_key.get_secret_value().split(","))
        return found

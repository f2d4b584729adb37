"""MkDocs hook: the configuration reference, generated from the settings classes.

`docs/configuration.md` holds one marker per service, `<!-- settings: module:Class -->`; each
becomes a table of every field of that pydantic-settings class: the environment variable(s),
the default, the accepted values and the description. The description is the field's own
(`Field(description=...)`), followed by the note below when there is one. A field with
neither, a note for a variable no class reads, or a settings class no marker names is a
warning, so `mkdocs build --strict` fails: a new setting cannot ship undocumented.
"""

from __future__ import annotations

import enum
import importlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

log = logging.getLogger("mkdocs.hooks.configuration")

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- settings: ([\w.]+):(\w+) -->$", re.MULTILINE)

# Notes for fields whose class gives no description (or whose README row said more). Keyed
# by environment variable; one note serves every class that reads the variable.
NOTES: dict[str, str] = {
    "ORCHESTRATOR_HOST": "Where the orchestrator listens.",
    "ORCHESTRATOR_PORT": "Its port.",
    "ACTOR_HOST": "Where the Actor listens.",
    "ACTOR_PORT": "Its port.",
    "CRITIC_HOST": "Where the Critic listens.",
    "CRITIC_PORT": "Its port.",
    "SANDBOX_HOST": "Where the sandbox listens.",
    "SANDBOX_PORT": "Its port.",
    "RESEARCH_HOST": "Where the Research service listens.",
    "RESEARCH_PORT": "Its port.",
    "FAKEMODEL_HOST": "Where the scripted model listens: loopback only (`127.0.0.1`, `::1` or "
    "`localhost`) unless `FAKEMODEL_ALLOW_NON_LOOPBACK=1`, because its `/_control` API has no "
    "token.",
    "FAKEMODEL_PORT": "Its port.",
    "FAKEMODEL_LATENCY_MS": "Delay added to every model answer (benchmarks).",
    "FAKEMODEL_LOG_LIMIT": "How many requests the fake model keeps in its request log "
    "(`/_control/requests`).",
    "CROSSCHECK_LOG_LEVEL": "Log level: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
    "CROSSCHECK_LOG_JSON": "Every log line is JSON, with secrets redacted.",
    "ACTOR_URL": "Where the orchestrator finds the Actor.",
    "CRITIC_URL": "Where the orchestrator finds the Critic.",
    "SANDBOX_URL": "Where the orchestrator finds the sandbox.",
    "DATABASE_URL": "`postgresql://...` for Postgres; DBOS keeps its tables beside the read model.",
    "ORCHESTRATOR_KNOWLEDGE_EMBEDDING_MODEL": "The embeddings model.",
    "ORCHESTRATOR_PEER_MAX_ATTEMPTS": "Attempts of a peer call on environment errors "
    "(unreachable, 5xx, a timeout; not `BudgetExceeded`); each retry is a `peer.retry` event.",
    "ORCHESTRATOR_PEER_RETRY_INITIAL_S": "The first wait between attempts of a peer call.",
    "ORCHESTRATOR_PEER_RETRY_BACKOFF": "The factor each later wait grows by.",
    "ORCHESTRATOR_EXECUTOR_THREADS": "DBOS executor threads.",
    "ORCHESTRATOR_RUN_MIGRATIONS": "Apply the alembic migrations at start.",
    "ORCHESTRATOR_WEBHOOK_MAX_SUBSCRIPTIONS": "The most webhook subscriptions an orchestrator "
    "keeps.",
    "OPENAI_API_KEY": "OpenAI key (the SDK's own name).",
    "OPENAI_BASE_URL": "Base URL of any OpenAI-compatible server (must include `/v1`).",
    "ANTHROPIC_API_KEY": "Anthropic key (the SDK's own name).",
    "ANTHROPIC_BASE_URL": "Anthropic base URL (without `/v1`).",
    "CROSSCHECK_MODEL_TIMEOUT_S": "Timeout of one model request (sooner when the step's "
    "deadline is).",
    "CROSSCHECK_MODEL_MAX_ATTEMPTS": "Attempts per model call (first try plus retries), as many "
    "as the step's deadline leaves time for.",
    "CROSSCHECK_RETRY_INITIAL_S": "Backoff start between model-call attempts.",
    "CROSSCHECK_RETRY_MAX_WAIT_S": "Backoff cap (a server's `Retry-After` wins, up to 300 s).",
    "CROSSCHECK_PRICES": 'JSON `{"model": [usd_per_Mtok_in, usd_per_Mtok_out]}` over the '
    "built-in price table; models without a price report `cost_usd: null`.",
    "ACTOR_PROVIDER": "Which provider plays the Actor: `openai` or `anthropic`.",
    "CRITIC_PROVIDER": "Which provider plays the Critic; the same as the Actor's is refused "
    "at start unless `CROSSCHECK_ALLOW_SAME_PROVIDER=1`.",
    "ACTOR_DRAFT_MODEL": "Default: `gpt-5-mini` (OpenAI), `claude-sonnet-4-6` (Anthropic).",
    "ACTOR_DRAFT_TEMPERATURE": "Temperature of drafts (sent only to models that take one, see "
    "[Switching to real providers](operations.md#switching-to-real-providers)).",
    "ACTOR_REVISE_TEMPERATURE": "Temperature of revisions (sent only to models that take one).",
    "CRITIC_TEMPERATURE": "The Critic's temperature (sent only to models that take one).",
    "CRITIC_L1_BUDGET_S": "Latency budget of an L1 critique, retries and the repair included, "
    "within the step's deadline; past it: 504 `BudgetExceeded`, not retried.",
    "CRITIC_L2_BUDGET_S": "The same at L2.",
    "CRITIC_L3_BUDGET_S": "The same at L3 (both of its rounds).",
    "SANDBOX_MAX_OPEN_FILES": "RLIMIT_NOFILE of the code the sandbox runs.",
    "SANDBOX_RESULTS_CAP_BYTES": "The most bytes of results one execution returns.",
    "SANDBOX_WORKER_START_TIMEOUT_S": "How long a warm worker may take to start.",
    "SANDBOX_MAX_BODY_BYTES": "The largest request body the sandbox accepts (413 above).",
    "RESEARCH_DISTILL_MAX_TOKENS": "Output-token cap of one distillation call.",
    "TAVILY_API_KEY": "Key of the `tavily` backend; sent in a header only, never logged or "
    "returned.",
    "BRAVE_API_KEY": "Key of the `brave` backend; sent in a header only, never logged or returned.",
    "ACTOR_OUTPUT_MODE": "`json_schema` is OpenAI's `response_format` and Anthropic's "
    "`output_config.format`.",
    "CRITIC_OUTPUT_MODE": "`json_schema` is OpenAI's `response_format` and Anthropic's "
    "`output_config.format`.",
    "ACTOR_FIT_TO_CAP": "For servers that enforce the schema with a grammar (llama.cpp, vLLM): "
    "a model that never stops before a field is full still closes its JSON within the cap.",
    "CRITIC_FIT_TO_CAP": "For servers that enforce the schema with a grammar (llama.cpp, "
    "vLLM): a model that never stops before a field is full still closes its JSON within the "
    "cap.",
    "CROSSCHECK_ALLOW_SAME_PROVIDER": "Allowed, it is logged as a warning; otherwise one "
    "provider for both roles is refused at start.",
    "ORCHESTRATOR_MODELS": "Only reported: it changes no behaviour; any other value stops the "
    "orchestrator at start.",
    "ORCHESTRATOR_RESEARCH_URL": "`crosscheck up` and Compose set it to the Research service "
    "they start; empty, `policy.research: true` records every query as failed.",
    "ORCHESTRATOR_EXECUTOR_ID": "Letters, digits, `.` `_` `:` `-`; DBOS's recovery identity, "
    "with `ORCHESTRATOR_APPLICATION_VERSION`.",
    "ORCHESTRATOR_REPLICA_TIMEOUT_S": "At least 2 x the heartbeat; also the TCP keepalive. Its "
    "runs are handed to the live replicas once its connection is gone too.",
    "ORCHESTRATOR_WEBHOOK_SECRET": "`whsec_...` or at least 24 bytes; unset, a run with a "
    "`callback_url` is a 422. `crosscheck up` generates one (in `var/crosscheck.env`).",
    "ORCHESTRATOR_WEBHOOK_KEY": "The first key encrypts, all of them (and the key derived from "
    "`CROSSCHECK_ADMIN_TOKEN` with HKDF-SHA256) decrypt, so keys can be rotated.",
    "ORCHESTRATOR_WEBHOOK_MAX_AGE_S": "Past it, or past the attempts, a delivery is `failed` "
    "(a dead letter).",
    "ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS": "Host names match exactly; a bare address is its own "
    "/32 or /128. E.g. `127.0.0.1` for a local receiver.",
    "ORCHESTRATOR_REVIEW_SWEEP_S": "Lapsed claim leases are checked as often.",
    "REDIS_URL": "Also `rediss://` or `unix://`; the replay store's keys are under "
    "`crosscheck:replay:<service>:`. An "
    "unreachable or malformed URL makes `/readyz` answer 503 with the reason, never the "
    "password.",
    "CROSSCHECK_REPLAY_STORE": "`memory` is not durable: for tests.",
    "ACTOR_REPLAY_DB": "Relative to the working directory; its folder is created.",
    "CRITIC_REPLAY_DB": "Relative to the working directory; its folder is created.",
}


def settings_classes() -> list[type[BaseSettings]]:
    """Every deployable's settings class: those defined in `services/*/*/settings.py` and in
    `crosscheck/anthropic_adapter.py` (the local model's adapter)."""
    modules = [
        ".".join(path.relative_to(path.parents[1]).with_suffix("").parts)
        for path in sorted(ROOT.glob("services/*/*/settings.py"))
    ]
    modules.append("crosscheck.anthropic_adapter")
    found: list[type[BaseSettings]] = []
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseSettings)
                and value.__module__ == name
            ):
                found.append(value)
    return found


def env_names(cls: type[BaseSettings], name: str, info: FieldInfo) -> list[str]:
    """The environment variables pydantic-settings reads the field from."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names = [c for c in alias.choices if isinstance(c, str) and c.upper() == c]
        if names:
            return names
    if isinstance(alias, str):
        return [alias]
    prefix = str(cls.model_config.get("env_prefix", ""))
    return [(prefix + name).upper()]


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value: Any = info.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str) and value == "":
        return "empty"
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`"


def bounds_text(info: FieldInfo) -> str:
    """Type and bounds as a reader types them: `int, 1 to 65535`, `one of a, b`."""
    schema: dict[str, Any] = {}
    for item in info.metadata:
        for key in ("ge", "gt", "le", "lt", "min_length", "max_length"):
            bound = getattr(item, key, None)
            if bound is not None:
                schema[key] = bound
    annotation = info.annotation
    kind = getattr(annotation, "__name__", None) or str(annotation)
    kind = kind.replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")
    literal = re.findall(r"Literal\[([^\]]*)\]", str(annotation))
    if literal:
        kind = "one of " + ", ".join(v.strip().strip("'") for v in ",".join(literal).split(","))
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        kind = "one of " + ", ".join(str(m.value) for m in annotation)
    parts = [kind]
    low = schema.get("ge", schema.get("gt"))
    high = schema.get("le", schema.get("lt"))
    if low is not None or high is not None:
        lo = "" if low is None else ("> " if "gt" in schema else ">= ") + str(low)
        hi = "" if high is None else ("< " if "lt" in schema else "<= ") + str(high)
        parts.append(", ".join(p for p in (lo, hi) if p))
    if "min_length" in schema or "max_length" in schema:
        parts.append(
            f"{schema.get('min_length', 0)} to {schema.get('max_length', 'any')} characters"
        )
    return "; ".join(parts).replace("|", "or")


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_table(cls: type[BaseSettings], used_notes: set[str]) -> str:
    rows = [
        f"Generated from `{cls.__module__}.{cls.__name__}`: {len(cls.model_fields)} settings.",
        "",
        "| variable | default | type | description |",
        "|---|---|---|---|",
    ]
    for name, info in cls.model_fields.items():
        names = env_names(cls, name, info)
        notes = [NOTES[n] for n in names if n in NOTES]
        used_notes.update(n for n in names if n in NOTES)
        description = " ".join([info.description, *notes] if info.description else notes)
        if not description:
            log.warning(
                "configuration: %s.%s (%s) has no description and no note in "
                "docs/hooks/configuration.py",
                cls.__name__,
                name,
                names[0],
            )
            description = "(undocumented)"
        variables = "<br>".join(f"`{n}`" for n in names)
        rows.append(
            f"| {variables} | {cell(default_text(info))} | {cell(bounds_text(info))} "
            f"| {cell(description)} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri != "configuration.md":
        return markdown
    classes = {f"{c.__module__}:{c.__name__}": c for c in settings_classes()}
    named = {f"{m.group(1)}:{m.group(2)}" for m in MARKER.finditer(markdown)}
    for missing in sorted(set(classes) - named):
        log.warning("configuration: no `<!-- settings: %s -->` marker on the page", missing)
    used_notes: set[str] = set()

    def render(match: re.Match[str]) -> str:
        key = f"{match.group(1)}:{match.group(2)}"
        if key not in classes:
            log.warning("configuration: %s is not a settings class of a service", key)
            return match.group(0)
        return settings_table(classes[key], used_notes)

    rendered = MARKER.sub(render, markdown)
    for stale in sorted(set(NOTES) - used_notes):
        log.warning("configuration: a note for %s, which no settings class reads", stale)
    return rendered

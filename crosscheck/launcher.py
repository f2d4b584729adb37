"""Start every service on loopback as child processes, watch them, stop them together."""

from __future__ import annotations

import base64
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import httpx

from crosscheck.localmodel import DEFAULT_ROOT as DEFAULT_LOCALMODEL_DIR
from crosscheck.localmodel import Built, Layout, server_command
from shared.logging import register_secrets, scrub_text

DEMO_KEY = "demo-key-for-the-scripted-model"
KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_PROVIDERS = {"actor": "openai", "critic": "anthropic", "research": "openai"}


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    module: str
    env_prefix: str
    default_port: int
    what: str
    health_path: str = "/healthz"
    overrides: tuple[tuple[str, str], ...] = ()  # this instance's own variables (replicas)

    def command(self, env: dict[str, str]) -> list[str]:
        return [sys.executable, "-m", self.module]

    def host(self, env: dict[str, str]) -> str:
        return self.environment(env).get(f"{self.env_prefix}HOST", "127.0.0.1")

    def port(self, env: dict[str, str]) -> int:
        return int(self.environment(env).get(f"{self.env_prefix}PORT", self.default_port))

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """What this child is started with."""
        return {**child_env(self, env), **dict(self.overrides)}

    def url(self, env: dict[str, str]) -> str:
        return f"http://{self.host(env)}:{self.port(env)}"


@dataclass(frozen=True)
class ConsoleSpec(ServiceSpec):
    """The Streamlit console: a script run by Streamlit, not a ``python -m`` service."""

    def command(self, env: dict[str, str]) -> list[str]:
        import console

        script = Path(console.__file__).parent / "app.py"
        return [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(script),
            "--server.headless=true",
            f"--server.address={self.host(env)}",
            f"--server.port={self.port(env)}",
            "--browser.gatherUsageStats=false",
            "--client.toolbarMode=viewer",  # no Deploy button for reviewers
        ]


@dataclass(frozen=True)
class LlamaServerSpec(ServiceSpec):
    """llama.cpp's ``llama-server`` on the model ``crosscheck localmodel build`` made (found
    under ``CROSSCHECK_LOCALMODEL_DIR``, default ``var/localmodel``)."""

    def command(self, env: dict[str, str]) -> list[str]:
        layout = Layout(Path(env.get("CROSSCHECK_LOCALMODEL_DIR", str(DEFAULT_LOCALMODEL_DIR))))
        built = Built(server=layout.server, model=layout.model, seconds=0.0, cached=True)
        return server_command(
            built, host=self.host(env), port=self.port(env), aliases=LOCAL_ALIASES
        )


FAKEMODEL = ServiceSpec(
    "fakemodel", "fakemodel", "FAKEMODEL_", 8009, "scripted demo model (OpenAI + Anthropic)"
)
LLAMASERVER = LlamaServerSpec(
    "llama-server",
    "llama-server",
    "LOCALMODEL_SERVER_",
    8011,
    "local model SmolLM2-135M (OpenAI wire)",
    health_path="/health",
)
MODEL_ADAPTER = ServiceSpec(
    "model-adapter",
    "crosscheck.anthropic_adapter",
    "LOCALMODEL_ADAPTER_",
    8012,
    "Anthropic wire for the local model",
)
LOCAL_ALIASES = ("actor-model", "critic-model")
LOCAL_KEY = "local-model-needs-no-key"
# What fits a 135M model on two shared CPU cores (see "Running on a local model" in the
# README): slow calls, few retries, caps that let the JSON close. Each can still be set.
LOCAL_DEFAULTS = {
    "CROSSCHECK_MODEL_TIMEOUT_S": "600",
    "CROSSCHECK_MODEL_MAX_ATTEMPTS": "2",
    # the schemas sent are fitted to the first cap (shared.providers.fitting: a 2,048-token
    # draft of about 1,100 characters, a 1,024-token critique of one issue with short fields)
    # and kept for the one retry at twice the cap, which this ceiling allows
    "CROSSCHECK_MAX_OUTPUT_TOKENS": "4096",
    "CRITIC_L1_MAX_TOKENS": "1024",
    "CRITIC_L2_MAX_TOKENS": "1536",
    "CRITIC_L3_MAX_TOKENS": "1536",
    "CRITIC_L1_BUDGET_S": "900",
    "CRITIC_L2_BUDGET_S": "1050",
    "CRITIC_L3_BUDGET_S": "1200",
    "ORCHESTRATOR_STEP_BUDGET_S": "2400",
    "ORCHESTRATOR_PEER_TIMEOUT_S": "1800",
    "ORCHESTRATOR_PEER_MAX_ATTEMPTS": "2",
    "ORCHESTRATOR_RESEARCH_BUDGET_S": "300",
    "RESEARCH_BUDGET_S": "300",
    "ACTOR_DRAFT_MODEL": "actor-model",
    "ACTOR_REVISE_MODEL": "actor-model",
    "CRITIC_MODEL": "critic-model",
    "RESEARCH_MODEL": "actor-model",
}
MODES = ("demo", "local")
SERVICES = (
    ServiceSpec("actor", "actor", "ACTOR_", 8001, "drafts and revises"),
    ServiceSpec("critic", "critic", "CRITIC_", 8002, "structured critiques"),
    ServiceSpec("sandbox", "sandbox", "SANDBOX_", 8003, "runs generated code, isolated"),
    ServiceSpec("research", "research", "RESEARCH_", 8005, "evidence: local corpus or web"),
    ServiceSpec("orchestrator", "orchestrator", "ORCHESTRATOR_", 8000, "runs API, events, loop"),
    ConsoleSpec("console", "console", "CONSOLE_", 8501, "reviewer console", "/_stcore/health"),
)
PORT_PREFIXES = tuple(
    spec.env_prefix.rstrip("_") for spec in (FAKEMODEL, LLAMASERVER, MODEL_ADAPTER, *SERVICES)
)  # each service's `<PREFIX>_PORT` variable (tests and benchmarks give each a free port)
CREDENTIALS_FILE = "crosscheck.env"


@dataclass
class Plan:
    """What ``up`` will start and with which environment."""

    env: dict[str, str]
    services: list[ServiceSpec]
    demo: bool
    missing_keys: list[str] = field(default_factory=list)
    local: bool = False  # CROSSCHECK_MODELS=local: the model built under var/localmodel

    @property
    def models(self) -> str:
        """The mode's name the orchestrator reports (``ORCHESTRATOR_MODELS``, shown by the
        console): ``local``, ``demo`` or ``providers``."""
        if self.local:
            return "local"
        return "demo" if self.demo else "providers"

    @property
    def mode(self) -> str:
        """What answers the model calls, as ``up`` says it."""
        if self.local:
            return "local model (SmolLM2-135M on llama-server, both SDKs on loopback)"
        if self.demo:
            return "scripted demo model (not a real LLM)"
        return "real providers"


def plan(
    base_env: dict[str, str],
    *,
    with_sandbox: bool = True,
    with_console: bool = True,
    replicas: int = 1,
) -> Plan:
    env = dict(base_env)
    models = env.get("CROSSCHECK_MODELS", "demo").strip().lower() or "demo"
    if models not in MODES:
        raise PlanError(
            f"CROSSCHECK_MODELS={env['CROSSCHECK_MODELS']!r} is not a mode: use demo (the "
            "default: real providers when their keys are set, the scripted model otherwise) "
            "or local (a small model built and served on this machine)"
        )
    if models == "local":
        env.update(_local_model_env(env))
    actor_provider = env.get("ACTOR_PROVIDER", "openai")
    critic_provider = env.get("CRITIC_PROVIDER", "anthropic")
    needed = [KEY_VARS.get(p, p) for p in dict.fromkeys((actor_provider, critic_provider))]
    missing = [var for var in needed if not env.get(var)]
    services = [
        s
        for s in SERVICES
        if (with_sandbox or s.name != "sandbox") and (with_console or s.name != "console")
    ]
    demo = bool(missing)
    if demo:
        fake_url = FAKEMODEL.url(env)
        env.update(
            {
                "OPENAI_API_KEY": DEMO_KEY,
                "OPENAI_BASE_URL": f"{fake_url}/v1",
                "ANTHROPIC_API_KEY": DEMO_KEY,
                "ANTHROPIC_BASE_URL": fake_url,
                "CROSSCHECK_DEMO": "1",
            }
        )
        services = [FAKEMODEL, *services]
    if models == "local":
        services = [LLAMASERVER, MODEL_ADAPTER, *services]
    if not env.get("CROSSCHECK_SERVICE_TOKEN"):
        env["CROSSCHECK_SERVICE_TOKEN"] = secrets.token_urlsafe(32)
    if not env.get("CROSSCHECK_ADMIN_TOKEN"):
        env["CROSSCHECK_ADMIN_TOKEN"] = "cc_admin_" + secrets.token_urlsafe(32)
    if not env.get("ORCHESTRATOR_WEBHOOK_SECRET"):  # signs runs' callback_url webhooks
        env["ORCHESTRATOR_WEBHOOK_SECRET"] = (
            "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        )
    by_name = {spec.name: spec for spec in SERVICES}
    for name in ("actor", "critic", "sandbox", "research"):
        env.setdefault(f"{name.upper()}_URL", by_name[name].url(env))
    # the orchestrator's research step calls the Research service `up` starts
    env.setdefault("ORCHESTRATOR_RESEARCH_URL", env["RESEARCH_URL"])
    env.setdefault("DATABASE_URL", "sqlite:///var/crosscheck.sqlite")
    follows = corpus_url_for(env["DATABASE_URL"])
    if follows and not env.get("RESEARCH_CORPUS_URL"):
        env["RESEARCH_CORPUS_URL"] = follows
    env.setdefault("CROSSCHECK_URL", by_name["orchestrator"].url(env))
    if with_console:
        env.setdefault("CROSSCHECK_CONSOLE_URL", by_name["console"].url(env))
    env.setdefault("CROSSCHECK_LOG_LEVEL", "INFO")
    if replicas != 1:
        services = _with_replicas(services, env, replicas)
    planned = Plan(
        env=env, services=services, demo=demo, missing_keys=missing, local=models == "local"
    )
    # what the orchestrator says (GET /v1/info, the console): always the mode `up` runs in
    env["ORCHESTRATOR_MODELS"] = planned.models
    return planned


def _local_model_env(env: dict[str, str]) -> dict[str, str]:
    """Actor (openai SDK) on llama-server's ``/v1``, Critic (anthropic SDK) on the adapter in
    front of it; any real key in the environment is replaced, never sent to a local server."""
    server, adapter = LLAMASERVER.url(env), MODEL_ADAPTER.url(env)
    return {
        **LOCAL_DEFAULTS,
        **{k: v for k, v in env.items() if k in LOCAL_DEFAULTS},  # what the user set wins
        "ACTOR_PROVIDER": "openai",
        "CRITIC_PROVIDER": "anthropic",
        "RESEARCH_PROVIDER": "openai",
        "OPENAI_API_KEY": LOCAL_KEY,
        "OPENAI_BASE_URL": f"{server}/v1",
        "ANTHROPIC_API_KEY": LOCAL_KEY,
        "ANTHROPIC_BASE_URL": adapter,
        "LOCALMODEL_ADAPTER_UPSTREAM_URL": f"{server}/v1",
    }


def corpus_url_for(database_url: str) -> str | None:
    """The research corpus follows a platform on Postgres into the same database (tables
    of its own); a SQLite platform keeps the corpus in its own SQLite file (None)."""
    if not database_url.startswith("postgresql"):
        return None
    return "postgresql://" + database_url.split("://", 1)[1]


REPLICA_PORT_STEP = 10
MAX_REPLICAS = 4
# Per replica: read-model pool + overflow + DBOS system pool (+2 control connections) = 22,
# so four replicas stay under Postgres's default max_connections of 100.
REPLICA_POOLS = (
    ("ORCHESTRATOR_DB_POOL_SIZE", "4"),
    ("ORCHESTRATOR_DB_MAX_OVERFLOW", "8"),
    ("ORCHESTRATOR_SYSTEM_DB_POOL_SIZE", "8"),
)


class PlanError(Exception):
    """What was asked for cannot run (said before anything starts)."""


def _with_replicas(services: list[ServiceSpec], env: dict[str, str], n: int) -> list[ServiceSpec]:
    """N orchestrators on one Postgres: ports 8000, 8010, 8020 ... (from ORCHESTRATOR_PORT),
    executor ids ``local``, ``local-2`` ... (stable, so each recovers its own work)."""
    if not 1 <= n <= MAX_REPLICAS:
        raise PlanError(f"--replicas must be between 1 and {MAX_REPLICAS}, not {n}")
    if not env["DATABASE_URL"].startswith("postgresql"):
        raise PlanError(
            "--replicas needs Postgres: set DATABASE_URL=postgresql://... "
            "(replicas share the database; one SQLite file cannot be shared by several)"
        )
    first = next(s for s in services if s.name == "orchestrator")
    base_port = first.port(env)
    base_id = env.get("ORCHESTRATOR_EXECUTOR_ID", "local")
    copies = [
        replace(
            first,
            name=f"orchestrator-{i + 1}",
            what=f"replica {i + 1} of {n}",
            overrides=(
                ("ORCHESTRATOR_PORT", str(base_port + REPLICA_PORT_STEP * i)),
                ("ORCHESTRATOR_EXECUTOR_ID", base_id if i == 0 else f"{base_id}-{i + 1}"),
                *((name, env.get(name, value)) for name, value in REPLICA_POOLS),
            ),
        )
        for i in range(n)
    ]
    at = services.index(first)
    return [*services[:at], *copies, *services[at + 1 :]]


# Every secret `up` knows of, and which services use which (anything else gets none).
PLATFORM_SECRETS = (
    "CROSSCHECK_ADMIN_TOKEN",
    "CROSSCHECK_SERVICE_TOKEN",
    "ORCHESTRATOR_WEBHOOK_SECRET",
    "ORCHESTRATOR_WEBHOOK_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "DATABASE_URL",
    "RESEARCH_CORPUS_URL",
    "REDIS_URL",
    "TAVILY_API_KEY",
    "BRAVE_API_KEY",
)
SECRETS_USED = {
    "orchestrator": {
        "CROSSCHECK_ADMIN_TOKEN",
        "CROSSCHECK_SERVICE_TOKEN",
        "ORCHESTRATOR_WEBHOOK_SECRET",
        "ORCHESTRATOR_WEBHOOK_KEY",
        "DATABASE_URL",
    },
    "actor": {"CROSSCHECK_SERVICE_TOKEN", "REDIS_URL"},  # + its provider's key
    "critic": {"CROSSCHECK_SERVICE_TOKEN", "REDIS_URL"},  # + its provider's key
    "sandbox": {"CROSSCHECK_SERVICE_TOKEN"},
    # + its distillation provider's key (RESEARCH_PROVIDER)
    "research": {
        "CROSSCHECK_SERVICE_TOKEN",
        "REDIS_URL",
        "RESEARCH_CORPUS_URL",
        "TAVILY_API_KEY",
        "BRAVE_API_KEY",
    },
}


def secrets_for(spec: ServiceSpec, env: dict[str, str]) -> set[str]:
    """The secrets a service is given: the orchestrator its tokens, webhook keys and the
    database; the Actor and the Critic the service token and the key of their own provider
    only; the Research service the service token, Redis, the web search keys and its
    distillation provider's key; the sandbox the service token; the console and the fake
    model nothing."""
    used = set(SECRETS_USED.get(spec.module, ()))  # by module: replicas are orchestrators
    if spec.module in DEFAULT_PROVIDERS:
        provider = env.get(f"{spec.module.upper()}_PROVIDER", DEFAULT_PROVIDERS[spec.module])
        used.add(KEY_VARS.get(provider, f"{provider.upper()}_API_KEY"))
    return used


def child_env(spec: ServiceSpec, env: dict[str, str]) -> dict[str, str]:
    """What a service inherits: only the secrets it uses (``secrets_for``); the sandbox
    gets nothing beyond its own variables, the locale and its token."""
    if spec.module == "sandbox":
        keep = (
            "PATH",
            "LANG",
            "LC_ALL",
            "HOME",
            "TMPDIR",
            "CROSSCHECK_SERVICE_TOKEN",
            "CROSSCHECK_LOG",
        )
        return {
            k: v for k, v in env.items() if k.startswith(("SANDBOX_", *keep)) and k != "SANDBOX_URL"
        }
    withheld = set(PLATFORM_SECRETS) - secrets_for(spec, env)
    return {k: v for k, v in env.items() if k not in withheld}


def private_file(path: Path) -> Path:
    """Create ``path`` (if missing) readable and writable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600))
    path.chmod(0o600)
    return path


def write_credentials(env: dict[str, str], directory: Path) -> Path:
    """Where `crosscheck run` finds the URL and token of the platform `up` started."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CREDENTIALS_FILE
    orchestrator = next(s for s in SERVICES if s.name == "orchestrator")
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    lines = [
        f"CROSSCHECK_URL={orchestrator.url(env)}",
        f"CROSSCHECK_TOKEN={env['CROSSCHECK_ADMIN_TOKEN']}",
        f"CROSSCHECK_SERVICE_TOKEN={env['CROSSCHECK_SERVICE_TOKEN']}",
    ]
    if env.get("CROSSCHECK_CONSOLE_URL"):  # where the Python client links escalations
        lines.append(f"CROSSCHECK_CONSOLE_URL={env['CROSSCHECK_CONSOLE_URL']}")
    if env.get("ORCHESTRATOR_WEBHOOK_SECRET"):  # what a run's callback_url receiver verifies
        lines.append(f"ORCHESTRATOR_WEBHOOK_SECRET={env['ORCHESTRATOR_WEBHOOK_SECRET']}")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Running:
    """One supervised service: its current process (replaced on restart) and its history."""

    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    state: str = "starting"  # starting | healthy | backoff | stopped
    restarts: int = 0
    failures: int = 0  # consecutive exits without a long healthy spell; sets the backoff
    last_exit: str | None = None
    started_at: float = field(default_factory=time.monotonic)
    healthy_since: float | None = None
    restart_at: float | None = None
    pump: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


def exit_status(code: int) -> str:
    """How a child ended, as an operator reads it."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def backoff_s(failures: int, *, initial_s: float = 0.5, cap_s: float = 30.0) -> float:
    """Delay before the next restart after ``failures`` consecutive exits: 0.5, 1, 2 ... 30 s."""
    return float(min(cap_s, initial_s * 2 ** max(0, failures - 1)))


_PR_SET_PDEATHSIG = 1


def _die_with_supervisor() -> Callable[[], None] | None:
    """A pre-exec hook: the child gets SIGTERM if ``crosscheck up`` itself dies (even by
    ``kill -9``), so no service outlives its supervisor as an orphan. Linux only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return hook


def _json_line(service: str, line: str) -> str:
    """Child output as one JSON log line: JSON lines pass through, anything else (Streamlit's
    banner, a traceback before logging is set up) is wrapped, and secrets are masked."""
    text = line.rstrip("\n")
    if text.startswith("{"):
        try:
            if isinstance(json.loads(text), dict):
                return scrub_text(text) + "\n"
        except ValueError:
            pass
    record = {
        "event": scrub_text(text),
        "service": service,
        "level": "info",
        "logger": "stdout",
        "timestamp": datetime.now(UTC).isoformat(),
    }
    return json.dumps(record) + "\n"


def _pump(service: str, source: IO[bytes], log_path: Path) -> None:
    with source, private_file(log_path).open("a", encoding="utf-8") as sink:
        for raw in iter(source.readline, b""):
            if not raw.strip():
                continue
            sink.write(_json_line(service, raw.decode("utf-8", errors="replace")))
            sink.flush()


class Supervisor:
    """Owns the child processes: starts them, restarts one that dies (with backoff, never
    touching the others), and stops them all, in reverse order, when asked."""

    def __init__(
        self,
        plan: Plan,
        log_dir: Path,
        *,
        state_path: Path | None = None,
        healthy_reset_s: float = 30.0,
    ) -> None:
        self.plan = plan
        self.log_dir = log_dir
        self.state_path = state_path
        self.healthy_reset_s = healthy_reset_s
        self.running: list[Running] = []
        self.events: list[str] = []  # what happened, for the terminal
        self.signals = 0  # SIGINT/SIGTERM/SIGHUP received: 1 = stop, 2+ = stop now
        register_secrets(
            plan.env[name]
            for name in (
                "CROSSCHECK_SERVICE_TOKEN",
                "CROSSCHECK_ADMIN_TOKEN",
                "ORCHESTRATOR_WEBHOOK_SECRET",
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
            )
            if plan.env.get(name) and plan.env[name] not in (DEMO_KEY, LOCAL_KEY)
        )

    # ------------------------------------------------------------ start
    def start(self, spec: ServiceSpec) -> Running:
        host, port = spec.host(self.plan.env), spec.port(self.plan.env)
        if not port_free(host, port):
            raise PortInUse(
                f"{spec.name} cannot listen on {host}:{port}: the port is in use "
                f"(another `crosscheck up` still running?). Stop it, or set {spec.env_prefix}PORT."
            )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.name}.log"
        running = Running(spec, self._spawn(spec, log_path), log_path)
        running.pump = self._start_pump(running)
        self.running.append(running)
        self._save()
        return running

    def _spawn(self, spec: ServiceSpec, log_path: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            spec.command(self.plan.env),
            env=spec.environment(self.plan.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us only; we stop the children in order
            preexec_fn=_die_with_supervisor(),
            umask=0o077,  # what the services create (databases, replay stores) is 0600
        )

    def _start_pump(self, running: Running) -> threading.Thread:
        assert running.process.stdout is not None
        pump = threading.Thread(
            target=_pump,
            args=(running.spec.name, running.process.stdout, running.log_path),
            name=f"log-{running.spec.name}",
            daemon=True,
        )
        pump.start()
        return pump

    def healthy(self, running: Running, timeout_s: float = 1.0) -> bool:
        url = f"{running.spec.url(self.plan.env)}{running.spec.health_path}"
        try:
            return httpx.get(url, timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, running: Running, timeout_s: float = 60.0) -> str | None:
        """None when healthy, else why not (the tail of its log says more)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.signals:
                return "interrupted"
            code = running.process.poll()
            if code is not None:
                return exit_status(code)
            if self.healthy(running):
                self._mark_healthy(running)
                return None
            time.sleep(0.1)
        return f"not healthy after {timeout_s:.0f} s"

    def _mark_healthy(self, running: Running) -> None:
        running.state = "healthy"
        running.healthy_since = time.monotonic()
        self._save()

    # ------------------------------------------------------------ watch and heal
    def dead(self) -> list[Running]:
        return [r for r in self.running if r.process.poll() is not None]

    def supervise(self) -> list[str]:
        """One pass: notice exits, restart what is due, check the ones coming up.
        Returns what happened, one line each."""
        now = time.monotonic()
        happened: list[str] = []
        for running in self.running:
            code = running.process.poll()
            if running.state in ("starting", "healthy") and code is not None:
                lived = now - (running.healthy_since or now)
                running.failures = 1 if lived >= self.healthy_reset_s else running.failures + 1
                running.last_exit = exit_status(code)
                running.state = "backoff"
                running.healthy_since = None
                delay = backoff_s(running.failures)
                running.restart_at = now + delay
                self._close(running)
                happened.append(
                    self._log(
                        running,
                        "service exited; restarting",
                        status=running.last_exit,
                        restart_in_s=round(delay, 2),
                    )
                )
            elif running.state == "backoff" and now >= (running.restart_at or now):
                spec = running.spec
                if not port_free(spec.host(self.plan.env), spec.port(self.plan.env)):
                    running.restart_at = now + 0.5  # its old socket is not released yet
                    continue
                running.process = self._spawn(spec, running.log_path)
                running.pump = self._start_pump(running)
                running.restarts += 1
                running.state = "starting"
                running.started_at = now
                happened.append(
                    self._log(
                        running, "service restarted", pid=running.pid, restarts=running.restarts
                    )
                )
            elif running.state == "starting" and code is None and self.healthy(running, 0.5):
                self._mark_healthy(running)
                happened.append(self._log(running, "service healthy again", pid=running.pid))
        if happened:
            self._save()
        return happened

    # ------------------------------------------------------------ stop
    def stop(self, grace_s: float = 8.0) -> None:
        """SIGTERM to every child (reverse order), then SIGKILL to whatever is left after
        ``grace_s``, or at once when a second signal arrived."""
        for running in reversed(self.running):
            running.state = "stopped"
            if running.process.poll() is None:
                self._signal(running, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.signals < 2:
            if all(r.process.poll() is not None for r in self.running):
                break
            time.sleep(0.05)
        for running in self.running:
            if running.process.poll() is None:
                self._signal(running, signal.SIGKILL)
        for running in self.running:
            running.process.wait()
            # the group too: anything a service started and left behind
            self._signal(running, signal.SIGKILL)
            self._close(running)
        self._save()

    @staticmethod
    def _signal(running: Running, signum: int) -> None:
        try:
            os.killpg(running.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    @staticmethod
    def _close(running: Running) -> None:
        if running.pump is not None:
            running.pump.join(timeout=2)
            running.pump = None

    # ------------------------------------------------------------ reporting
    def _log(self, running: Running, event: str, **fields: object) -> str:
        record = {
            "event": event,
            "service": running.spec.name,
            "level": "warning" if "exited" in event else "info",
            "logger": "crosscheck.supervisor",
            "timestamp": datetime.now(UTC).isoformat(),
            **fields,
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with private_file(self.log_dir / "supervisor.log").open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(record) + "\n")
        details = ", ".join(f"{k} {v}" for k, v in fields.items())
        return f"{running.spec.name}: {event} ({details})"

    def snapshot(self) -> dict[str, object]:
        return {
            "supervisor_pid": os.getpid(),
            "updated_at": datetime.now(UTC).isoformat(),
            "services": [
                {
                    "name": r.spec.name,
                    "url": r.spec.url(self.plan.env),
                    "health_path": r.spec.health_path,
                    "pid": r.pid,
                    "state": r.state,
                    "restarts": r.restarts,
                    "last_exit": r.last_exit,
                    "log": str(r.log_path),
                }
                for r in self.running
            ],
        }

    def _save(self) -> None:
        if self.state_path is None:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.state_path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.snapshot(), indent=2))
        scratch.replace(self.state_path)


class PortInUse(Exception):
    pass


def port_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""

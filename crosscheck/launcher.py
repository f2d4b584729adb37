"""Start every service on loopback as child processes, watch them, stop them together."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

DEMO_KEY = "demo-key-for-the-scripted-model"
KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    module: str
    env_prefix: str
    default_port: int
    what: str
    health_path: str = "/healthz"

    def command(self, env: dict[str, str]) -> list[str]:
        return [sys.executable, "-m", self.module]

    def host(self, env: dict[str, str]) -> str:
        return env.get(f"{self.env_prefix}HOST", "127.0.0.1")

    def port(self, env: dict[str, str]) -> int:
        return int(env.get(f"{self.env_prefix}PORT", self.default_port))

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
        ]


FAKEMODEL = ServiceSpec(
    "fakemodel", "fakemodel", "FAKEMODEL_", 8009, "scripted demo model (OpenAI + Anthropic)"
)
SERVICES = (
    ServiceSpec("actor", "actor", "ACTOR_", 8001, "drafts and revises"),
    ServiceSpec("critic", "critic", "CRITIC_", 8002, "structured critiques"),
    ServiceSpec("sandbox", "sandbox", "SANDBOX_", 8003, "runs generated code, isolated"),
    ServiceSpec("orchestrator", "orchestrator", "ORCHESTRATOR_", 8000, "runs API, events, loop"),
    ConsoleSpec("console", "console", "CONSOLE_", 8501, "reviewer console", "/_stcore/health"),
)
CREDENTIALS_FILE = "crosscheck.env"


@dataclass
class Plan:
    """What ``up`` will start and with which environment."""

    env: dict[str, str]
    services: list[ServiceSpec]
    demo: bool
    missing_keys: list[str] = field(default_factory=list)


def plan(base_env: dict[str, str], *, with_sandbox: bool = True, with_console: bool = True) -> Plan:
    env = dict(base_env)
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
    if not env.get("CROSSCHECK_SERVICE_TOKEN"):
        env["CROSSCHECK_SERVICE_TOKEN"] = secrets.token_urlsafe(32)
    if not env.get("CROSSCHECK_ADMIN_TOKEN"):
        env["CROSSCHECK_ADMIN_TOKEN"] = "cc_admin_" + secrets.token_urlsafe(32)
    by_name = {spec.name: spec for spec in SERVICES}
    for name in ("actor", "critic", "sandbox"):
        env.setdefault(f"{name.upper()}_URL", by_name[name].url(env))
    env.setdefault("DATABASE_URL", "sqlite:///var/crosscheck.sqlite")
    env.setdefault("CROSSCHECK_URL", by_name["orchestrator"].url(env))
    env.setdefault("CROSSCHECK_LOG_LEVEL", "INFO")
    return Plan(env=env, services=services, demo=demo, missing_keys=missing)


def child_env(spec: ServiceSpec, env: dict[str, str]) -> dict[str, str]:
    """The sandbox gets no provider keys and no service secrets beyond its own token."""
    if spec.name != "sandbox":
        return env
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


def write_credentials(env: dict[str, str], directory: Path) -> Path:
    """Where `crosscheck run` finds the URL and token of the platform `up` started."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CREDENTIALS_FILE
    orchestrator = next(s for s in SERVICES if s.name == "orchestrator")
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(
        f"CROSSCHECK_URL={orchestrator.url(env)}\n"
        f"CROSSCHECK_TOKEN={env['CROSSCHECK_ADMIN_TOKEN']}\n"
        f"CROSSCHECK_SERVICE_TOKEN={env['CROSSCHECK_SERVICE_TOKEN']}\n"
    )
    return path


@dataclass
class Running:
    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    log_path: Path


class Supervisor:
    """Owns the child processes: start, wait until healthy, watch, stop in reverse order."""

    def __init__(self, plan: Plan, log_dir: Path) -> None:
        self.plan = plan
        self.log_dir = log_dir
        self.running: list[Running] = []

    def start(self, spec: ServiceSpec) -> Running:
        host, port = spec.host(self.plan.env), spec.port(self.plan.env)
        if not port_free(host, port):
            raise PortInUse(
                f"{spec.name} cannot listen on {host}:{port}: the port is in use "
                f"(another `crosscheck up` still running?). Stop it, or set {spec.env_prefix}PORT."
            )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.name}.log"
        log_file = log_path.open("ab")
        process = subprocess.Popen(
            spec.command(self.plan.env),
            env=child_env(spec, self.plan.env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us only; we stop the children in order
        )
        log_file.close()
        running = Running(spec, process, log_path)
        self.running.append(running)
        return running

    def wait_healthy(self, running: Running, timeout_s: float = 60.0) -> str | None:
        """None when healthy, else why not (the tail of its log says more)."""
        url = f"{running.spec.url(self.plan.env)}{running.spec.health_path}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = running.process.poll()
            if code is not None:
                return f"exited with code {code}"
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return f"not healthy after {timeout_s:.0f} s"

    def dead(self) -> list[Running]:
        return [r for r in self.running if r.process.poll() is not None]

    def stop(self, grace_s: float = 8.0) -> None:
        for running in reversed(self.running):
            if running.process.poll() is None:
                running.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for running in reversed(self.running):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                running.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                os.killpg(running.process.pid, signal.SIGKILL)
                running.process.wait()


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

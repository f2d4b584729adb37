"""docker-compose.yml (and the demo override), checked without a Docker engine.

The file is validated against the vendored Compose Specification schema
(infra/compose-spec.json), then against what matters here: health checks, builds that point
at real Dockerfiles and packages (or pinned official images), the sandbox's hardening, where
provider keys and the other secrets may go, each orchestrator replica's wiring to its peers and
to Postgres, the replicas' identities, the reverse proxy in front of them (with its nginx.conf,
tests/infra/_nginx.py), and that nothing listens beyond 127.0.0.1. Each check returns a list
of problems; the tests assert the real file has none and that deliberately broken copies of it
do have some.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

import pytest
import yaml
from jsonschema.validators import validator_for

from orchestrator.settings import OrchestratorSettings
from tests.infra import _nginx
from tests.infra._support import (
    COMPOSE_FILE,
    COMPOSE_SCHEMA,
    DEMO_OVERRIDE,
    ENTRYPOINT_SCRIPTS,
    PROVIDER_ENV,
    PROVIDER_SERVICES,
    REPO,
    SECRET_NAME,
    console_spec,
    exec_form,
    healthcheck_arguments,
    is_root_user,
    load_dockerfile,
    member_for_package,
    package_dir,
    served_package,
)

# The API runs as replicas of one service, `orchestrator-<n>`, behind `proxy`. Whatever holds
# for "orchestrator" below (the secrets it gets, its package) holds for every replica.
ORCHESTRATOR = "orchestrator"
REPLICA_NAME = re.compile(r"^orchestrator-(\d+)$")
REPLICAS = ("orchestrator-1", "orchestrator-2")
PROXY = "proxy"
REQUIRED_SERVICES = {
    "actor",
    "critic",
    "research",
    "sandbox",
    "fakemodel",
    *REPLICAS,
    PROXY,
    "postgres",
    "console",
}
TOKEN_SERVICES = {"actor", "critic", "research", "sandbox", ORCHESTRATOR}
DEMO_ONLY = {"fakemodel"}
# What identifies one replica; everything else the replicas must share.
REPLICA_IDENTITY = ("ORCHESTRATOR_EXECUTOR_ID", "ORCHESTRATOR_ADVERTISE_URL")
# The settings' own rule for an executor id (orchestrator.settings).
EXECUTOR_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
API_PORT = "8000"  # the host port the API is published on, by the proxy alone
NGINX_CONF_TARGET = "/etc/nginx/nginx.conf"
POSTGRES_MAX_CONNECTIONS = 100  # the server's default, unless its command sets another


class OfficialImage(NamedTuple):
    """A third-party service: an official image at a pinned tag, probed by its own tool."""

    image: re.Pattern[str]
    probe: str


# Alpine only: the compose file runs it as Alpine's postgres uid (70), Debian's is 999.
IMAGE_SERVICES = {
    "postgres": OfficialImage(
        re.compile(r"^postgres:1[56](\.\d+)?-alpine(3\.\d+)?(@sha256:[0-9a-f]{64})?$"),
        "pg_isready",
    ),
    # nginx >= 1.28 (stable): the open-source `resolve` of upstream servers (1.27.3) is used.
    # Alpine: its busybox `wget` is the health probe (the image has no curl).
    PROXY: OfficialImage(
        re.compile(
            r"^nginx:1\.(2[89]|[3-9]\d)(\.\d+)?-alpine(3\.\d+)?(-slim)?(@sha256:[0-9a-f]{64})?$"
        ),
        "wget",
    ),
}
NGINX_UID = "101"  # the `nginx` user of the official Alpine image
POSTGRES_UID = "70"
POSTGRES_DATA = "/var/lib/postgresql/data"
# The secrets compose must refuse to start without (`${NAME:?...}`, never a default), with the
# services that hold one as a variable of that name and the services that may see it at all.
REQUIRED_SECRETS: dict[str, tuple[set[str], set[str]]] = {
    "CROSSCHECK_SERVICE_TOKEN": (TOKEN_SERVICES, TOKEN_SERVICES),
    "CROSSCHECK_ADMIN_TOKEN": ({ORCHESTRATOR}, {ORCHESTRATOR}),
    "POSTGRES_PASSWORD": ({"postgres"}, {"postgres", ORCHESTRATOR}),
}
DATABASE_SERVICES = {ORCHESTRATOR}  # the only ones given DATABASE_URL
# The orchestrator's peers: service -> the variable holding its URL.
ORCHESTRATOR_PEERS = {"actor": "ACTOR_URL", "critic": "CRITIC_URL", "sandbox": "SANDBOX_URL"}
EGRESS = "egress"  # the network for calling model providers
HEALTHCHECK_SCRIPT = "/opt/crosscheck/healthcheck.py"
# What bubblewrap's user namespaces and fresh /proc need inside Docker (infra/README.md).
SANDBOX_SECURITY_OPT = {
    "no-new-privileges:true",
    "seccomp=unconfined",
    "apparmor=unconfined",
    "systempaths=unconfined",
}
REQUIRED_TOKEN = re.compile(r"^\$\{CROSSCHECK_SERVICE_TOKEN:\?[^}]+\}$")
INTERPOLATED = re.compile(r"^\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}$")
# A variable reference in a value: ${NAME<modifier>} or $NAME ($$ is a literal dollar).
REFERENCE = re.compile(
    r"\$\$|\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<modifier>[^}]*)\}|\$(?P<bare>[A-Za-z_]\w*)"
)
DATABASE_URL = re.compile(
    r"^postgresql(\+psycopg)?://(?P<user>[^:@/]+):(?P<password>\$\{[^}]+\}|[^@]*)"
    r"@(?P<host>[^:/@]+):(?P<port>\d+)/(?P<db>[^/?#]+)$"
)

Doc = dict[str, Any]


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(COMPOSE_SCHEMA.read_text())
    return schema


def load_yaml(path) -> Doc:
    doc: Doc = yaml.safe_load(path.read_text())
    return doc


def compose() -> Doc:
    """A fresh copy of docker-compose.yml (YAML anchors and merge keys resolved). The JSON
    round trip unshares what the anchors share: mutating one replica leaves the other alone."""
    doc: Doc = json.loads(json.dumps(load_yaml(COMPOSE_FILE)))
    return doc


def services(doc: Doc) -> dict[str, Doc]:
    return doc.get("services") or {}


def role(name: str) -> str:
    """What a service is: ``orchestrator`` for each replica, else its own name."""
    return ORCHESTRATOR if REPLICA_NAME.match(name) else name


def replicas(doc: Doc) -> dict[str, Doc]:
    """The orchestrator replicas, in order of their number."""
    found = {name: s for name, s in services(doc).items() if REPLICA_NAME.match(name)}
    return dict(sorted(found.items(), key=lambda item: int(item[0].rpartition("-")[2])))


def published_ports(service: Doc) -> list[tuple[str | None, str, str]]:
    """(host_ip, published default, target) of each published port."""
    found = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            published = str(port.get("published", ""))
            host_ip, target = port.get("host_ip"), str(port.get("target"))
        else:
            parts = str(port).split(":")
            host_ip = parts[0] if len(parts) == 3 else None
            published = parts[-2] if len(parts) >= 2 else ""
            target = parts[-1].split("/")[0]
        default = re.fullmatch(r"\$\{[A-Z0-9_]+:-(\d+)\}", published)
        found.append((host_ip, default.group(1) if default else published, target))
    return found


def environment(service: Doc) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return {k: v for k, _, v in (item.partition("=") for item in env)}
    return {k: None if v is None else str(v) for k, v in env.items()}


def internal_networks(doc: Doc) -> set[str]:
    return {
        name
        for name, network in (doc.get("networks") or {}).items()
        if (network or {}).get("internal") is True
    }


def attached_networks(service: Doc) -> set[str]:
    networks = service.get("networks")
    if networks is None:
        return {"default"}
    return set(networks)


def depends_on(service: Doc) -> dict[str, str]:
    """Dependency -> condition (the short list syntax means service_started)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {str(name): "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def volume_mounts(service: Doc) -> list[tuple[str, str | None, str]]:
    """(type, source, target) of each volume, short or long syntax."""
    mounts: list[tuple[str, str | None, str]] = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.append(
                (str(volume.get("type")), volume.get("source"), str(volume.get("target")))
            )
            continue
        parts = str(volume).split(":")
        if len(parts) == 1:
            mounts.append(("volume", None, parts[0]))  # anonymous volume
            continue
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith(("/", ".", "~", "$")) else "volume"
        mounts.append((kind, source, target))
    return mounts


def read_only_config_mount(service: Doc, mount: tuple[str, str | None, str]) -> bool:
    """A bind mount the hardening allows: one file of ours from infra/, mounted read-only
    (the proxy's nginx.conf). Anything else from the host (a directory, a writable file, a
    path outside infra/) is refused."""
    kind, source, target = mount
    if kind != "bind" or not source or not source.startswith("./infra/") or ".." in source:
        return False
    if not (REPO / source).is_file():
        return False
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            if volume.get("source") == source and str(volume.get("target")) == target:
                return volume.get("read_only") is True
        elif str(volume).split(":")[:2] == [source, target]:
            return str(volume).split(":")[2:3] == ["ro"]
    return False


def required(name: str, value: str | None) -> bool:
    """``value`` is exactly ``${name:?message}``: compose refuses to start without it."""
    return re.fullmatch(rf"\$\{{{name}:\?[^}}]+\}}", value or "") is not None


def references(value: str | None) -> list[tuple[str, str]]:
    """(name, modifier) of each variable a value interpolates; ``$NAME`` has modifier ``$``."""
    found = []
    for match in REFERENCE.finditer(value or ""):
        if match.group("braced"):
            found.append((match.group("braced"), match.group("modifier")))
        elif match.group("bare"):
            found.append((match.group("bare"), "$"))
    return found


def healthcheck_port_variable(service: Doc) -> str | None:
    arguments = healthcheck_arguments_of(service)
    return arguments[0] if arguments else None


def healthcheck_arguments_of(service: Doc) -> tuple[str, str] | None:
    """(port variable, path) the service's healthcheck.py probe reads."""
    test = (service.get("healthcheck") or {}).get("test")
    if isinstance(test, list):
        return healthcheck_arguments([str(word) for word in test], HEALTHCHECK_SCRIPT)
    return None


# --------------------------------------------------------------------------------- checks
def schema_problems(doc: Doc) -> list[str]:
    validator = validator_for(_schema())(_schema())
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator.iter_errors(doc)
    ]


def service_set_problems(doc: Doc) -> list[str]:
    problems = []
    missing = REQUIRED_SERVICES - set(services(doc))
    if missing:
        problems.append(f"services missing: {sorted(missing)}")
    for name, service in services(doc).items():
        profiles = service.get("profiles") or []
        if name in DEMO_ONLY and profiles != ["demo"]:
            problems.append(f"{name}: should run only in the demo profile, has {profiles}")
        if name not in DEMO_ONLY and profiles:
            problems.append(f"{name}: in profiles {profiles}, so a plain `up` would not start it")
    return problems


def healthcheck_problems(doc: Doc) -> list[str]:
    problems = []
    for name, service in services(doc).items():
        health = service.get("healthcheck")
        if not health or health.get("disable") in (True, "true"):
            problems.append(f"{name}: no healthcheck")
            continue
        test = health.get("test")
        if not isinstance(test, list) or test[:1] not in (["CMD"], ["CMD-SHELL"]):
            problems.append(f"{name}: healthcheck test {test!r} is not a CMD list")
            continue
        if name in IMAGE_SERVICES:
            probe = IMAGE_SERVICES[name].probe
            if test[:2] != ["CMD", probe]:
                problems.append(f"{name}: healthcheck {test!r} does not run {probe}")
            continue
        variable = healthcheck_port_variable(service)
        if variable is None:
            problems.append(f"{name}: healthcheck does not run {HEALTHCHECK_SCRIPT}")
        elif not (environment(service).get(variable) or "").isdigit():
            problems.append(f"{name}: healthcheck reads {variable}, which its environment lacks")
    return problems


def build_problems(doc: Doc) -> list[str]:
    """Each service builds from a Dockerfile that exists, into a `python -m <pkg>` that exists;
    the third-party ones run their official image at a pinned tag instead."""
    problems = []
    for name, service in services(doc).items():
        if name in IMAGE_SERVICES:
            image = str(service.get("image") or "")
            if "build" in service:
                problems.append(f"{name}: is built here instead of run from its official image")
            if not IMAGE_SERVICES[name].image.match(image):
                problems.append(
                    f"{name}: image {image!r} is not the official one at a pinned version "
                    f"({IMAGE_SERVICES[name].image.pattern})"
                )
            continue
        build = service.get("build")
        if not isinstance(build, dict):
            problems.append(f"{name}: no build mapping (context + dockerfile)")
            continue
        if build.get("context") not in (".", "./"):
            problems.append(f"{name}: build context {build.get('context')!r} is not the repo root")
        dockerfile = REPO / build.get("dockerfile", "Dockerfile")
        if not dockerfile.is_file():
            problems.append(f"{name}: Dockerfile {build.get('dockerfile')!r} does not exist")
            continue
        df = load_dockerfile(dockerfile)
        target = build.get("target")
        stage = df.stage(target) if target else (df.stages[-1] if df.stages else None)
        if stage is None:
            problems.append(f"{name}: {dockerfile.name} has no stage {target!r}")
            continue
        entrypoint = service.get("entrypoint")
        if entrypoint is None:
            found = df.effective(stage, "ENTRYPOINT")
            entrypoint = exec_form(found.args) if found else None
        module = served_package(entrypoint if isinstance(entrypoint, list) else None)
        if module is None:
            problems.append(
                f"{name}: entrypoint {entrypoint!r} is neither python -m <pkg> nor one of "
                f"the scripts {sorted(ENTRYPOINT_SCRIPTS)}"
            )
            continue
        member = member_for_package(module)
        if member is None or not (package_dir(member, module) / "__init__.py").is_file():
            problems.append(f"{name}: runs python -m {module}, which no workspace member ships")
        elif role(name) != module:
            problems.append(f"{name}: builds the {module!r} service")
    return problems


def restart_problems(doc: Doc) -> list[str]:
    return [
        f"{name}: restart is {service.get('restart')!r}, not unless-stopped"
        for name, service in services(doc).items()
        if service.get("restart") != "unless-stopped"
    ]


def token_problems(doc: Doc) -> list[str]:
    """The service token is required (``${CROSSCHECK_SERVICE_TOKEN:?...}``), never defaulted."""
    problems = []
    for name, service in services(doc).items():
        value = environment(service).get("CROSSCHECK_SERVICE_TOKEN")
        if value is None:
            if role(name) in TOKEN_SERVICES:
                problems.append(f"{name}: no CROSSCHECK_SERVICE_TOKEN")
            continue
        if not REQUIRED_TOKEN.match(value):
            problems.append(f"{name}: CROSSCHECK_SERVICE_TOKEN is {value!r}, not ${{...:?...}}")
    return problems


def provider_problems(doc: Doc, *, allow_literals: bool = False) -> list[str]:
    """Provider keys and endpoints reach the actor and critic only, and come from the env."""
    problems = []
    for name, service in services(doc).items():
        env = environment(service)
        provider_vars = sorted(k for k in env if PROVIDER_ENV.search(k))
        if name not in PROVIDER_SERVICES:
            if provider_vars:
                problems.append(f"{name}: gets provider settings {provider_vars}")
            if service.get("env_file"):
                problems.append(f"{name}: env_file could carry provider keys into it")
            if service.get("secrets"):
                problems.append(f"{name}: is given secrets {service['secrets']}")
        for key, value in env.items():
            if not SECRET_NAME.search(key) or allow_literals:
                continue
            if value is None or not INTERPOLATED.match(value):
                problems.append(f"{name}: {key} is a literal, not taken from the environment")
            elif key.endswith("_API_KEY") and not value.startswith(f"${{{key}:-"):
                problems.append(f"{name}: optional {key} should be ${{{key}:-}}, is {value!r}")
    return problems


def secret_problems(doc: Doc) -> list[str]:
    """The required secrets: always ``${NAME:?...}``, and only where they are needed."""
    problems = []
    for name, service in services(doc).items():
        env = environment(service)
        for secret, (holders, _) in REQUIRED_SECRETS.items():
            if secret not in env and role(name) in holders:
                problems.append(f"{name}: no {secret}")
            if secret in env and role(name) not in holders:
                problems.append(f"{name}: is given {secret}")
        for key, value in env.items():
            if key in REQUIRED_SECRETS and not required(key, value):
                problems.append(f"{name}: {key} is {value!r}, not ${{{key}:?...}}")
            for secret, modifier in references(value):
                if secret not in REQUIRED_SECRETS:
                    continue
                if role(name) not in REQUIRED_SECRETS[secret][1]:
                    problems.append(f"{name}: {key} interpolates {secret}")
                if not re.fullmatch(r":\?.+", modifier):
                    problems.append(
                        f"{name}: {key} uses {secret} without :? (compose would not "
                        "refuse to start without it)"
                    )
    return problems


def database_problems(doc: Doc) -> list[str]:
    """Postgres: official, internal-only, on a named volume, password-protected, probed over
    TCP; only the orchestrator replicas get a DATABASE_URL, which points at it and waits for
    it."""
    postgres = services(doc).get("postgres")
    if postgres is None:
        return ["no postgres service"]
    problems = []
    env = environment(postgres)
    user, db = env.get("POSTGRES_USER"), env.get("POSTGRES_DB")
    if user != "crosscheck" or db != "crosscheck":
        problems.append(f"postgres: POSTGRES_USER/POSTGRES_DB are {user!r}/{db!r}, not crosscheck")
    if env.get("POSTGRES_HOST_AUTH_METHOD") not in (None, "scram-sha-256"):
        problems.append(f"postgres: POSTGRES_HOST_AUTH_METHOD {env['POSTGRES_HOST_AUTH_METHOD']!r}")
    if str(postgres.get("user", "")).split(":")[0] != POSTGRES_UID:
        problems.append(
            f"postgres: user {postgres.get('user')!r} is not the image's {POSTGRES_UID}"
        )
    if postgres.get("ports") or postgres.get("expose"):
        problems.append("postgres: publishes or exposes ports")
    if outside := attached_networks(postgres) - internal_networks(doc):
        problems.append(f"postgres: joins non-internal networks {sorted(outside)}")
    declared = set(doc.get("volumes") or {})
    data = [m for m in volume_mounts(postgres) if m[2].rstrip("/") == POSTGRES_DATA]
    if not data:
        problems.append(f"postgres: nothing mounted on {POSTGRES_DATA} (data lost on recreate)")
    for kind, source, _ in data:
        if kind != "volume" or source not in declared:
            problems.append(
                f"postgres: {POSTGRES_DATA} is on {kind} {source!r}, not a named volume"
            )
    test = (postgres.get("healthcheck") or {}).get("test") or []
    if not any(str(a).startswith(("--host=", "-h")) for a in test):
        problems.append("postgres: pg_isready probes the socket (ready during initdb); give --host")

    for name, service in services(doc).items():
        url = environment(service).get("DATABASE_URL")
        if url is None:
            if role(name) in DATABASE_SERVICES:
                problems.append(f"{name}: no DATABASE_URL")
            continue
        if role(name) not in DATABASE_SERVICES:
            problems.append(f"{name}: is given DATABASE_URL")
            continue
        match = DATABASE_URL.match(url)
        if match is None:
            problems.append(
                f"{name}: DATABASE_URL {url!r} is not postgresql://user:pw@host:port/db"
            )
            continue
        if not required("POSTGRES_PASSWORD", match.group("password")):
            problems.append(f"{name}: DATABASE_URL's password is not ${{POSTGRES_PASSWORD:?...}}")
        expected = {"user": user, "host": "postgres", "port": "5432", "db": db}
        for part, value in expected.items():
            if match.group(part) != value:
                problems.append(
                    f"{name}: DATABASE_URL {part} is {match.group(part)!r}, not {value!r}"
                )
        if depends_on(service).get("postgres") != "service_healthy":
            problems.append(f"{name}: does not wait for postgres to be healthy")
    return problems


def orchestrator_problems(doc: Doc) -> list[str]:
    """Each replica reaches its peers by service name, waits for them, has an admin, and is
    reached only through the proxy: on internal networks alone, publishing nothing."""
    if not replicas(doc):
        return ["no orchestrator replica (orchestrator-<n>)"]
    problems = []
    internal = internal_networks(doc)
    for name, orchestrator in replicas(doc).items():
        env = environment(orchestrator)
        for peer, variable in ORCHESTRATOR_PEERS.items():
            peer_service = services(doc).get(peer) or {}
            port = environment(peer_service).get(f"{peer.upper()}_PORT")
            if env.get(variable) != f"http://{peer}:{port}":
                problems.append(
                    f"{name}: {variable} is {env.get(variable)!r}, not http://{peer}:{port}"
                )
            if depends_on(orchestrator).get(peer) not in ("service_started", "service_healthy"):
                problems.append(f"{name}: does not depend on {peer}")
            if not attached_networks(orchestrator) & attached_networks(peer_service) & internal:
                problems.append(f"{name}: shares no internal network with {peer}")
        if not env.get("ORCHESTRATOR_EXECUTOR_ID"):
            problems.append(f"{name}: no ORCHESTRATOR_EXECUTOR_ID (stable per replica)")
        if "CROSSCHECK_ADMIN_TOKEN" not in env:
            problems.append(f"{name}: no CROSSCHECK_ADMIN_TOKEN (nobody could mint tokens)")
        if orchestrator.get("ports"):
            problems.append(f"{name}: publishes ports (the API is reached through {PROXY})")
        if outside := attached_networks(orchestrator) - internal:
            problems.append(f"{name}: joins non-internal networks {sorted(outside)}")
    return problems


def _without_identity(service: Doc) -> Doc:
    shared = copy.deepcopy(service)
    env = shared.get("environment")
    if isinstance(env, dict):
        for key in REPLICA_IDENTITY:
            env.pop(key, None)
    return shared


def _pinned_default(value: str | None) -> str | None:
    """A literal, or ``${VAR:-default}``: the value it has unless the operator sets one."""
    if value is None or not value.strip():
        return None
    match = re.fullmatch(r"\$\{[A-Z0-9_]+:-([^}]*)\}", value)
    if match:
        return match.group(1) or None
    return None if "$" in value else value


def _postgres_max_connections(doc: Doc) -> int:
    command = (services(doc).get("postgres") or {}).get("command") or []
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    for word in words:
        if word.startswith("max_connections="):
            return int(word.partition("=")[2])
    return POSTGRES_MAX_CONNECTIONS


def _connections_per_replica(env: dict[str, str | None]) -> int:
    """What one replica may hold open (orchestrator.settings: pool + overflow + DBOS + 2)."""
    fields = OrchestratorSettings.model_fields
    total = 2
    for setting in ("db_pool_size", "db_max_overflow", "system_db_pool_size"):
        value = env.get(f"ORCHESTRATOR_{setting.upper()}")
        total += int(value) if value is not None else int(fields[setting].default)
    return total


def replica_problems(doc: Doc) -> list[str]:
    """At least two replicas of one definition: each with its own stable executor id, all with
    the same pinned application version and the same database, fitting its connections."""
    found = replicas(doc)
    if len(found) < 2:
        return [f"{len(found)} orchestrator replica(s): nothing takes over when one dies"]
    problems = []
    ids: dict[str, str] = {}
    for name, service in found.items():
        env = environment(service)
        executor = env.get("ORCHESTRATOR_EXECUTOR_ID") or ""
        if not EXECUTOR_ID.fullmatch(executor):
            problems.append(
                f"{name}: ORCHESTRATOR_EXECUTOR_ID {executor!r} is not a fixed, valid id "
                "(it must stay the same across restarts of the replica)"
            )
        if executor in ids:
            problems.append(
                f"{name}: ORCHESTRATOR_EXECUTOR_ID {executor!r} is {ids[executor]}'s too"
            )
        ids[executor] = name
        port = env.get("ORCHESTRATOR_PORT")
        advertised = env.get("ORCHESTRATOR_ADVERTISE_URL")
        if advertised is not None and advertised != f"http://{name}:{port}":
            problems.append(f"{name}: ORCHESTRATOR_ADVERTISE_URL {advertised!r} is another's")
        if _pinned_default(env.get("ORCHESTRATOR_APPLICATION_VERSION")) is None:
            problems.append(
                f"{name}: ORCHESTRATOR_APPLICATION_VERSION is not pinned (pending runs are "
                "recovered only by the same version)"
            )
    first_name, first = next(iter(found.items()))
    for key in ("ORCHESTRATOR_APPLICATION_VERSION", "DATABASE_URL"):
        values = {name: environment(service).get(key) for name, service in found.items()}
        if len(set(values.values())) != 1:
            problems.append(f"the replicas differ in {key}: {values}")
    reference = _without_identity(first)
    for name, service in list(found.items())[1:]:
        other = _without_identity(service)
        for key in sorted(set(reference) | set(other)):
            if reference.get(key) != other.get(key):
                problems.append(f"{name}: {key} differs from {first_name}'s (one anchor for all)")
    needed = sum(_connections_per_replica(environment(s)) for s in found.values())
    available = _postgres_max_connections(doc)
    if needed > available:
        problems.append(
            f"the replicas may open {needed} Postgres connections, max_connections is {available}"
        )
    return problems


def _duration(value: Any) -> float:
    """A compose duration (``90s``, ``1m30s``, ``500ms``) in seconds; 0 when unset."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|ns|h|m|s)", str(value or ""))
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6, "ns": 1e-9}
    return sum(float(number) * units[unit] for number, unit in parts)


def _proxy_config(doc: Doc) -> tuple[_nginx.Config | None, list[str]]:
    """The proxy's nginx.conf, read from the file its service mounts."""
    proxy = services(doc).get(PROXY) or {}
    mounts = [m for m in volume_mounts(proxy) if m[2] == NGINX_CONF_TARGET]
    if len(mounts) != 1:
        return None, [f"{PROXY}: no config mounted on {NGINX_CONF_TARGET}"]
    mount = mounts[0]
    if not read_only_config_mount(proxy, mount):
        return None, [f"{PROXY}: {mount[1]!r} is not a read-only bind of a file in infra/"]
    try:
        return _nginx.parse((REPO / str(mount[1])).read_text()), []
    except ValueError as exc:
        return None, [f"{PROXY}: {mount[1]}: {exc}"]


def proxy_problems(doc: Doc) -> list[str]:
    """The reverse proxy: the only way in to the API, in front of every replica."""
    proxy = services(doc).get(PROXY)
    if proxy is None:
        return [f"no {PROXY} service"]
    config, problems = _proxy_config(doc)
    if config is None:
        return problems
    listen = _nginx.listen_port(config)
    targets = {
        name: int(environment(service).get("ORCHESTRATOR_PORT") or 0)
        for name, service in replicas(doc).items()
    }
    problems += [
        f"{PROXY}: nginx.conf: {p}" for p in _nginx.config_problems(config, replicas=targets)
    ]
    ports = published_ports(proxy)
    if [(host_ip, published) for host_ip, published, _ in ports] != [("127.0.0.1", API_PORT)]:
        problems.append(f"{PROXY}: does not publish the API on 127.0.0.1:{API_PORT} ({ports})")
    for _, _, target in ports:
        if target != str(listen):
            problems.append(f"{PROXY}: publishes {target}, nginx listens on {listen}")
    for name, service in services(doc).items():
        if name != PROXY and any(
            published == API_PORT for _, published, _ in published_ports(service)
        ):
            problems.append(f"{name}: publishes {API_PORT}, the API's port (the proxy's alone)")
    probe = [str(word) for word in (proxy.get("healthcheck") or {}).get("test") or []]
    urls = [w for w in probe if w.startswith("http://")]
    if urls != [f"http://127.0.0.1:{listen}/healthz"]:
        problems.append(f"{PROXY}: healthcheck {probe} does not fetch /healthz through nginx")
    replica_start = max(
        (
            _duration((s.get("healthcheck") or {}).get("start_period"))
            for s in replicas(doc).values()
        ),
        default=0,
    )
    if _duration((proxy.get("healthcheck") or {}).get("start_period")) <= replica_start:
        problems.append(
            f"{PROXY}: healthcheck start_period is not longer than the replicas' "
            f"({replica_start} s): it would turn unhealthy, and fail the console's start, "
            "while they migrate"
        )
    if "--spider" in probe:
        problems.append(f"{PROXY}: wget --spider may send HEAD, which /healthz does not answer")
    if str(proxy.get("user", "")).split(":")[0] != NGINX_UID:
        problems.append(
            f"{PROXY}: user {proxy.get('user')!r} is not the image's nginx ({NGINX_UID})"
        )
    tmpfs = proxy.get("tmpfs") or []
    tmpfs = [tmpfs] if isinstance(tmpfs, str) else tmpfs
    if not any(t == "/tmp" or t.startswith("/tmp:") for t in tmpfs):
        problems.append(f"{PROXY}: no tmpfs on /tmp (its pid and temporary files live there)")
    internal = internal_networks(doc)
    for name, service in replicas(doc).items():
        if depends_on(proxy).get(name) not in ("service_started", "service_healthy"):
            problems.append(f"{PROXY}: does not depend on {name}")
        if not attached_networks(proxy) & attached_networks(service) & internal:
            problems.append(f"{PROXY}: shares no internal network with {name}")
    for key in ("entrypoint", "command"):
        if key in proxy:
            problems.append(f"{PROXY}: overrides the image's {key}")
    if secrets := sorted(
        k for k in environment(proxy) if SECRET_NAME.search(k) or k == "DATABASE_URL"
    ):
        problems.append(f"{PROXY}: is given {secrets}")
    return problems


def console_problems(doc: Doc) -> list[str]:
    """The reviewer console: the image's (= the launcher's) command line on the launcher's port
    and health path, pointed at the API's proxy it waits for, holding no secret."""
    console = services(doc).get("console")
    if console is None:
        return ["no console service"]
    launcher = console_spec()
    problems = []
    env = environment(console)
    port_variable = f"{launcher.env_prefix}PORT"
    if env.get(port_variable) != str(launcher.default_port):
        problems.append(
            f"console: {port_variable} is {env.get(port_variable)!r}, the launcher's port is "
            f"{launcher.default_port}"
        )
    expected = (port_variable, launcher.health_path)
    if healthcheck_arguments_of(console) != expected:
        problems.append(f"console: healthcheck does not probe {expected}")
    for key in ("entrypoint", "command"):
        if key in console:
            problems.append(f"console: overrides the image's {key} (the launcher's command line)")
    # The API through the proxy, never one replica directly.
    proxy = services(doc).get(PROXY) or {}
    config, _ = _proxy_config(doc)
    api = f"http://{PROXY}:{_nginx.listen_port(config) if config else None}"
    if env.get("CROSSCHECK_URL") != api:
        problems.append(f"console: CROSSCHECK_URL is {env.get('CROSSCHECK_URL')!r}, not {api}")
    if depends_on(console).get(PROXY) != "service_healthy":
        problems.append("console: does not wait for the proxy to be healthy")
    if bypass := sorted(set(depends_on(console)) & set(replicas(doc))):
        problems.append(f"console: depends on {bypass} directly, not on the proxy")
    if not attached_networks(console) & attached_networks(proxy) & internal_networks(doc):
        problems.append("console: shares no internal network with the proxy")
    if secrets := sorted(k for k in env if SECRET_NAME.search(k) or k == "DATABASE_URL"):
        problems.append(f"console: is given {secrets} (reviewers log in with their own token)")
    if not console.get("ports"):
        problems.append("console: publishes no port (a browser could not reach it)")
    return problems


def port_problems(doc: Doc) -> list[str]:
    problems = []
    for name, service in services(doc).items():
        if service.get("network_mode") == "host":
            problems.append(f"{name}: network_mode host publishes every port on every address")
        env = environment(service)
        variable = healthcheck_port_variable(service)
        for port in service.get("ports") or []:
            if isinstance(port, dict):
                host_ip, target = port.get("host_ip"), str(port.get("target"))
            else:
                parts = str(port).split(":")
                host_ip = parts[0] if len(parts) == 3 else None
                target = parts[-1].split("/")[0]
            if host_ip != "127.0.0.1":
                problems.append(f"{name}: port {port!r} is not bound to 127.0.0.1")
            if variable and env.get(variable) != target:
                problems.append(f"{name}: publishes {target} but listens on {env.get(variable)}")
    return problems


def listen_problems(doc: Doc) -> list[str]:
    """Each service listens on all of its container's interfaces, or nothing could reach it."""
    problems = []
    for name, service in services(doc).items():
        variable = healthcheck_port_variable(service)
        if variable is None:
            continue
        host_variable = variable.removesuffix("_PORT") + "_HOST"
        if environment(service).get(host_variable) != "0.0.0.0":
            problems.append(f"{name}: {host_variable} is not 0.0.0.0")
    return problems


def network_problems(doc: Doc) -> list[str]:
    problems = []
    internal = internal_networks(doc)
    if not internal:
        problems.append("no internal: true network")
    declared = set(doc.get("networks") or {})
    for name, service in services(doc).items():
        attached = attached_networks(service)
        if undeclared := attached - declared - {"default"}:
            problems.append(f"{name}: joins undeclared networks {sorted(undeclared)}")
        if not attached & internal:
            problems.append(f"{name}: is on no internal network")
        if EGRESS in attached and name not in PROVIDER_SERVICES:
            problems.append(f"{name}: joins {EGRESS}, which only the provider callers need")
        if service.get("ports") and not attached - internal:
            problems.append(f"{name}: publishes ports but sits only on internal networks")
    return problems


def hardening_problems(doc: Doc) -> list[str]:
    """Every service: no capabilities, no privilege gain, non-root, read-only, no host access."""
    problems = []
    for name, service in services(doc).items():
        if "ALL" not in (service.get("cap_drop") or []):
            problems.append(f"{name}: does not cap_drop ALL")
        if service.get("cap_add"):
            problems.append(f"{name}: cap_add {service['cap_add']}")
        if "no-new-privileges:true" not in (service.get("security_opt") or []):
            problems.append(f"{name}: no no-new-privileges:true")
        if service.get("privileged") not in (None, False):
            problems.append(f"{name}: privileged")
        if is_root_user(str(service.get("user", ""))):
            problems.append(f"{name}: user {service.get('user')!r} is root or unset")
        if service.get("read_only") is not True:
            problems.append(f"{name}: root filesystem is writable")
        for key in ("pid", "ipc", "userns_mode", "uts"):
            if service.get(key) == "host":
                problems.append(f"{name}: shares the host's {key} namespace")
        for volume in service.get("volumes") or []:
            if "docker.sock" in json.dumps(volume):
                problems.append(f"{name}: mounts the Docker socket")
        for mount in volume_mounts(service):
            kind, source, target = mount
            if kind != "volume" and not read_only_config_mount(service, mount):
                problems.append(f"{name}: mounts {kind} {source!r} on {target}")
        if service.get("use_api_socket"):
            problems.append(f"{name}: is given the Docker API socket")
    return problems


def sandbox_problems(doc: Doc) -> list[str]:
    """The runner of untrusted code: locked down, limited, offline, keyless."""
    sandbox = services(doc).get("sandbox")
    if sandbox is None:
        return ["no sandbox service"]
    problems = []
    security = set(sandbox.get("security_opt") or [])
    if missing := SANDBOX_SECURITY_OPT - security:
        problems.append(f"security_opt lacks {sorted(missing)}")
    for option in security - SANDBOX_SECURITY_OPT:
        problems.append(f"unexpected security_opt {option!r}")
    pids = sandbox.get("pids_limit")
    if not isinstance(pids, int) or not 0 < pids <= 1024:
        problems.append(f"pids_limit {pids!r} is not a positive bound")
    limits = ((sandbox.get("deploy") or {}).get("resources") or {}).get("limits") or {}
    if not (sandbox.get("mem_limit") or limits.get("memory")):
        problems.append("no memory limit")
    if not (sandbox.get("cpus") or limits.get("cpus")):
        problems.append("no CPU limit")
    tmpfs = sandbox.get("tmpfs") or []
    tmpfs = [tmpfs] if isinstance(tmpfs, str) else tmpfs
    if not any(t == "/tmp" or t.startswith("/tmp:") for t in tmpfs):
        problems.append("no tmpfs on /tmp (the root is read-only)")
    if sandbox.get("ports"):
        problems.append("publishes ports")
    if sandbox.get("volumes"):
        problems.append(f"mounts volumes {sandbox['volumes']}")
    if sandbox.get("devices"):
        problems.append("is given devices")
    if outside := attached_networks(sandbox) - internal_networks(doc):
        problems.append(f"joins non-internal networks {sorted(outside)} (egress)")
    if sandbox.get("network_mode") not in (None, "none"):
        problems.append(f"network_mode {sandbox.get('network_mode')!r}")
    if sandbox.get("extra_hosts") or sandbox.get("dns"):
        problems.append("has extra_hosts/dns pointing outward")
    if sandbox.get("init") is not True:
        problems.append("no init: job orphans would not be reaped")
    return problems


ALL_CHECKS: tuple[Callable[[Doc], list[str]], ...] = (
    schema_problems,
    service_set_problems,
    healthcheck_problems,
    build_problems,
    restart_problems,
    token_problems,
    secret_problems,
    provider_problems,
    database_problems,
    orchestrator_problems,
    replica_problems,
    proxy_problems,
    console_problems,
    port_problems,
    listen_problems,
    network_problems,
    hardening_problems,
    sandbox_problems,
)


# ---------------------------------------------------------------------------------- tests
def test_the_vendored_schema_is_a_valid_schema():
    schema = _schema()
    validator_for(schema).check_schema(schema)
    assert schema.get("title") == "Compose Specification"


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_compose_file_has_no_problems(check):
    assert check(compose()) == []


def test_the_schema_rejects_what_compose_would():
    """The schema is strict enough to matter: a typo'd key or a wrong type fails it."""
    doc = compose()
    doc["services"]["sandbox"]["read_onyl"] = True
    doc["services"]["actor"]["ports"] = "127.0.0.1:8001:8001"
    problems = schema_problems(doc)
    assert any("read_onyl" in p for p in problems), problems
    assert any(p.startswith("services/actor/ports") for p in problems), problems


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    *parents, last = path.split(".")

    def mutate(doc: Doc) -> None:
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _delete(path: str) -> Callable[[Doc], None]:
    *parents, last = path.split(".")

    def mutate(doc: Doc) -> None:
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[int(last) if isinstance(node, list) else last]

    return mutate


def _env(service: str, name: str, value: str) -> Callable[[Doc], None]:
    return _set(f"services.{service}.environment.{name}", value)


BROKEN: dict[str, tuple[Callable[[Doc], object], Callable[[Doc], list[str]]]] = {
    "unknown key": (_set("services.actor.helthcheck", {}), schema_problems),
    "no healthcheck": (_delete("services.critic.healthcheck"), healthcheck_problems),
    "disabled healthcheck": (
        _set("services.actor.healthcheck.disable", True),
        healthcheck_problems,
    ),
    "healthcheck wrong port var": (
        _set("services.actor.healthcheck.test", ["CMD", "python", HEALTHCHECK_SCRIPT, "X_PORT"]),
        healthcheck_problems,
    ),
    "missing Dockerfile": (
        _set("services.critic.build.dockerfile", "infra/docker/nope.Dockerfile"),
        build_problems,
    ),
    "unknown target": (_set("services.actor.build.target", "acter"), build_problems),
    "wrong target": (_set("services.actor.build.target", "critic"), build_problems),
    "entrypoint of a missing package": (
        _set("services.fakemodel.entrypoint", ["python", "-m", "fakemodle"]),
        build_problems,
    ),
    "image instead of build": (_delete("services.sandbox.build"), build_problems),
    "no restart": (_delete("services.sandbox.restart"), restart_problems),
    "defaulted token": (
        _env("sandbox", "CROSSCHECK_SERVICE_TOKEN", "${CROSSCHECK_SERVICE_TOKEN:-changeme}"),
        token_problems,
    ),
    "literal token": (
        _env("actor", "CROSSCHECK_SERVICE_TOKEN", "0123456789abcdef0123"),
        token_problems,
    ),
    "no token": (_delete("services.critic.environment.CROSSCHECK_SERVICE_TOKEN"), token_problems),
    "sandbox gets a key": (
        _env("sandbox", "OPENAI_API_KEY", "${OPENAI_API_KEY:-}"),
        provider_problems,
    ),
    "fakemodel gets a base url": (
        _env("fakemodel", "ANTHROPIC_BASE_URL", "${ANTHROPIC_BASE_URL:-}"),
        provider_problems,
    ),
    "sandbox env_file": (_set("services.sandbox.env_file", [".env"]), provider_problems),
    "literal key": (_env("critic", "ANTHROPIC_API_KEY", "sk-ant-123"), provider_problems),
    "required key": (
        _env("actor", "OPENAI_API_KEY", "${OPENAI_API_KEY:?set it}"),
        provider_problems,
    ),
    "port on all interfaces": (_set("services.actor.ports", ["8001:8001"]), port_problems),
    "port on 0.0.0.0": (
        _set(
            "services.critic.ports", [{"target": 8002, "published": "8002", "host_ip": "0.0.0.0"}]
        ),
        port_problems,
    ),
    "bare port": (_set("services.critic.ports", [8002]), port_problems),
    "published port mismatch": (
        _set("services.critic.ports", ["127.0.0.1:8002:8020"]),
        port_problems,
    ),
    "host network": (_set("services.actor.network_mode", "host"), port_problems),
    "listens on loopback": (_env("actor", "ACTOR_HOST", "127.0.0.1"), listen_problems),
    "internal network not internal": (_delete("networks.internal.internal"), network_problems),
    "undeclared network": (
        _set("services.critic.networks", ["internal", "outside"]),
        network_problems,
    ),
    "ports on internal-only service": (
        _set("services.fakemodel.ports", ["127.0.0.1:8009:8009"]),
        network_problems,
    ),
    "cap_add": (_set("services.actor.cap_add", ["NET_ADMIN"]), hardening_problems),
    "privileged": (_set("services.critic.privileged", True), hardening_problems),
    "root user": (_set("services.fakemodel.user", "0:0"), hardening_problems),
    "writable root": (_set("services.actor.read_only", False), hardening_problems),
    "docker socket": (
        _set("services.critic.volumes", ["/var/run/docker.sock:/var/run/docker.sock"]),
        hardening_problems,
    ),
    "sandbox without cap_drop": (_delete("services.sandbox.cap_drop"), hardening_problems),
    "sandbox as root": (_delete("services.sandbox.user"), hardening_problems),
    "sandbox writable": (_delete("services.sandbox.read_only"), hardening_problems),
    "sandbox new privileges": (
        _set(
            "services.sandbox.security_opt",
            ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"],
        ),
        sandbox_problems,
    ),
    "sandbox privileged via opt": (
        _set("services.sandbox.security_opt", [*SANDBOX_SECURITY_OPT, "label=disable"]),
        sandbox_problems,
    ),
    "sandbox no pids limit": (_delete("services.sandbox.pids_limit"), sandbox_problems),
    "sandbox no memory limit": (_delete("services.sandbox.mem_limit"), sandbox_problems),
    "sandbox no cpu limit": (_delete("services.sandbox.cpus"), sandbox_problems),
    "sandbox no tmpfs": (_delete("services.sandbox.tmpfs"), sandbox_problems),
    "sandbox egress": (_set("services.sandbox.networks", ["internal", "egress"]), sandbox_problems),
    "sandbox published": (
        _set("services.sandbox.ports", ["127.0.0.1:8003:8003"]),
        sandbox_problems,
    ),
    "sandbox volume": (_set("services.sandbox.volumes", ["./:/src:ro"]), sandbox_problems),
    "sandbox no init": (_delete("services.sandbox.init"), sandbox_problems),
    # the orchestrator and its database
    "orchestrator gets a key": (
        _env("orchestrator-2", "ANTHROPIC_API_KEY", "${ANTHROPIC_API_KEY:-}"),
        provider_problems,
    ),
    "orchestrator gets a base url": (
        _env("orchestrator-1", "OPENAI_BASE_URL", "${OPENAI_BASE_URL:-}"),
        provider_problems,
    ),
    "orchestrator env_file": (
        _set("services.orchestrator-1.env_file", [".env"]),
        provider_problems,
    ),
    "postgres gets a key": (
        _env("postgres", "OPENAI_API_KEY", "${OPENAI_API_KEY:-}"),
        provider_problems,
    ),
    "orchestrator wrong target": (
        _set("services.orchestrator-2.build.target", "actor"),
        build_problems,
    ),
    "orchestrator no token": (
        _delete("services.orchestrator-1.environment.CROSSCHECK_SERVICE_TOKEN"),
        token_problems,
    ),
    "orchestrator on egress": (
        _set("services.orchestrator-2.networks", ["internal", "egress"]),
        network_problems,
    ),
    "orchestrator on egress (replica)": (
        _set("services.orchestrator-1.networks", ["internal", "egress"]),
        orchestrator_problems,
    ),
    "orchestrator on edge": (
        _set("services.orchestrator-2.networks", ["internal", "edge"]),
        orchestrator_problems,
    ),
    "proxy publishes from internal only": (
        _set("services.proxy.networks", ["internal"]),
        network_problems,
    ),
    "proxy on egress": (
        _set("services.proxy.networks", ["internal", "edge", "egress"]),
        network_problems,
    ),
    "proxy port on all interfaces": (_set("services.proxy.ports", ["8000:8080"]), port_problems),
    "proxy port on 0.0.0.0": (
        _set("services.proxy.ports", [{"target": 8080, "published": "8000", "host_ip": "0.0.0.0"}]),
        port_problems,
    ),
    "orchestrator publishes its port again": (
        _set(
            "services.orchestrator-1.ports",
            [
                {
                    "target": 8000,
                    "published": "${ORCHESTRATOR_PUBLISHED_PORT:-8000}",
                    "host_ip": "127.0.0.1",
                }
            ],
        ),
        orchestrator_problems,
    ),
    "orchestrator publishes the API port (proxy)": (
        _set("services.orchestrator-2.ports", ["127.0.0.1:8000:8000"]),
        proxy_problems,
    ),
    "orchestrator publishes another port": (
        _set("services.orchestrator-2.ports", ["127.0.0.1:8010:8000"]),
        orchestrator_problems,
    ),
    "orchestrator listens on loopback": (
        _env("orchestrator-2", "ORCHESTRATOR_HOST", "127.0.0.1"),
        listen_problems,
    ),
    "orchestrator healthcheck on another port": (
        _set(
            "services.orchestrator-1.healthcheck.test",
            ["CMD", "python", HEALTHCHECK_SCRIPT, "ACTOR_PORT"],
        ),
        healthcheck_problems,
    ),
    "no admin token": (
        _delete("services.orchestrator-2.environment.CROSSCHECK_ADMIN_TOKEN"),
        orchestrator_problems,
    ),
    "no admin token (secrets)": (
        _delete("services.orchestrator-1.environment.CROSSCHECK_ADMIN_TOKEN"),
        secret_problems,
    ),
    "defaulted admin token": (
        _env(
            "orchestrator-1",
            "CROSSCHECK_ADMIN_TOKEN",
            "${CROSSCHECK_ADMIN_TOKEN:-0123456789abcdef}",
        ),
        secret_problems,
    ),
    "literal admin token": (
        _env("orchestrator-2", "CROSSCHECK_ADMIN_TOKEN", "0123456789abcdef0123"),
        secret_problems,
    ),
    "admin token elsewhere": (
        _env("critic", "CROSSCHECK_ADMIN_TOKEN", "${CROSSCHECK_ADMIN_TOKEN:?set it}"),
        secret_problems,
    ),
    "admin token smuggled in another variable": (
        _env("sandbox", "EXTRA", "x-${CROSSCHECK_ADMIN_TOKEN:?set it}"),
        secret_problems,
    ),
    "defaulted postgres password": (
        _env("postgres", "POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:-postgres}"),
        secret_problems,
    ),
    "literal postgres password": (
        _env("postgres", "POSTGRES_PASSWORD", "postgres"),
        secret_problems,
    ),
    "optional password in the url": (
        _env(
            "orchestrator-1",
            "DATABASE_URL",
            "postgresql://crosscheck:${POSTGRES_PASSWORD}@postgres:5432/crosscheck",
        ),
        secret_problems,
    ),
    "literal password in the url": (
        _env(
            "orchestrator-2", "DATABASE_URL", "postgresql://crosscheck:pw@postgres:5432/crosscheck"
        ),
        database_problems,
    ),
    "postgres password elsewhere": (
        _env("actor", "PGPASSWORD", "${POSTGRES_PASSWORD:?set it}"),
        secret_problems,
    ),
    "no database url": (
        _delete("services.orchestrator-2.environment.DATABASE_URL"),
        database_problems,
    ),
    "sqlite in the container": (
        _env("orchestrator-1", "DATABASE_URL", "sqlite:///var/crosscheck.sqlite"),
        database_problems,
    ),
    "database url elsewhere": (
        _env(
            "actor",
            "DATABASE_URL",
            "postgresql://crosscheck:${POSTGRES_PASSWORD:?x}@postgres:5432/crosscheck",
        ),
        database_problems,
    ),
    "database on localhost": (
        _env(
            "orchestrator-2",
            "DATABASE_URL",
            "postgresql://crosscheck:${POSTGRES_PASSWORD:?x}@localhost:5432/crosscheck",
        ),
        database_problems,
    ),
    "database user mismatch": (_env("postgres", "POSTGRES_USER", "postgres"), database_problems),
    "database name mismatch": (_env("postgres", "POSTGRES_DB", "app"), database_problems),
    "orchestrator does not wait for postgres": (
        _delete("services.orchestrator-1.depends_on.postgres"),
        database_problems,
    ),
    "orchestrator waits only for postgres to start": (
        _set("services.orchestrator-2.depends_on.postgres.condition", "service_started"),
        database_problems,
    ),
    "postgres published": (
        _set("services.postgres.ports", ["127.0.0.1:5432:5432"]),
        database_problems,
    ),
    "postgres on egress": (
        _set("services.postgres.networks", ["internal", "egress"]),
        database_problems,
    ),
    "postgres on egress (networks)": (
        _set("services.postgres.networks", ["internal", "egress"]),
        network_problems,
    ),
    "postgres without a volume": (_delete("services.postgres.volumes"), database_problems),
    "postgres on a bind mount": (
        _set("services.postgres.volumes", ["./pgdata:/var/lib/postgresql/data"]),
        database_problems,
    ),
    "postgres bind mount (hardening)": (
        _set("services.postgres.volumes", ["./pgdata:/var/lib/postgresql/data"]),
        hardening_problems,
    ),
    "postgres on an undeclared volume": (
        _set("services.postgres.volumes", ["pgdata:/var/lib/postgresql/data"]),
        database_problems,
    ),
    "postgres trusts everyone": (
        _env("postgres", "POSTGRES_HOST_AUTH_METHOD", "trust"),
        database_problems,
    ),
    "postgres as another uid": (_set("services.postgres.user", "999:999"), database_problems),
    "postgres as root": (_set("services.postgres.user", "0:0"), hardening_problems),
    "postgres without user": (_delete("services.postgres.user"), hardening_problems),
    "postgres writable root": (_set("services.postgres.read_only", False), hardening_problems),
    "postgres with capabilities": (
        _set("services.postgres.cap_add", ["CHOWN", "SETUID", "SETGID"]),
        hardening_problems,
    ),
    "postgres latest": (_set("services.postgres.image", "postgres:latest"), build_problems),
    "postgres untagged": (_set("services.postgres.image", "postgres"), build_problems),
    "postgres on debian": (_set("services.postgres.image", "postgres:16"), build_problems),
    "postgres lookalike": (
        _set("services.postgres.image", "bitnami/postgresql:16"),
        build_problems,
    ),
    "postgres built here": (
        _set("services.postgres.build", {"context": ".", "dockerfile": "pg.Dockerfile"}),
        build_problems,
    ),
    "postgres not probed by pg_isready": (
        _set("services.postgres.healthcheck.test", ["CMD", "true"]),
        healthcheck_problems,
    ),
    "postgres probed on its socket": (
        _set("services.postgres.healthcheck.test", ["CMD", "pg_isready", "-U", "crosscheck"]),
        database_problems,
    ),
    "postgres only in a profile": (
        _set("services.postgres.profiles", ["db"]),
        service_set_problems,
    ),
    "orchestrator peer on loopback": (
        _env("orchestrator-1", "SANDBOX_URL", "http://127.0.0.1:8003"),
        orchestrator_problems,
    ),
    "orchestrator peer on the wrong port": (
        _env("orchestrator-2", "CRITIC_URL", "http://critic:8001"),
        orchestrator_problems,
    ),
    "orchestrator does not wait for a peer": (
        _delete("services.orchestrator-1.depends_on.actor"),
        orchestrator_problems,
    ),
    "orchestrator no executor id": (
        _delete("services.orchestrator-2.environment.ORCHESTRATOR_EXECUTOR_ID"),
        orchestrator_problems,
    ),
    "orchestrator not on the sandbox's network": (
        _set("services.orchestrator-1.networks", ["edge"]),
        orchestrator_problems,
    ),
    # the replicas
    "one replica": (_delete("services.orchestrator-2"), replica_problems),
    "one replica (services)": (_delete("services.orchestrator-2"), service_set_problems),
    "no replica": (
        lambda doc: [doc["services"].pop(name) for name in REPLICAS],
        orchestrator_problems,
    ),
    "replicas share an executor id": (
        _env("orchestrator-2", "ORCHESTRATOR_EXECUTOR_ID", "replica-1"),
        replica_problems,
    ),
    "executor id from the environment": (
        _env("orchestrator-1", "ORCHESTRATOR_EXECUTOR_ID", "${HOSTNAME}"),
        replica_problems,
    ),
    "executor id the settings refuse": (
        _env("orchestrator-2", "ORCHESTRATOR_EXECUTOR_ID", "replica 2"),
        replica_problems,
    ),
    "replicas on different versions": (
        _env("orchestrator-2", "ORCHESTRATOR_APPLICATION_VERSION", "crosscheck-2"),
        replica_problems,
    ),
    "application version not pinned": (
        _env(
            "orchestrator-1",
            "ORCHESTRATOR_APPLICATION_VERSION",
            "${ORCHESTRATOR_APPLICATION_VERSION:-}",
        ),
        replica_problems,
    ),
    "replicas on different databases": (
        _env(
            "orchestrator-2",
            "DATABASE_URL",
            "postgresql://crosscheck:${POSTGRES_PASSWORD:?x}@postgres:5432/crosscheck2",
        ),
        replica_problems,
    ),
    "replica advertises the other's address": (
        _env("orchestrator-2", "ORCHESTRATOR_ADVERTISE_URL", "http://orchestrator-1:8000"),
        replica_problems,
    ),
    "replicas drift apart": (_set("services.orchestrator-2.mem_limit", "2g"), replica_problems),
    "replica's environment drifts": (
        _env("orchestrator-1", "ORCHESTRATOR_REVIEW_SWEEP_S", "5"),
        replica_problems,
    ),
    "replicas exhaust postgres connections": (
        _env("orchestrator-1", "ORCHESTRATOR_DB_MAX_OVERFLOW", "100"),
        replica_problems,
    ),
    "replicas at the default pool sizes": (
        lambda doc: [
            doc["services"][name]["environment"].pop(f"ORCHESTRATOR_{key}")
            for name in REPLICAS
            for key in ("DB_POOL_SIZE", "DB_MAX_OVERFLOW", "SYSTEM_DB_POOL_SIZE")
        ],
        replica_problems,
    ),
    "a third replica with the second's executor id": (
        lambda doc: doc["services"].__setitem__(
            "orchestrator-3", copy.deepcopy(doc["services"]["orchestrator-2"])
        ),
        replica_problems,
    ),
    "a third replica the proxy does not know": (
        lambda doc: doc["services"].__setitem__(
            "orchestrator-3",
            {
                **copy.deepcopy(doc["services"]["orchestrator-2"]),
                "environment": {
                    **doc["services"]["orchestrator-2"]["environment"],
                    "ORCHESTRATOR_EXECUTOR_ID": "replica-3",
                    "ORCHESTRATOR_ADVERTISE_URL": "http://orchestrator-3:8000",
                },
            },
        ),
        proxy_problems,
    ),
    "a replica on another port than the proxy's upstream": (
        _env("orchestrator-2", "ORCHESTRATOR_PORT", "8010"),
        proxy_problems,
    ),
    # the reverse proxy
    "no proxy": (_delete("services.proxy"), service_set_problems),
    "no proxy (proxy)": (_delete("services.proxy"), proxy_problems),
    "proxy latest": (_set("services.proxy.image", "nginx:latest"), build_problems),
    "proxy untagged": (_set("services.proxy.image", "nginx"), build_problems),
    "proxy on debian": (_set("services.proxy.image", "nginx:1.28"), build_problems),
    "proxy before upstream resolve": (
        _set("services.proxy.image", "nginx:1.26-alpine"),
        build_problems,
    ),
    "proxy lookalike": (_set("services.proxy.image", "bitnami/nginx:1.28"), build_problems),
    "proxy built here": (
        _set("services.proxy.build", {"context": ".", "dockerfile": "nginx.Dockerfile"}),
        build_problems,
    ),
    "proxy no healthcheck": (_delete("services.proxy.healthcheck"), healthcheck_problems),
    "proxy probed with curl": (
        _set(
            "services.proxy.healthcheck.test",
            ["CMD", "curl", "-f", "http://127.0.0.1:8080/healthz"],
        ),
        healthcheck_problems,
    ),
    "proxy probed on another port": (
        _set(
            "services.proxy.healthcheck.test",
            ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:80/healthz"],
        ),
        proxy_problems,
    ),
    "proxy probed with HEAD": (
        _set(
            "services.proxy.healthcheck.test",
            ["CMD", "wget", "-q", "--spider", "http://127.0.0.1:8080/healthz"],
        ),
        proxy_problems,
    ),
    "proxy no restart": (_delete("services.proxy.restart"), restart_problems),
    "proxy gives up before the replicas migrate": (
        _set("services.proxy.healthcheck.start_period", "20s"),
        proxy_problems,
    ),
    "proxy as root": (_set("services.proxy.user", "0:0"), hardening_problems),
    "proxy without user": (_delete("services.proxy.user"), hardening_problems),
    "proxy as another uid": (_set("services.proxy.user", "10001:10001"), proxy_problems),
    "proxy writable root": (_set("services.proxy.read_only", False), hardening_problems),
    "proxy with capabilities": (
        _set("services.proxy.cap_add", ["NET_BIND_SERVICE"]),
        hardening_problems,
    ),
    "proxy new privileges": (_set("services.proxy.security_opt", []), hardening_problems),
    "proxy no tmpfs": (_delete("services.proxy.tmpfs"), proxy_problems),
    "proxy config writable": (
        _set("services.proxy.volumes.0.read_only", False),
        hardening_problems,
    ),
    "proxy config writable (proxy)": (
        _set("services.proxy.volumes", ["./infra/proxy/nginx.conf:/etc/nginx/nginx.conf"]),
        proxy_problems,
    ),
    "proxy mounts a directory": (
        _set("services.proxy.volumes", ["./infra/proxy:/etc/nginx/conf.d:ro"]),
        hardening_problems,
    ),
    "proxy mounts the repository": (
        _set("services.proxy.volumes", ["./:/srv:ro"]),
        hardening_problems,
    ),
    "proxy config that does not exist": (
        _set("services.proxy.volumes.0.source", "./infra/proxy/nginx.cnf"),
        proxy_problems,
    ),
    "proxy config mounted elsewhere": (
        _set("services.proxy.volumes.0.target", "/etc/nginx/conf.d/default.conf"),
        proxy_problems,
    ),
    "proxy publishes another port": (
        _set("services.proxy.ports", ["127.0.0.1:8000:80"]),
        proxy_problems,
    ),
    "proxy publishes the API elsewhere": (
        _set("services.proxy.ports", ["127.0.0.1:8080:8080"]),
        proxy_problems,
    ),
    "proxy unpublished": (_delete("services.proxy.ports"), proxy_problems),
    "proxy does not depend on a replica": (
        _delete("services.proxy.depends_on.orchestrator-2"),
        proxy_problems,
    ),
    "proxy off the replicas' network": (_set("services.proxy.networks", ["edge"]), proxy_problems),
    "proxy command override": (
        _set("services.proxy.command", ["nginx", "-c", "/tmp/x.conf"]),
        proxy_problems,
    ),
    "proxy gets the admin token": (
        _env("proxy", "CROSSCHECK_ADMIN_TOKEN", "${CROSSCHECK_ADMIN_TOKEN:?set it}"),
        secret_problems,
    ),
    "proxy gets a key": (_env("proxy", "OPENAI_API_KEY", "${OPENAI_API_KEY:-}"), provider_problems),
    "proxy only in a profile": (_set("services.proxy.profiles", ["api"]), service_set_problems),
    "demo service always on": (_delete("services.fakemodel.profiles"), service_set_problems),
    # the reviewer console
    "no console": (_delete("services.console"), service_set_problems),
    "no console (console)": (_delete("services.console"), console_problems),
    "console only in a profile": (_set("services.console.profiles", ["ui"]), service_set_problems),
    "console wrong target": (_set("services.console.build.target", "orchestrator"), build_problems),
    "console entrypoint of a missing script": (
        _set("services.console.entrypoint", ["python", "/opt/crosscheck/run-console.py"]),
        build_problems,
    ),
    "console command override": (
        _set("services.console.command", ["--server.port=8502"]),
        console_problems,
    ),
    "console entrypoint override": (
        _set("services.console.entrypoint", ["python", "/opt/crosscheck/run_console.py"]),
        console_problems,
    ),
    "console no healthcheck": (_delete("services.console.healthcheck"), healthcheck_problems),
    "console healthcheck on /healthz": (
        _set(
            "services.console.healthcheck.test",
            ["CMD", "python", HEALTHCHECK_SCRIPT, "CONSOLE_PORT"],
        ),
        console_problems,
    ),
    "console healthcheck on another port": (
        _set(
            "services.console.healthcheck.test",
            ["CMD", "python", HEALTHCHECK_SCRIPT, "ORCHESTRATOR_PORT", "/_stcore/health"],
        ),
        healthcheck_problems,
    ),
    "console on another port than the launcher's": (
        _env("console", "CONSOLE_PORT", "8502"),
        console_problems,
    ),
    "console publishes another port": (
        _set("services.console.ports", ["127.0.0.1:8501:8502"]),
        port_problems,
    ),
    "console port on all interfaces": (
        _set("services.console.ports", ["8501:8501"]),
        port_problems,
    ),
    "console unpublished": (_delete("services.console.ports"), console_problems),
    "console listens on loopback": (_env("console", "CONSOLE_HOST", "127.0.0.1"), listen_problems),
    "console api on loopback": (
        _env("console", "CROSSCHECK_URL", "http://127.0.0.1:8000"),
        console_problems,
    ),
    "console api on the wrong port": (
        _env("console", "CROSSCHECK_URL", "http://proxy:8000"),
        console_problems,
    ),
    "console api on one replica": (
        _env("console", "CROSSCHECK_URL", "http://orchestrator-1:8000"),
        console_problems,
    ),
    "console waits for one replica instead of the proxy": (
        _set("services.console.depends_on", {"orchestrator-1": {"condition": "service_healthy"}}),
        console_problems,
    ),
    "console waits for a replica too": (
        _set("services.console.depends_on.orchestrator-2", {"condition": "service_healthy"}),
        console_problems,
    ),
    "console does not wait for the proxy": (
        _delete("services.console.depends_on"),
        console_problems,
    ),
    "console waits only for the proxy to start": (
        _set("services.console.depends_on.proxy.condition", "service_started"),
        console_problems,
    ),
    "console off the proxy's internal network": (
        _set("services.console.networks", ["edge"]),
        console_problems,
    ),
    "console publishes from internal only": (
        _set("services.console.networks", ["internal"]),
        network_problems,
    ),
    "console on egress": (
        _set("services.console.networks", ["internal", "edge", "egress"]),
        network_problems,
    ),
    "console gets the admin token": (
        _env("console", "CROSSCHECK_ADMIN_TOKEN", "${CROSSCHECK_ADMIN_TOKEN:?set it}"),
        secret_problems,
    ),
    "console gets the service token": (
        _env("console", "CROSSCHECK_SERVICE_TOKEN", "${CROSSCHECK_SERVICE_TOKEN:?set it}"),
        secret_problems,
    ),
    "console gets a reviewer token": (
        _env("console", "CROSSCHECK_TOKEN", "${CROSSCHECK_TOKEN:-}"),
        console_problems,
    ),
    "console gets a database": (
        _env(
            "console",
            "DATABASE_URL",
            "postgresql://crosscheck:${POSTGRES_PASSWORD:?x}@postgres:5432/crosscheck",
        ),
        database_problems,
    ),
    "console gets a key": (
        _env("console", "OPENAI_API_KEY", "${OPENAI_API_KEY:-}"),
        provider_problems,
    ),
    "console as root": (_set("services.console.user", "0:0"), hardening_problems),
    "console writable root": (_set("services.console.read_only", False), hardening_problems),
    "console no restart": (_delete("services.console.restart"), restart_problems),
    "sandbox only in a profile": (
        _set("services.sandbox.profiles", ["demo"]),
        service_set_problems,
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_compose_file_is_caught(name: str):
    mutate, check = BROKEN[name]
    doc = compose()
    assert check(doc) == [], "the check fails on the real file already"
    mutate(doc)
    assert check(doc) != [], name


# What each replica must keep on its own: breaking it on any one replica is caught.
PER_REPLICA: dict[
    str, tuple[Callable[[str], Callable[[Doc], None]], Callable[[Doc], list[str]]]
] = {
    "no service token": (
        lambda r: _delete(f"services.{r}.environment.CROSSCHECK_SERVICE_TOKEN"),
        token_problems,
    ),
    "no admin token": (
        lambda r: _delete(f"services.{r}.environment.CROSSCHECK_ADMIN_TOKEN"),
        orchestrator_problems,
    ),
    "no database": (lambda r: _delete(f"services.{r}.environment.DATABASE_URL"), database_problems),
    "database on localhost": (
        lambda r: _env(
            r,
            "DATABASE_URL",
            "postgresql://crosscheck:${POSTGRES_PASSWORD:?x}@localhost:5432/crosscheck",
        ),
        database_problems,
    ),
    "does not wait for postgres": (
        lambda r: _delete(f"services.{r}.depends_on.postgres"),
        database_problems,
    ),
    "peer on loopback": (
        lambda r: _env(r, "ACTOR_URL", "http://127.0.0.1:8001"),
        orchestrator_problems,
    ),
    "no executor id": (
        lambda r: _delete(f"services.{r}.environment.ORCHESTRATOR_EXECUTOR_ID"),
        orchestrator_problems,
    ),
    "listens on loopback": (lambda r: _env(r, "ORCHESTRATOR_HOST", "127.0.0.1"), listen_problems),
    "no healthcheck": (lambda r: _delete(f"services.{r}.healthcheck"), healthcheck_problems),
    "no restart": (lambda r: _delete(f"services.{r}.restart"), restart_problems),
    "as root": (lambda r: _set(f"services.{r}.user", "0:0"), hardening_problems),
    "writable root": (lambda r: _set(f"services.{r}.read_only", False), hardening_problems),
    "published": (
        lambda r: _set(f"services.{r}.ports", ["127.0.0.1:8010:8000"]),
        orchestrator_problems,
    ),
    "on edge": (
        lambda r: _set(f"services.{r}.networks", ["internal", "edge"]),
        orchestrator_problems,
    ),
    "gets a key": (lambda r: _env(r, "OPENAI_API_KEY", "${OPENAI_API_KEY:-}"), provider_problems),
    "wrong target": (lambda r: _set(f"services.{r}.build.target", "sandbox"), build_problems),
}


@pytest.mark.parametrize("replica", REPLICAS)
@pytest.mark.parametrize("name", sorted(PER_REPLICA))
def test_each_replica_keeps_the_orchestrators_guarantees(name: str, replica: str):
    mutate, check = PER_REPLICA[name]
    doc = compose()
    assert check(doc) == []
    mutate(replica)(doc)
    problems = check(doc)
    assert problems != [], (name, replica)
    assert all(p.startswith(f"{replica}:") for p in problems), problems


def test_the_replicas_are_one_definition_in_the_file():
    """One YAML anchor: the replicas' services say nothing but their identity themselves."""
    raw = yaml.compose(COMPOSE_FILE.read_text())
    assert isinstance(raw, yaml.MappingNode)
    top = {key.value: value for key, value in raw.value}
    found = {
        key.value: value for key, value in top["services"].value if REPLICA_NAME.match(key.value)
    }
    assert sorted(found) == list(REPLICAS)
    for name, node in found.items():
        keys = [key.value for key, _ in node.value]
        assert keys == ["<<", "environment"], (name, keys)
        env = dict(node.value)[next(k for k, _ in node.value if k.value == "environment")]
        own = [key.value for key, _ in env.value if key.value != "<<"]
        assert sorted(own) == sorted(REPLICA_IDENTITY), (name, own)


# -------------------------------------------------------------------- the demo override
def merge(base: Doc, override: Doc) -> Doc:
    """Compose's merge for what the override uses: mappings merge, everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def test_the_demo_override_is_valid_and_touches_only_the_model_callers_and_the_mode():
    override = load_yaml(DEMO_OVERRIDE)
    assert schema_problems(override) == []
    assert set(override) == {"services"}
    replicas = {"orchestrator-1", "orchestrator-2"}
    assert set(override["services"]) == PROVIDER_SERVICES | replicas
    for name in replicas:  # only says which models answer
        assert override["services"][name] == {"environment": {"ORCHESTRATOR_MODELS": "demo"}}


def test_the_demo_points_actor_and_critic_at_fakemodel():
    demo = merge(compose(), load_yaml(DEMO_OVERRIDE))
    fakemodel = f"http://fakemodel:{environment(demo['services']['fakemodel'])['FAKEMODEL_PORT']}"
    for name in sorted(PROVIDER_SERVICES):
        service = demo["services"][name]
        env = environment(service)
        assert env["OPENAI_BASE_URL"] == f"{fakemodel}/v1", name
        assert env["ANTHROPIC_BASE_URL"] == fakemodel, name
        assert "placeholder" in (env["OPENAI_API_KEY"] or ""), name
        assert "placeholder" in (env["ANTHROPIC_API_KEY"] or ""), name
        assert service["depends_on"]["fakemodel"]["condition"] == "service_healthy", name
        # The demo reaches fakemodel over the internal network both share.
        shared = attached_networks(service) & attached_networks(demo["services"]["fakemodel"])
        assert shared & internal_networks(demo), name


def test_the_merged_demo_keeps_every_other_guarantee():
    demo = merge(compose(), load_yaml(DEMO_OVERRIDE))
    problems = [
        p for check in ALL_CHECKS for p in check(demo) if check is not provider_problems
    ] + provider_problems(demo, allow_literals=True)
    assert problems == []


# --------------------------------------------------- optional: the real Compose CLI
def _compose_cli() -> list[str] | None:
    """`docker compose` (v2 plugin) or a v2 `docker-compose`, if this machine has one."""
    candidates = [["docker", "compose"], ["docker-compose"]]
    for command in candidates:
        if shutil.which(command[0]) is None:
            continue
        try:
            result = subprocess.run(
                [*command, "version", "--short"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if result.returncode == 0 and re.match(r"v?2\.", result.stdout.strip()):
            return command
    return None


COMPOSE_CLI = _compose_cli()
needs_compose = pytest.mark.skipif(
    COMPOSE_CLI is None, reason="no Docker Compose v2 CLI here (docker compose / docker-compose)"
)


def _required_env(service_token: str) -> dict[str, str]:
    """A value for every required secret (what the CLI tests start from)."""
    values = {name: f"{name.lower()}-for-tests-0123456789" for name in REQUIRED_SECRETS}
    values["CROSSCHECK_SERVICE_TOKEN"] = service_token
    return values


def _compose_config(*files, secrets: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert COMPOSE_CLI is not None
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CROSSCHECK_", "POSTGRES_", "ORCHESTRATOR_"))
    }
    env.update(secrets)
    args = [arg for f in files for arg in ("-f", str(f))]
    return subprocess.run(
        # --env-file: a developer's .env must not supply what the test leaves out.
        [*COMPOSE_CLI, "--env-file", os.devnull, *args, "--profile", "demo", "config", "--quiet"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_compose
def test_compose_cli_accepts_the_files(service_token):
    secrets = _required_env(service_token)
    result = _compose_config(COMPOSE_FILE, secrets=secrets)
    assert result.returncode == 0, result.stderr
    result = _compose_config(COMPOSE_FILE, DEMO_OVERRIDE, secrets=secrets)
    assert result.returncode == 0, result.stderr


@needs_compose
@pytest.mark.parametrize("missing", sorted(REQUIRED_SECRETS))
def test_compose_cli_refuses_to_start_without_a_required_secret(service_token, missing):
    secrets = {k: v for k, v in _required_env(service_token).items() if k != missing}
    result = _compose_config(COMPOSE_FILE, secrets=secrets)
    assert result.returncode != 0
    assert missing in result.stderr


# ------------------------------------------------------------ what the operator must set
def test_the_required_variables_are_exactly_the_secrets_and_are_documented():
    """Every `${NAME:?...}` in the stack is a known secret, and infra/README.md says how to
    set it; a new required variable must be documented before compose demands it."""
    text = COMPOSE_FILE.read_text() + DEMO_OVERRIDE.read_text()
    required_names = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?", text))
    assert required_names == set(REQUIRED_SECRETS)
    readme = (REPO / "infra" / "README.md").read_text()
    for name in sorted(required_names):
        assert f"{name}=" in readme, f"{name} is required but infra/README.md never sets it"


def test_the_published_ports_are_documented():
    readme = (REPO / "infra" / "README.md").read_text()
    for name, service in services(compose()).items():
        for port in service.get("ports") or []:
            published = str(port.get("published") if isinstance(port, dict) else port)
            variable = re.search(r"\$\{([A-Z_]+):-(\d+)\}", published)
            assert variable, f"{name}: published port {published!r} is not ${{VAR:-default}}"
            assert variable.group(1) in readme, f"{name}: {variable.group(1)} not in the README"
            assert f"127.0.0.1:{variable.group(2)}" in readme, name

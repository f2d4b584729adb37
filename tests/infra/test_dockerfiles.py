"""The Dockerfiles under infra/docker, checked without a Docker engine.

Each check returns a list of problems (empty when the file is right); the tests assert the
real files have none, and that deliberately broken copies of them do have some.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.infra._support import (
    REPO,
    SECRET_NAME,
    Dockerfile,
    dockerfiles,
    exec_form,
    expand,
    is_root_user,
    load_dockerfile,
    member_for_package,
    package_dir,
    parse_dockerfile,
    python_module,
    split_flags,
    workspace_closure,
    workspace_members,
)

PYTHON_SERVICE = REPO / "infra" / "docker" / "python-service.Dockerfile"
SANDBOX = REPO / "infra" / "docker" / "sandbox.Dockerfile"
HEALTHCHECK_SCRIPT = "/opt/crosscheck/healthcheck.py"
VENV = "/opt/venv"


# --------------------------------------------------------------------------------- checks
def structure_problems(df: Dockerfile) -> list[str]:
    problems = []
    if len(df.stages) < 2:
        problems.append(f"not multi-stage: {len(df.stages)} FROM")
    if not df.service_stages():
        problems.append("no stage has an ENTRYPOINT")
    if df.stages:
        last_user = df.effective(df.stages[-1], "USER")
        if last_user is None or is_root_user(last_user.args):
            problems.append("the final stage does not end as a non-root USER")
    for stage in df.stages:
        for instruction in stage.all("ADD"):
            problems.append(f"line {instruction.line}: ADD (use COPY)")
    return problems


def service_stage_problems(df: Dockerfile) -> list[str]:
    """Every stage that runs a service: non-root, health-checked, the right package, in a venv."""
    problems = []
    for stage in df.service_stages():
        where = f"stage {stage.name or stage.index}"
        user = df.effective(stage, "USER")
        if user is None or is_root_user(user.args):
            problems.append(f"{where}: runs as root (no non-root USER)")
        elif not user.args.split(":")[0].isdigit():
            problems.append(f"{where}: USER {user.args} is not a numeric uid")

        problems += _healthcheck_problems(df, stage, where)

        raw_entrypoint = stage.all("ENTRYPOINT")[-1].args
        module = python_module(exec_form(raw_entrypoint))
        if module is None:
            problems.append(
                f"{where}: ENTRYPOINT {raw_entrypoint} is not exec-form python -m <pkg>"
            )
            continue
        member = member_for_package(module)
        if member is None:
            problems.append(f"{where}: no workspace member ships the package {module!r}")
            continue
        if not (package_dir(member, module) / "__init__.py").is_file():
            problems.append(f"{where}: package {module!r} has no __init__.py in {member.path}")
        problems += _venv_problems(df, stage, member.dist, where)
    return problems


def _healthcheck_problems(df: Dockerfile, stage, where: str) -> list[str]:
    problems = []
    health = df.effective(stage, "HEALTHCHECK")
    if health is None or health.args.upper().startswith("NONE"):
        return [f"{where}: no HEALTHCHECK"]
    command = health.args[health.args.find("CMD") + 3 :].strip()
    words = exec_form(command)
    if not words or HEALTHCHECK_SCRIPT not in words:
        return [f"{where}: HEALTHCHECK does not run {HEALTHCHECK_SCRIPT}: {command}"]
    port_variable = words[-1]
    env = df.env(stage)
    exposed = [w for i in df.in_chain(stage, "EXPOSE") for w in i.args.split()]
    if port_variable not in env:
        problems.append(f"{where}: HEALTHCHECK reads {port_variable}, which no ENV sets")
    elif [env[port_variable]] != [p.split("/")[0] for p in exposed]:
        problems.append(f"{where}: {port_variable}={env[port_variable]} but EXPOSE {exposed}")
    host_variable = port_variable.removesuffix("_PORT") + "_HOST"
    if env.get(host_variable) != "0.0.0.0":
        problems.append(f"{where}: {host_variable} is not 0.0.0.0 (the service is unreachable)")
    return problems


def _venv_problems(df: Dockerfile, stage, dist: str, where: str) -> list[str]:
    """The stage gets /opt/venv from a stage that installed exactly ``dist`` from uv.lock."""
    problems = []
    sources = [
        split_flags(i.args)
        for i in df.in_chain(stage, "COPY")
        if split_flags(i.args)[0].get("from") and split_flags(i.args)[1][:1] == [VENV]
    ]
    if not sources:
        return [f"{where}: does not COPY --from=<builder> {VENV}"]
    venv_stage = df.stage(sources[-1][0]["from"])
    if venv_stage is None:
        return [f"{where}: copies {VENV} from an unknown stage {sources[-1][0]['from']!r}"]
    if df.root_image(venv_stage) != df.root_image(stage):
        problems.append(
            f"{where}: venv built on {df.root_image(venv_stage)} but run on "
            f"{df.root_image(stage)} (its interpreter link would break)"
        )
    if "PATH" not in df.env(stage) or not df.env(stage)["PATH"].startswith(f"{VENV}/bin"):
        problems.append(f"{where}: PATH does not start with {VENV}/bin")

    syncs = [i for i in df.in_chain(venv_stage, "RUN") if "uv sync" in i.args]
    if not syncs:
        return [*problems, f"{where}: {venv_stage.name} never runs uv sync"]
    for run in syncs:
        for flag in ("--frozen", "--no-dev", f"--package {dist}"):
            if flag not in run.args:
                problems.append(f"{where}: line {run.line}: uv sync without {flag}")
    if "--no-editable" not in syncs[-1].args:
        problems.append(f"{where}: the last uv sync is not --no-editable (venv would need /src)")

    copied = {
        expand(dst, df.global_args).rstrip("/")
        for i in df.in_chain(venv_stage, "COPY")
        if not split_flags(i.args)[0].get("from")
        for dst in split_flags(i.args)[1][:-1]
    }
    members = workspace_members()
    for member in members.values():
        manifest = f"{member.path}/pyproject.toml"
        if manifest not in copied:
            problems.append(f"{where}: builder does not copy {manifest} (uv needs every member)")
    for needed in ("pyproject.toml", "uv.lock"):
        if needed not in copied:
            problems.append(f"{where}: builder does not copy {needed}")
    for dependency in sorted(workspace_closure(dist)):
        for package in members[dependency].packages:
            source = f"{members[dependency].path}/{package}"
            if source not in copied:
                problems.append(f"{where}: {dist} needs {source}, which the builder never copies")
    return problems


def copy_source_problems(df: Dockerfile) -> list[str]:
    """Every COPY from the build context names a path that exists (the context is the repo)."""
    problems = []
    for stage in df.stages:
        for instruction in stage.all("COPY"):
            flags, words = split_flags(instruction.args)
            if "from" in flags or len(words) < 2:
                continue
            for source in words[:-1]:
                source = expand(source, df.global_args)
                matches = list(REPO.glob(source.rstrip("/"))) if "*" in source else []
                if not (REPO / source).exists() and not matches:
                    problems.append(f"line {instruction.line}: COPY source {source!r} is missing")
    return problems


def builder_problems(df: Dockerfile) -> list[str]:
    """uv is pinned, and the venv's interpreter is the runtime's (same python:3.11-slim)."""
    problems = []
    uv_version = df.global_args.get("UV_VERSION") or next(
        (
            i.args.partition("=")[2]
            for s in df.stages
            for i in s.all("ARG")
            if i.args.startswith("UV_VERSION=")
        ),
        "",
    )
    if not re.fullmatch(r"\d+\.\d+\.\d+", uv_version):
        problems.append(f"uv is not pinned to an exact version (ARG UV_VERSION={uv_version!r})")
    installs = [i for s in df.stages for i in s.all("RUN") if "pip install" in i.args]
    if not any("uv==${UV_VERSION}" in i.args for i in installs):
        problems.append("no RUN pip install uv==${UV_VERSION}")
    external = {s.base for s in df.stages if df.stage(s.base) is None}
    if len(external) != 1:
        problems.append(f"stages start from different images {sorted(external)}")
    for image in external:
        if not re.fullmatch(r"python:3\.11-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", image):
            problems.append(f"base image {image!r} is not python:3.11-slim")
    return problems


def secret_problems(df: Dockerfile) -> list[str]:
    """No credential is baked into an image (build args and ENV end up in its history)."""
    problems = []
    for stage in df.stages:
        for instruction in stage.all("ENV"):
            for name in _env_names(instruction.args):
                if SECRET_NAME.search(name):
                    problems.append(f"line {instruction.line}: ENV {name} bakes a secret")
        for instruction in stage.all("ARG"):
            name = instruction.args.partition("=")[0]
            if SECRET_NAME.search(name):
                problems.append(f"line {instruction.line}: ARG {name} passes a secret")
    return problems


def _env_names(args: str) -> list[str]:
    words = args.split()
    if words and "=" not in words[0]:
        return words[:1]
    return [w.split("=", 1)[0] for w in words if "=" in w]


def sandbox_problems(df: Dockerfile) -> list[str]:
    """The sandbox's runtime (not its builder) has bubblewrap and the system python3."""
    problems = []
    stages = df.service_stages()
    if len(stages) != 1:
        return [f"expected one service stage, found {len(stages)}"]
    runs = " ".join(i.args for i in df.in_chain(stages[0], "RUN"))
    for package in ("bubblewrap", "python3", "libseccomp2"):
        if not re.search(rf"apt-get install[^&;]*\b{package}\b", runs):
            problems.append(f"the runtime stage does not apt-get install {package}")
    if "rm -rf /var/lib/apt/lists" not in runs:
        problems.append("apt lists are left in the image")
    env = df.env(stages[0])
    for name in env:
        if re.match(r"(OPENAI|ANTHROPIC)_", name):
            problems.append(f"the sandbox image sets provider variable {name}")
    return problems


ALL_CHECKS = (
    structure_problems,
    service_stage_problems,
    copy_source_problems,
    builder_problems,
    secret_problems,
)


def all_problems(df: Dockerfile) -> list[str]:
    return [problem for check in ALL_CHECKS for problem in check(df)]


# ---------------------------------------------------------------------------------- tests
def test_the_expected_dockerfiles_exist():
    assert PYTHON_SERVICE in dockerfiles()
    assert SANDBOX in dockerfiles()


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_dockerfile_has_no_problems(path: Path):
    assert all_problems(load_dockerfile(path)) == []


def test_the_python_service_file_builds_actor_critic_fakemodel_and_orchestrator():
    df = load_dockerfile(PYTHON_SERVICE)
    modules = {
        s.name: python_module(exec_form(s.all("ENTRYPOINT")[-1].args)) for s in df.service_stages()
    }
    assert modules == {
        "actor": "actor",
        "critic": "critic",
        "fakemodel": "fakemodel",
        "orchestrator": "orchestrator",
    }


def test_the_orchestrator_image_listens_on_8000_without_provider_settings():
    df = load_dockerfile(PYTHON_SERVICE)
    stage = df.stage("orchestrator")
    assert stage is not None
    env = df.env(stage)
    assert env["ORCHESTRATOR_PORT"] == "8000"
    assert env["ORCHESTRATOR_HOST"] == "0.0.0.0"
    assert not [name for name in env if re.match(r"(OPENAI|ANTHROPIC)_", name)]
    venv = df.stage("orchestrator-venv")
    assert venv is not None
    syncs = [i.args for i in venv.all("RUN") if "uv sync" in i.args]
    assert syncs, "orchestrator-venv runs no uv sync"
    # shared comes in as a plain dependency: no `providers` extra, no SDKs.
    assert not [a for a in syncs if "--extra" in a or "--all-extras" in a], syncs


def test_the_sandbox_image_has_bubblewrap_and_system_python():
    assert sandbox_problems(load_dockerfile(SANDBOX)) == []


def test_the_dockerfiles_share_one_base_image_and_one_uv():
    """The builders are duplicated on purpose; this keeps the copies from drifting apart."""
    images, uv_pins = set(), set()
    for path in dockerfiles():
        df = load_dockerfile(path)
        builder = df.stage("builder")
        assert builder is not None, f"{path.name} has no stage named builder"
        images.add(df.global_args.get("PYTHON_IMAGE"))
        uv_pins |= {i.args for i in builder.all("ARG") if i.args.startswith("UV_VERSION=")}
    assert images == {"python:3.11-slim-trixie"}
    assert len(uv_pins) == 1, uv_pins


def test_the_healthcheck_script_the_images_copy_exists():
    for path in dockerfiles():
        text = path.read_text()
        assert f"COPY infra/docker/healthcheck.py {HEALTHCHECK_SCRIPT}" in text, path.name


# ------------------------------------------------------------- the checks can fail at all
def _broken(path: Path, old: str, new: str, count: int = -1) -> Dockerfile:
    text = path.read_text()
    assert old in text, f"mutation target {old!r} not in {path.name}"
    return parse_dockerfile(text.replace(old, new, count), path)


def _drop_lines(path: Path, pattern: str) -> Dockerfile:
    text = "\n".join(line for line in path.read_text().splitlines() if not re.match(pattern, line))
    return parse_dockerfile(text, path)


BROKEN = {
    "runs as root": lambda: _drop_lines(SANDBOX, r"USER "),
    "ends as root": lambda: parse_dockerfile(SANDBOX.read_text() + "\nUSER root\n", SANDBOX),
    "named root user": lambda: _broken(PYTHON_SERVICE, "USER 10001:10001", "USER root", 1),
    "no healthcheck": lambda: _drop_lines(PYTHON_SERVICE, r"(HEALTHCHECK|    CMD )"),
    "healthcheck NONE": lambda: parse_dockerfile(
        PYTHON_SERVICE.read_text() + "\nHEALTHCHECK NONE\n", PYTHON_SERVICE
    ),
    "single stage": lambda: parse_dockerfile(
        "FROM python:3.11-slim\nUSER 10001\nHEALTHCHECK CMD true\n"
        'ENTRYPOINT ["python", "-m", "actor"]\n'
    ),
    "missing COPY source": lambda: _broken(
        SANDBOX, "COPY services/sandbox/sandbox", "COPY services/sandbox/sandbx"
    ),
    "missing manifest": lambda: _broken(
        PYTHON_SERVICE, "COPY services/critic/pyproject.toml services/critic/\n", ""
    ),
    "missing shared source": lambda: _broken(
        PYTHON_SERVICE, "COPY shared/shared shared/shared\n", ""
    ),
    "unknown package": lambda: _broken(SANDBOX, '"-m", "sandbox"', '"-m", "sandbax"'),
    "shell-form entrypoint": lambda: _broken(
        SANDBOX, 'ENTRYPOINT ["python", "-m", "sandbox"]', "ENTRYPOINT python -m sandbox"
    ),
    "wrong package synced": lambda: _broken(
        PYTHON_SERVICE, "--package crosscheck-critic", "--package crosscheck-actor"
    ),
    "unlocked sync": lambda: _broken(SANDBOX, "uv sync --frozen", "uv sync"),
    "editable install": lambda: _broken(SANDBOX, " --no-editable", ""),
    "unpinned uv": lambda: _broken(SANDBOX, "ARG UV_VERSION=0.13.9", "ARG UV_VERSION=latest"),
    "mismatched runtime image": lambda: _broken(
        SANDBOX, "FROM ${PYTHON_IMAGE} AS runtime", "FROM python:3.12-slim AS runtime"
    ),
    "port mismatch": lambda: _broken(PYTHON_SERVICE, "EXPOSE 8002", "EXPOSE 8020"),
    "orchestrator port mismatch": lambda: _broken(PYTHON_SERVICE, "EXPOSE 8000", "EXPOSE 8080"),
    "orchestrator without its source": lambda: _broken(
        PYTHON_SERVICE,
        "COPY services/orchestrator/orchestrator services/orchestrator/orchestrator\n",
        "",
    ),
    "orchestrator without shared": lambda: _drop_lines(
        PYTHON_SERVICE, r"COPY shared/shared shared/shared"
    ),
    "orchestrator venv of another service": lambda: _broken(
        PYTHON_SERVICE, "--package crosscheck-orchestrator", "--package crosscheck-actor"
    ),
    "orchestrator healthcheck on another port": lambda: _broken(
        PYTHON_SERVICE,
        '"/opt/crosscheck/healthcheck.py", "ORCHESTRATOR_PORT"',
        '"/opt/crosscheck/healthcheck.py", "ACTOR_PORT"',
    ),
    "localhost only": lambda: _broken(PYTHON_SERVICE, "ACTOR_HOST=0.0.0.0", "ACTOR_HOST=127.0.0.1"),
    "baked secret": lambda: _broken(
        PYTHON_SERVICE, "ENV ACTOR_HOST=0.0.0.0", "ENV OPENAI_API_KEY=sk-123 ACTOR_HOST=0.0.0.0"
    ),
    "ADD instead of COPY": lambda: _broken(
        SANDBOX, "COPY infra/docker/healthcheck.py", "ADD infra/docker/healthcheck.py"
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_dockerfile_is_caught(name: str):
    assert all_problems(BROKEN[name]()) != [], name


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("bubblewrap python3 libseccomp2", "python3 libseccomp2"),
        ("bubblewrap python3 libseccomp2", "bubblewrap libseccomp2"),
        ("    && rm -rf /var/lib/apt/lists/*\n", "\n"),
    ],
)
def test_a_broken_sandbox_dockerfile_is_caught(old: str, new: str):
    assert sandbox_problems(_broken(SANDBOX, old, new)) != []


# ------------------------------------------------------------------ optional: hadolint
@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed")
@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_hadolint_finds_no_warnings(path: Path):
    result = subprocess.run(
        ["hadolint", "--failure-threshold", "warning", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr

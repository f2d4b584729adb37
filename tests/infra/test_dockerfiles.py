"""The Dockerfiles under infra/docker, checked without a Docker engine.

Each check returns a list of problems (empty when the file is right); the tests assert the
real files have none, and that deliberately broken copies of them do have some.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.infra._support import (
    ENTRYPOINT_SCRIPTS,
    REPO,
    SECRET_NAME,
    Dockerfile,
    console_spec,
    dockerfiles,
    entrypoint_script,
    exec_form,
    expand,
    healthcheck_arguments,
    is_root_user,
    load_dockerfile,
    member_for_package,
    package_dir,
    parse_dockerfile,
    served_package,
    split_flags,
    workspace_closure,
    workspace_members,
)

PYTHON_SERVICE = REPO / "infra" / "docker" / "python-service.Dockerfile"
SANDBOX = REPO / "infra" / "docker" / "sandbox.Dockerfile"
RUN_CONSOLE = REPO / "infra" / "docker" / "run_console.py"
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
        entrypoint = exec_form(raw_entrypoint)
        module = served_package(entrypoint)
        if module is None:
            problems.append(
                f"{where}: ENTRYPOINT {raw_entrypoint} is not exec-form python -m <pkg> "
                f"(or one of the scripts {sorted(ENTRYPOINT_SCRIPTS)})"
            )
            continue
        member = member_for_package(module)
        if member is None:
            problems.append(f"{where}: no workspace member ships the package {module!r}")
            continue
        if not (package_dir(member, module) / "__init__.py").is_file():
            problems.append(f"{where}: package {module!r} has no __init__.py in {member.path}")
        script = entrypoint_script(entrypoint)
        if script is None and not (package_dir(member, module) / "__main__.py").is_file():
            problems.append(f"{where}: python -m {module} needs {module}/__main__.py")
        if script is not None:
            problems += _script_problems(df, stage, script, where)
        problems += _venv_problems(df, stage, member.dist, where)
    return problems


def _script_problems(df: Dockerfile, stage, script: str, where: str) -> list[str]:
    """An entrypoint script is copied, from its one source, into the stage that runs it."""
    source = ENTRYPOINT_SCRIPTS[script][0]
    copies = [
        words
        for i in df.in_chain(stage, "COPY")
        if not split_flags(i.args)[0].get("from")
        for words in [split_flags(i.args)[1]]
        if words[-1:] == [script]
    ]
    if copies != [[source, script]]:
        return [f"{where}: ENTRYPOINT runs {script}, which is not copied from {source}"]
    return []


def _healthcheck_problems(df: Dockerfile, stage, where: str) -> list[str]:
    problems = []
    health = df.effective(stage, "HEALTHCHECK")
    if health is None or health.args.upper().startswith("NONE"):
        return [f"{where}: no HEALTHCHECK"]
    command = health.args[health.args.find("CMD") + 3 :].strip()
    arguments = healthcheck_arguments(exec_form(command) or [], HEALTHCHECK_SCRIPT)
    if arguments is None:
        return [f"{where}: HEALTHCHECK does not run {HEALTHCHECK_SCRIPT} PORT_VARIABLE: {command}"]
    port_variable, _ = arguments
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


def load_run_console(path: Path = RUN_CONSOLE) -> ModuleType:
    """infra/docker/run_console.py (the console image's ENTRYPOINT) as a module."""
    spec = importlib.util.spec_from_file_location("run_console_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def console_problems(df: Dockerfile) -> list[str]:
    """The console target: run_console.py, on the launcher's port and health path, with
    Streamlit's writable state on /tmp, from a venv of crosscheck-ui without extras."""
    stage = df.stage("console")
    if stage is None:
        return ["no console stage"]
    launcher = console_spec()
    prefix = launcher.env_prefix
    problems = []
    entrypoint = exec_form(stage.all("ENTRYPOINT")[-1].args) if stage.all("ENTRYPOINT") else None
    if served_package(entrypoint) != "console" or entrypoint_script(entrypoint) is None:
        problems.append(f"console: ENTRYPOINT {entrypoint!r} is not run_console.py")
    env = df.env(stage)
    if env.get(f"{prefix}PORT") != str(launcher.default_port):
        problems.append(
            f"console: {prefix}PORT={env.get(f'{prefix}PORT')!r}, the launcher's is "
            f"{launcher.default_port}"
        )
    health = df.effective(stage, "HEALTHCHECK")
    words = exec_form(health.args[health.args.find("CMD") + 3 :].strip()) if health else None
    expected = (f"{prefix}PORT", launcher.health_path)
    if healthcheck_arguments(words or [], HEALTHCHECK_SCRIPT) != expected:
        problems.append(f"console: HEALTHCHECK {words!r} does not probe {expected}")
    if not env.get("HOME", "").startswith("/tmp"):
        problems.append(f"console: HOME={env.get('HOME')!r} is not on the writable /tmp")
    if env.get("STREAMLIT_SERVER_FILE_WATCHER_TYPE") != "none":
        problems.append("console: Streamlit would watch (poll) the installed, unchanging files")
    if provider := [name for name in env if re.match(r"(OPENAI|ANTHROPIC)_", name)]:
        problems.append(f"console: the image sets provider variables {provider}")
    venv = df.stage("console-venv")
    syncs = [i.args for i in venv.all("RUN") if "uv sync" in i.args] if venv else []
    if not syncs or any("--package crosscheck-ui" not in a for a in syncs):
        problems.append("console: console-venv does not uv sync --package crosscheck-ui")
    if [a for a in syncs if "--extra" in a or "--all-extras" in a]:
        problems.append("console: console-venv installs extras (shared[providers] = SDKs)")
    return problems


def console_command_problems(image: ModuleType, df: Dockerfile) -> list[str]:
    """run_console.py builds exactly the launcher's command line, for the image's environment
    and for any other host and port, and its defaults are the image's."""
    launcher = console_spec()
    stage = df.stage("console")
    if stage is None:
        return ["no console stage"]
    env = df.env(stage)
    problems = []
    for settings in (env, {**env, "CONSOLE_HOST": "127.0.0.1", "CONSOLE_PORT": "9123"}):
        ours, theirs = image.command(settings), launcher.command(settings)
        if ours != theirs:
            problems.append(f"for {settings}: the image runs {ours}, the launcher {theirs}")
    if image.ENV_PREFIX != launcher.env_prefix:
        problems.append(f"ENV_PREFIX {image.ENV_PREFIX!r}, the launcher's {launcher.env_prefix!r}")
    defaults = (image.DEFAULT_HOST, str(image.DEFAULT_PORT))
    if defaults != (env.get("CONSOLE_HOST"), env.get("CONSOLE_PORT")):
        problems.append(f"run_console.py defaults {defaults} differ from the image's ENV")
    if image.DEFAULT_PORT != launcher.default_port:
        problems.append(
            f"DEFAULT_PORT {image.DEFAULT_PORT}, the launcher's {launcher.default_port}"
        )
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


def test_the_python_service_file_builds_actor_critic_fakemodel_orchestrator_and_console():
    df = load_dockerfile(PYTHON_SERVICE)
    modules = {
        s.name: served_package(exec_form(s.all("ENTRYPOINT")[-1].args)) for s in df.service_stages()
    }
    assert modules == {
        "actor": "actor",
        "critic": "critic",
        "research": "research",
        "fakemodel": "fakemodel",
        "orchestrator": "orchestrator",
        "console": "console",
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


def test_the_console_image_is_built_as_the_launcher_runs_it():
    assert console_problems(load_dockerfile(PYTHON_SERVICE)) == []


def test_the_console_image_runs_the_launchers_streamlit_command():
    """run_console.py and crosscheck.launcher.ConsoleSpec (`crosscheck up`) agree on the app
    script, the flags, the host and the port, so the image and the local stack cannot drift."""
    df = load_dockerfile(PYTHON_SERVICE)
    image = load_run_console()
    assert console_command_problems(image, df) == []
    stage = df.stage("console")
    assert stage is not None
    command = image.command(df.env(stage))
    assert command[:4] == [sys.executable, "-m", "streamlit", "run"]
    app = Path(command[4])
    assert app.parts[-2:] == ("console", "app.py")
    assert app.is_file()
    assert command[5:] == [
        "--server.headless=true",
        "--server.address=0.0.0.0",
        "--server.port=8501",
        "--browser.gatherUsageStats=false",
        "--client.toolbarMode=viewer",  # no Deploy button
    ]


def test_run_console_execs_streamlit(monkeypatch):
    image = load_run_console()
    calls = []
    monkeypatch.setattr(image.os, "execv", lambda path, argv: calls.append((path, argv)))
    monkeypatch.setenv("CONSOLE_HOST", "0.0.0.0")
    monkeypatch.setenv("CONSOLE_PORT", "8501")
    image.main()
    assert calls == [(sys.executable, image.command({"CONSOLE_PORT": "8501"}))]


@pytest.mark.parametrize("port", ["", "http", "0", "70000"])
def test_run_console_refuses_a_bad_port(monkeypatch, capsys, port):
    image = load_run_console()
    monkeypatch.setattr(image.os, "execv", lambda *_: pytest.fail("exec with a bad port"))
    monkeypatch.setenv("CONSOLE_PORT", port)
    assert image.main() == 2
    assert "CONSOLE_PORT" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"app.py"', '"main.py"'),
        ('"--browser.gatherUsageStats=false",\n', ""),
        ("--server.headless=true", "--server.headless=false"),
        ('f"--server.address={host}"', '"--server.address=0.0.0.0"'),
        ('f"--server.port={int(raw_port)}"', '"--server.port=8501"'),
        ('ENV_PREFIX = "CONSOLE_"', 'ENV_PREFIX = "UI_"'),
        ("DEFAULT_PORT = 8501", "DEFAULT_PORT = 8502"),
        ('DEFAULT_HOST = "0.0.0.0"', 'DEFAULT_HOST = "127.0.0.1"'),
    ],
)
def test_a_console_command_that_drifts_from_the_launcher_is_caught(tmp_path, old, new):
    text = RUN_CONSOLE.read_text()
    assert old in text, f"mutation target {old!r} not in {RUN_CONSOLE.name}"
    broken = tmp_path / "run_console.py"
    broken.write_text(text.replace(old, new))
    image = load_run_console(broken)
    assert console_command_problems(image, load_dockerfile(PYTHON_SERVICE)) != []


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
    "python -m of a package without __main__": lambda: _broken(
        SANDBOX, '"-m", "sandbox"', '"-m", "shared"'
    ),
    "console runs an unknown script": lambda: _broken(
        PYTHON_SERVICE, '"/opt/crosscheck/run_console.py"]', '"/opt/crosscheck/run-console.py"]'
    ),
    "console script not copied": lambda: _drop_lines(PYTHON_SERVICE, r"COPY infra/docker/run_con"),
    "console script copied from elsewhere": lambda: _broken(
        PYTHON_SERVICE, "COPY infra/docker/run_console.py", "COPY infra/docker/healthcheck.py"
    ),
    "console without its source": lambda: _broken(
        PYTHON_SERVICE, "COPY ui/console ui/console\n", ""
    ),
    "console without the ui manifest": lambda: _broken(
        PYTHON_SERVICE, "COPY ui/pyproject.toml ui/\n", ""
    ),
    "console venv of another service": lambda: _broken(
        PYTHON_SERVICE, "--package crosscheck-ui", "--package crosscheck-actor"
    ),
    "console port mismatch": lambda: _broken(PYTHON_SERVICE, "EXPOSE 8501", "EXPOSE 8502"),
    "console on loopback": lambda: _broken(
        PYTHON_SERVICE, "CONSOLE_HOST=0.0.0.0", "CONSOLE_HOST=127.0.0.1"
    ),
    "console healthcheck on another port": lambda: _broken(
        PYTHON_SERVICE, '"CONSOLE_PORT", "/_stcore/health"', '"ACTOR_PORT", "/_stcore/health"'
    ),
}


# What console_problems alone must catch (the generic checks above cannot know the launcher).
BROKEN_CONSOLE = {
    "no console stage": lambda: _broken(PYTHON_SERVICE, "AS console\n", "AS consol\n"),
    "healthcheck on /healthz": lambda: _broken(
        PYTHON_SERVICE, '"CONSOLE_PORT", "/_stcore/health"]', '"CONSOLE_PORT"]'
    ),
    "another port than the launcher's": lambda: _broken(
        PYTHON_SERVICE, "CONSOLE_PORT=8501", "CONSOLE_PORT=8502"
    ),
    "python -m console": lambda: _broken(
        PYTHON_SERVICE,
        '["python", "/opt/crosscheck/run_console.py"]',
        '["python", "-m", "console"]',
    ),
    "read-only home": lambda: _broken(PYTHON_SERVICE, "    HOME=/tmp \\\n", ""),
    "file watcher on": lambda: _broken(
        PYTHON_SERVICE,
        "STREAMLIT_SERVER_FILE_WATCHER_TYPE=none",
        "STREAMLIT_SERVER_FILE_WATCHER_TYPE=auto",
    ),
    "provider sdk extra": lambda: _broken(
        PYTHON_SERVICE, "--package crosscheck-ui", "--package crosscheck-ui --extra providers"
    ),
    "provider variable": lambda: _broken(
        PYTHON_SERVICE, "ENV CONSOLE_HOST=0.0.0.0", "ENV OPENAI_BASE_URL=x CONSOLE_HOST=0.0.0.0"
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN_CONSOLE))
def test_a_broken_console_dockerfile_is_caught(name: str):
    assert console_problems(BROKEN_CONSOLE[name]()) != [], name


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

"""What the infra tests share: the repository's layout and a small Dockerfile reader.

The reader understands what our Dockerfiles use (comments, line continuations, global ARG
defaults, named stages, exec-form JSON arguments); it is not a general Dockerfile parser.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crosscheck.launcher import ConsoleSpec

REPO = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO / "infra" / "docker"
COMPOSE_FILE = REPO / "docker-compose.yml"
DEMO_OVERRIDE = REPO / "infra" / "compose.demo.yml"
COMPOSE_SCHEMA = REPO / "infra" / "compose-spec.json"

# Only these services may hold model-provider credentials or endpoints.
PROVIDER_SERVICES = frozenset({"actor", "critic", "research"})
PROVIDER_ENV = re.compile(r"^(OPENAI|ANTHROPIC)_|_API_KEY$")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def console_spec() -> ConsoleSpec:
    """How ``crosscheck up`` starts the reviewer console (crosscheck.launcher.ConsoleSpec): the
    reference the console's image and compose service must agree with."""
    from crosscheck.launcher import SERVICES, ConsoleSpec

    spec = next(s for s in SERVICES if s.name == "console")
    assert isinstance(spec, ConsoleSpec)
    return spec


# ------------------------------------------------------------------------------ workspace
@dataclass(frozen=True)
class Member:
    """One uv workspace member: its folder, distribution name, import packages, dependencies."""

    path: str
    dist: str
    packages: tuple[str, ...]
    dependencies: tuple[str, ...]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower()


@cache
def workspace_members() -> dict[str, Member]:
    """Distribution name -> member, read from the root pyproject.toml."""
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    members: dict[str, Member] = {}
    for path in root["tool"]["uv"]["workspace"]["members"]:
        data = tomllib.loads((REPO / path / "pyproject.toml").read_text())
        project = data["project"]
        wheel = data.get("tool", {}).get("hatch", {}).get("build", {}).get("targets", {})
        packages = tuple(wheel.get("wheel", {}).get("packages", []))
        deps = tuple(_requirement_name(r) for r in project.get("dependencies", []))
        dist = project["name"].lower()
        members[dist] = Member(path=path, dist=dist, packages=packages, dependencies=deps)
    return members


def member_for_package(package: str) -> Member | None:
    """The workspace member whose wheel ships the import package ``package``."""
    for member in workspace_members().values():
        if package in {Path(p).name for p in member.packages}:
            return member
    return None


def package_dir(member: Member, package: str) -> Path:
    for p in member.packages:
        if Path(p).name == package:
            return REPO / member.path / p
    return REPO / member.path / package


def workspace_closure(dist: str) -> set[str]:
    """``dist`` and every workspace member it depends on, transitively."""
    members = workspace_members()
    seen: set[str] = set()
    todo = [dist]
    while todo:
        name = todo.pop()
        if name in seen or name not in members:
            continue
        seen.add(name)
        todo.extend(members[name].dependencies)
    return seen


# ----------------------------------------------------------------------------- Dockerfiles
@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    index: int
    base: str  # as written after FROM, global ARGs expanded
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def chain(self, stage: Stage) -> list[Stage]:
        """The stage and the stages it is built FROM, root first."""
        chain = [stage]
        while (parent := self.stage(chain[0].base)) is not None and parent not in chain:
            chain.insert(0, parent)
        return chain

    def root_image(self, stage: Stage) -> str:
        return self.chain(stage)[0].base

    def effective(self, stage: Stage, keyword: str) -> Instruction | None:
        """The instruction in force for ``stage`` (the last one, inherited through FROM)."""
        found = None
        for s in self.chain(stage):
            for instruction in s.all(keyword):
                found = instruction
        return found

    def in_chain(self, stage: Stage, keyword: str) -> list[Instruction]:
        return [i for s in self.chain(stage) for i in s.all(keyword)]

    def env(self, stage: Stage) -> dict[str, str]:
        values: dict[str, str] = {}
        for instruction in self.in_chain(stage, "ENV"):
            values.update(env_pairs(instruction.args))
        return values

    def service_stages(self) -> list[Stage]:
        """Stages that run a service: the ones with an ENTRYPOINT of their own."""
        return [s for s in self.stages if s.all("ENTRYPOINT")]


def expand(text: str, values: dict[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group(0))

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", substitute, text)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction text): comments dropped, continuations joined."""
    lines: list[tuple[int, str]] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1].strip())
            continue
        buffer.append(stripped)
        lines.append((start, " ".join(part for part in buffer if part)))
        buffer = []
    if buffer:
        lines.append((start, " ".join(buffer)))
    return lines


def parse_dockerfile(text: str, path: Path | None = None) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for number, line in logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            base = expand(words[0], global_args) if words else ""
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(index=len(stages), base=base, name=name, line=number))
        elif not stages:
            if keyword == "ARG":
                arg_name, _, default = args.partition("=")
                global_args[arg_name.strip()] = default.strip().strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, args, number))
    return Dockerfile(path=path or Path("<text>"), global_args=global_args, stages=stages)


@cache
def _load(path: Path) -> Dockerfile:
    return parse_dockerfile(path.read_text(), path)


def load_dockerfile(path: Path) -> Dockerfile:
    return _load(path.resolve())


def dockerfiles() -> list[Path]:
    return sorted(DOCKER_DIR.glob("*Dockerfile"))


def exec_form(args: str) -> list[str] | None:
    """The JSON array of an exec-form instruction, else None."""
    if not args.startswith("["):
        return None
    try:
        value = json.loads(args)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy "ENV NAME value"
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words if "=" in word)


def split_flags(args: str) -> tuple[dict[str, str], list[str]]:
    """``--from=x --chown=y a b c`` -> ({'from': 'x', 'chown': 'y'}, ['a', 'b', 'c'])."""
    flags: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        key, _, value = flag[2:].partition("=")
        flags[key] = value
        rest = rest.strip()
    words = exec_form(rest)
    return flags, (words if words is not None else shlex.split(rest))


def is_root_user(user: str) -> bool:
    name = user.split(":", 1)[0].strip()
    return name in {"", "root", "0"}


def python_module(entrypoint: list[str] | None) -> str | None:
    """``["python", "-m", "actor"]`` -> ``"actor"``."""
    if entrypoint and len(entrypoint) >= 3 and Path(entrypoint[0]).name.startswith("python"):
        if entrypoint[1] == "-m":
            return entrypoint[2]
    return None


# Images whose ENTRYPOINT is a script of ours rather than ``python -m <pkg>``: the script's path
# in the image -> (its source in the repository, the workspace package it serves).
ENTRYPOINT_SCRIPTS = {
    "/opt/crosscheck/run_console.py": ("infra/docker/run_console.py", "console"),
}


def entrypoint_script(entrypoint: list[str] | None) -> str | None:
    """``["python", "/opt/crosscheck/run_console.py"]`` -> that path, if it is one of ours."""
    if entrypoint and len(entrypoint) == 2 and Path(entrypoint[0]).name.startswith("python"):
        if entrypoint[1] in ENTRYPOINT_SCRIPTS:
            return entrypoint[1]
    return None


def served_package(entrypoint: list[str] | None) -> str | None:
    """The workspace package an image runs: ``python -m <pkg>``, or the package a known
    entrypoint script serves (the console's ``run_console.py`` -> ``console``)."""
    script = entrypoint_script(entrypoint)
    if script is not None:
        return ENTRYPOINT_SCRIPTS[script][1]
    return python_module(entrypoint)


def healthcheck_arguments(words: list[str], script: str) -> tuple[str, str] | None:
    """(port variable, path) of ``[..., script, PORT_VARIABLE, [PATH]]``, else None."""
    if script not in words:
        return None
    rest = words[words.index(script) + 1 :]
    if len(rest) not in (1, 2):
        return None
    return rest[0], rest[1] if len(rest) == 2 else "/healthz"

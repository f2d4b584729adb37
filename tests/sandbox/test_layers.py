"""Each isolation layer on its own: the composed bubblewrap command, then one probe per layer
(network namespace, filesystem view, seccomp rules, rlimits, pids cgroup) with the other layers
left out, so that no layer hides a hole in another (the seccomp socket rule alone would block
the network if the namespace leaked).

The probes build each layer from the service's own pieces (``bwrap_command``, the seccomp
program, ``job_rlimits``, ``PidsCgroups``) in a plain subprocess; nothing here can switch a
layer off in the service itself.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.isolation.bwrap import SANDBOX_DIR, BwrapOptions, bwrap_command, find_bwrap
from sandbox.isolation.cgroup import PidsCgroups
from sandbox.isolation.identity import SandboxIdentity, preexec, sandbox_identity
from sandbox.isolation.plan import plan_isolation, stage_inside_files
from sandbox.isolation.rlimits import ResourcePolicy, job_rlimits
from sandbox.isolation.seccomp import build_seccomp_program
from sandbox.worker import Worker
from tests.sandbox.conftest import NOBODY, require_bwrap, sandbox_settings

MIB = 1024 * 1024
PYTHON = "/usr/bin/python3"
# A uid nothing else on this host runs as, so that RLIMIT_NPROC counts only the probe's own.
PROBE_UID = 61_234


def flag_values(cmd: list[str], flag: str, arity: int) -> list[tuple[str, ...]]:
    """Every occurrence of ``flag`` in the bubblewrap part of ``cmd`` with its arguments."""
    head = cmd[: cmd.index("--")]
    return [tuple(head[i + 1 : i + 1 + arity]) for i, part in enumerate(head) if part == flag]


def probe(
    cmd: list[str],
    *,
    pass_fds: tuple[int, ...] = (),
    preexec_fn: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """Run a probe that prints one JSON object; its parsed output."""
    done = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        pass_fds=pass_fds,
        preexec_fn=preexec_fn,
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
        cwd="/",
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result: dict = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def inside_dir() -> Iterator[Path]:
    """The zygote and harness staged as the service stages them (bound at /sandbox)."""
    require_bwrap()
    folder = stage_inside_files()
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def namespaces_only(inside_dir: Path, **overrides) -> BwrapOptions:
    """Bubblewrap as the service composes it, without the seccomp filter."""
    bwrap = find_bwrap("bwrap")
    assert bwrap is not None
    values = {
        "bwrap": bwrap,
        "python": PYTHON,
        "inside_dir": inside_dir,
        "tmp_bytes": 8 * MIB,
        "shm_bytes": 4 * MIB,
        "seccomp_fd": None,
        "drop_caps": False,
        **overrides,
    }
    return BwrapOptions(**values)


def as_nobody() -> Callable[[], None] | None:
    return preexec(sandbox_identity(NOBODY, NOBODY), None)


# ---------------------------------------------------------------- the composed command
class TestComposedCommand:
    def test_the_service_composes_every_namespace_and_nothing_shared(self) -> None:
        require_bwrap()
        settings = sandbox_settings()
        plan = plan_isolation(settings)
        try:
            cmd, env = Worker(0, 0, plan=plan, settings=settings)._command(7, 9)
        finally:
            plan.close()
        bwrap_part = cmd[: cmd.index("--")]
        for flag in (
            "--unshare-all",  # user, mount, pid, net, ipc, uts, cgroup
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--clearenv",
        ):
            assert flag in bwrap_part, flag
        shared = [part for part in bwrap_part if part.startswith("--share")]
        assert shared == []
        assert flag_values(cmd, "--seccomp", 1) == [("9",)]
        # the only host folders inside: /usr and the staged zygote, both read-only
        assert flag_values(cmd, "--bind", 2) == []
        assert flag_values(cmd, "--dev-bind", 2) == []
        assert flag_values(cmd, "--ro-bind", 2) == [
            ("/usr", "/usr"),
            (str(plan.inside_dir), SANDBOX_DIR),
        ]
        assert flag_values(cmd, "--remount-ro", 1) == [("/dev",), ("/",)]
        assert flag_values(cmd, "--tmpfs", 1) == [("/dev/shm",), ("/tmp",)]
        assert flag_values(cmd, "--size", 1) == [
            (str(settings.shm_mb * MIB),),
            (str(settings.tmp_mb * MIB),),
        ]
        assert env == {"PATH": "/usr/bin:/bin"}
        program = cmd[cmd.index("--") + 1 :]
        assert program[:4] == [PYTHON, "-I", "-B", f"{SANDBOX_DIR}/zygote.py"]

    @pytest.mark.parametrize(("drop_caps", "expected"), [(True, [("ALL",)]), (False, [])])
    def test_capabilities_are_dropped_when_bubblewrap_runs_as_root(
        self, drop_caps: bool, expected: list
    ) -> None:
        options = namespaces_only(Path("/x"), drop_caps=drop_caps)
        assert flag_values(bwrap_command(options, ["true"]), "--cap-drop", 1) == expected

    def test_the_environment_inside_is_only_the_listed_variables(self) -> None:
        cmd = bwrap_command(namespaces_only(Path("/x")), ["true"])
        names = [name for name, _ in flag_values(cmd, "--setenv", 2)]
        assert sorted(names) == sorted(
            [
                "PATH",
                "HOME",
                "TMPDIR",
                "LANG",
                "PYTHONDONTWRITEBYTECODE",
                "PYTHONIOENCODING",
                "MALLOC_ARENA_MAX",
            ]
        )
        assert cmd.index("--clearenv") < cmd.index("--setenv")


# ---------------------------------------------------------------- network namespace alone
NETWORK_PROBE = """
import json, socket
found = {}
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect(("127.0.0.1", PORT))
    found["tcp"] = "connected"
except OSError as exc:
    found["tcp"] = exc.errno
found["interfaces"] = sorted(name for _, name in socket.if_nameindex())
print(json.dumps(found))
"""


class TestNetworkNamespace:
    """No seccomp filter: only the empty network namespace stands between a job and the host."""

    @pytest.fixture
    def listener(self) -> Iterator[socket.socket]:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        try:
            yield server
        finally:
            server.close()

    def network_probe(self, inside_dir: Path, port: int, *extra: str) -> dict:
        cmd = bwrap_command(
            namespaces_only(inside_dir),
            [PYTHON, "-I", "-c", NETWORK_PROBE.replace("PORT", str(port))],
        )
        end = cmd.index("--")
        cmd[end:end] = list(extra)  # after --unshare-all, where it would take effect
        return probe(cmd, preexec_fn=as_nobody())

    def test_a_job_reaches_no_host_port_and_has_only_loopback(
        self, inside_dir: Path, listener: socket.socket
    ) -> None:
        found = self.network_probe(inside_dir, listener.getsockname()[1])
        assert found["tcp"] != "connected"
        assert found["interfaces"] == ["lo"]

    def test_the_probe_sees_a_shared_network(
        self, inside_dir: Path, listener: socket.socket
    ) -> None:
        """The same probe with ``--share-net``: proof that it can tell."""
        found = self.network_probe(inside_dir, listener.getsockname()[1], "--share-net")
        assert found["tcp"] == "connected"
        assert found["interfaces"] != ["lo"]


# ---------------------------------------------------------------- filesystem view alone
FILESYSTEM_PROBE = """
import json, os
found = {"root": sorted(os.listdir("/"))}
found["visible"] = [p for p in ("/etc/passwd", "/root", "/home", "/var", "/work", "HOST")
                    if os.path.exists(p)]
writes = {}
for path in ("/x", "/usr/x", "/sandbox/x", "/dev/x", "/proc/x", "/tmp/x", "/dev/shm/x"):
    try:
        with open(path, "w") as handle:
            handle.write("x")
        writes[path] = "written"
    except OSError as exc:
        writes[path] = exc.errno
found["writes"] = writes
for mount in ("/tmp", "/dev/shm"):
    st = os.statvfs(mount)
    found[mount] = st.f_blocks * st.f_frsize
print(json.dumps(found))
"""


class TestFilesystemView:
    """No seccomp filter, no rlimits: the mount namespace alone hides the host."""

    def test_only_usr_the_sandbox_folder_and_fresh_mounts_are_there(
        self, inside_dir: Path, world_readable_dir: Path
    ) -> None:
        (world_readable_dir / "secret.txt").write_text("host data")
        cmd = bwrap_command(
            namespaces_only(inside_dir),
            [PYTHON, "-I", "-c", FILESYSTEM_PROBE.replace("HOST", str(world_readable_dir))],
        )
        found = probe(cmd, preexec_fn=as_nobody())
        assert found["root"] == [
            "bin",
            "dev",
            "lib",
            "lib64",
            "proc",
            "sandbox",
            "sbin",
            "tmp",
            "usr",
        ]
        assert found["visible"] == []
        written = sorted(path for path, result in found["writes"].items() if result == "written")
        assert written == ["/dev/shm/x", "/tmp/x"]
        assert (found["/tmp"], found["/dev/shm"]) == (8 * MIB, 4 * MIB)


# ---------------------------------------------------------------- seccomp rules alone
SECCOMP_PROBE = """
import ctypes, json, os, socket, sys
if len(sys.argv) > 1:
    from sandbox.inside.zygote import load_seccomp
    load_seccomp(int(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
found = {}
def attempt(name, call):
    try:
        call()
        found[name] = 0
    except OSError as exc:
        found[name] = exc.errno
def libc_call(name, *args):
    def call():
        if getattr(libc, name)(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    return call
attempt("inet_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
attempt("inet6_socket", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
attempt("unshare_user", libc_call("unshare", 0x10000000))
attempt("unshare_net", libc_call("unshare", 0x40000000))
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
found["fork"] = 0
# last: a traced process stops at its next signal, and nothing here would resume it
attempt("ptrace_traceme", libc_call("ptrace", 0, 0, 0, 0))
print(json.dumps(found), flush=True)
"""


class TestSeccomp:
    """No namespaces, no bubblewrap: the filter alone, loaded as the weak-mode zygote loads it."""

    def seccomp_probe(self, with_filter: bool) -> dict:
        cmd = [sys.executable, "-c", SECCOMP_PROBE]
        if not with_filter:
            return probe(cmd, env=dict(os.environ))
        fd = build_seccomp_program().memfd()
        try:
            return probe([*cmd, str(fd)], pass_fds=(fd,), env=dict(os.environ))
        finally:
            os.close(fd)

    def test_the_filter_alone_denies_network_sockets_namespaces_and_ptrace(self) -> None:
        require_bwrap()  # root: the unfiltered control below may create namespaces
        import errno

        assert self.seccomp_probe(with_filter=True) == {
            "inet_socket": errno.EAFNOSUPPORT,
            "inet6_socket": errno.EAFNOSUPPORT,
            "unix_socket": 0,
            "unshare_user": errno.EPERM,
            "unshare_net": errno.EPERM,
            "ptrace_traceme": errno.EPERM,
            "fork": 0,  # a job may still fork (the pids cgroup and rlimits bound it)
        }

    def test_the_probe_sees_an_unfiltered_process(self) -> None:
        require_bwrap()
        found = self.seccomp_probe(with_filter=False)
        assert (found["inet_socket"], found["unshare_net"], found["ptrace_traceme"]) == (0, 0, 0)


# ---------------------------------------------------------------- rlimits alone
RLIMIT_PROBE = """
import errno, json, os, resource, signal, sys, tempfile
limits = json.loads(sys.argv[1])
folder = tempfile.mkdtemp()
os.chown(folder, UID, UID)
for name, (soft, hard) in limits.items():
    resource.setrlimit(getattr(resource, name), (soft, hard))
os.setgroups([])
os.setresgid(UID, UID, UID)
os.setresuid(UID, UID, UID)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
found = {}
try:
    small = bytearray(8 * 1024 * 1024)
    found["alloc_8mb"] = "ok"
    del small
except MemoryError:
    found["alloc_8mb"] = "MemoryError"
try:
    big = bytearray(64 * 1024 * 1024)
    found["alloc_64mb"] = "ok"
except MemoryError:
    found["alloc_64mb"] = "MemoryError"
path = os.path.join(folder, "big")
written = 0
try:
    with open(path, "wb", buffering=0) as handle:
        for _ in range(8):
            written += handle.write(b"x" * 262144)
    found["file"] = written
except OSError as exc:
    found["file"] = exc.errno
opened = []
try:
    while len(opened) < 1000:
        opened.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    found["open_error"] = exc.errno
found["max_fd_count"] = len(opened)
children = []
try:
    while len(children) < 50:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        children.append(pid)
except OSError as exc:
    found["fork_error"] = exc.errno
found["forks"] = len(children)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
found["core"] = resource.getrlimit(resource.RLIMIT_CORE)
print(json.dumps(found))
"""


class TestRlimits:
    """No namespaces, no seccomp, no cgroup: the limits the service computes for a job, set on a
    plain process that then drops to an unused uid, as the zygote's child does."""

    POLICY = ResourcePolicy(max_processes=4, max_open_files=32, max_file_bytes=1 * MIB)

    def test_the_limits_for_a_job(self) -> None:
        limits = job_rlimits(
            timeout_s=2.5,
            memory_mb=100,
            baseline_vm_bytes=50 * MIB,
            policy=self.POLICY,
            nproc_base=1,
        )
        assert limits == {
            "RLIMIT_AS": (150 * MIB, 150 * MIB),  # the interpreter's own plus memory_mb
            "RLIMIT_CPU": (4, 5),  # the wall timeout rounded up, plus a second
            "RLIMIT_NPROC": (5, 5),
            "RLIMIT_FSIZE": (1 * MIB, 1 * MIB),
            "RLIMIT_NOFILE": (32, 32),
            "RLIMIT_CORE": (0, 0),
            "RLIMIT_MEMLOCK": (0, 0),
            "RLIMIT_MSGQUEUE": (0, 0),
        }

    def test_each_limit_stops_what_it_names(self) -> None:
        require_bwrap()  # root: needed to switch to the unused uid
        import errno

        baseline = self.interpreter_vm_bytes()
        limits = job_rlimits(
            timeout_s=5, memory_mb=32, baseline_vm_bytes=baseline, policy=self.POLICY, nproc_base=1
        )
        code = RLIMIT_PROBE.replace("UID", str(PROBE_UID))
        found = probe([sys.executable, "-c", code, json.dumps(limits)], env=dict(os.environ))
        assert found["alloc_8mb"] == "ok"
        assert found["alloc_64mb"] == "MemoryError"  # past memory_mb
        assert found["file"] == errno.EFBIG  # past max_file_bytes
        assert found["open_error"] == errno.EMFILE
        assert found["max_fd_count"] < 32  # stdin, stdout, stderr and the rest share the 32
        assert (found["fork_error"], found["forks"]) == (errno.EAGAIN, 4)  # 5 with the probe
        assert found["core"] == [0, 0]

    @staticmethod
    def interpreter_vm_bytes() -> int:
        """What the probe's interpreter has mapped after start-up (the zygote measures its own
        the same way, in /proc/self/status)."""
        code = (
            "import json, os, resource, signal, sys, tempfile\n"
            "line = [l for l in open('/proc/self/status') if l.startswith('VmSize')][0]\n"
            "print(int(line.split()[1]) * 1024)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, check=True, env=dict(os.environ)
        )
        return int(done.stdout) + 16 * MIB  # json and the probe's own allocations


# ---------------------------------------------------------------- pids cgroup alone
CGROUP_PROBE = """
import json, os, signal
children = []
error = None
try:
    while len(children) < 50:
        pid = os.fork()
        if pid == 0:
            os.setsid()  # an escape from the process group changes nothing for the cgroup
            signal.pause()
            os._exit(0)
        children.append(pid)
except OSError as exc:
    error = exc.errno
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(json.dumps({"forks": len(children), "error": error}))
"""


class TestPidsCgroup:
    """No namespaces, no seccomp, no rlimits (root ignores RLIMIT_NPROC): the cgroup alone."""

    def test_the_cgroup_caps_the_processes_of_a_job(self) -> None:
        require_bwrap()
        import errno

        cgroups, detail = PidsCgroups.create()
        if cgroups is None:
            pytest.fail(f"no pids cgroup: {detail}")
        try:
            worker = cgroups.worker("layer-probe", max_pids=6)
            join = preexec(SandboxIdentity(uid=0, gid=0, switch=False), worker.procs_file)
            found = probe(
                [sys.executable, "-c", CGROUP_PROBE], preexec_fn=join, env=dict(os.environ)
            )
            assert found == {"forks": 5, "error": errno.EAGAIN}  # 6 with the probe itself
            assert worker.pids() == []
        finally:
            cgroups.remove()

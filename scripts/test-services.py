"""The Postgres and the Redis the test suite talks to.

    python scripts/test-services.py start [--owner PID]   # stdout: `export NAME=value` lines
    python scripts/test-services.py stop                  # stops what `start` started

For each server, `start` uses the configured URL if it answers (CROSSCHECK_TEST_POSTGRES_URL
and CROSSCHECK_TEST_REDIS_URL, else the defaults below). Otherwise it installs the Debian
package if the binaries are missing and starts a throwaway server on a free loopback port,
with every file in one state directory whose path it exports as CROSSCHECK_TEST_SERVICES_DIR;
`stop` ends those servers and removes the directory. One line per server says which is used.
Progress goes to stderr: stdout carries only the exports, for `eval`.

The servers belong to the --owner process (default: the caller). Should it die without calling
`stop` (kill -9, a CI timeout), the next `start` or `stop` in this checkout stops them.

It runs in the project's environment (psycopg); scripts/test.sh calls it around pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg

REPO = Path(__file__).resolve().parent.parent
POSTGRES_ENV = "CROSSCHECK_TEST_POSTGRES_URL"
REDIS_ENV = "CROSSCHECK_TEST_REDIS_URL"
STATE_ENV = "CROSSCHECK_TEST_SERVICES_DIR"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
# Marks a state directory as ours (`stop` removes nothing that lacks it) and names its owner.
MARKER = ".crosscheck-test-services"
STATE_BASE = REPO / "var" / "test-services"
START_TIMEOUT_S = 30.0


def say(line: str) -> None:
    sys.stderr.write(f"[test-services] {line}\n")
    sys.stderr.flush()


def redacted(url: str) -> str:
    """The URL without its password, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


# ------------------------------------------------------------------ probes


def postgres_answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def redis_answers(url: str) -> bool:
    """PING over the Redis protocol (AUTH first if the URL has a password)."""
    parts = urlsplit(url)
    if parts.scheme != "redis":  # rediss:// (TLS) and unix sockets: not probed, not answering
        return False
    commands = []
    if parts.password is not None:
        auth = [unquote(parts.username)] if parts.username else []
        commands.append(["AUTH", *auth, unquote(parts.password)])
    commands.append(["PING"])
    request = b"".join(
        f"*{len(cmd)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in cmd)
        for cmd in commands
    )
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout=3) as sock:
            sock.sendall(request)
            reply = b""
            while reply.count(b"\r\n") < len(commands):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return reply.endswith(b"+PONG\r\n") and not reply.startswith(b"-")


# ------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def identity(pid: int) -> str | None:
    """`pid start-time` of a running process, which a reused pid does not repeat; None once it
    has exited (a zombie, which a container's init may be slow to reap, counts as exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else f"{pid} {fields[19]}"


def alive(pid: int) -> bool:
    return identity(pid) is not None


def end_process(pid: int, sig: signal.Signals, timeout_s: float = 10.0) -> None:
    """Send `sig`, wait for the process to go; SIGKILL it if it outstays the timeout."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def apt_install(package: str) -> None:
    """`apt-get install` as root, else with sudo, as scripts/bootstrap.sh does."""
    if shutil.which("apt-get") is None:
        raise SystemExit(f"[test-services] {package} is missing and there is no apt-get here")
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo"):
        prefix = ["sudo"]
    else:
        raise SystemExit(f"[test-services] {package} is missing; installing it needs root or sudo")
    say(f"installing {package} (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
    ):
        # `env` carries DEBIAN_FRONTEND through sudo, which drops the caller's environment.
        full = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", *command]
        if subprocess.run(full, env=env, stdout=subprocess.DEVNULL).returncode:
            raise SystemExit(f"[test-services] `{' '.join(full)}` failed")


def postgres_bindir() -> Path | None:
    """Debian's newest server binaries (/usr/lib/postgresql/<major>/bin), else initdb on PATH."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    if found:
        return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


# ------------------------------------------------------------------ state directory


@dataclass
class PostgresUser:
    """Who runs Postgres: it refuses root, so root hands it to the `postgres` system user."""

    uid: int
    gid: int
    name: str

    @classmethod
    def for_postgres(cls) -> PostgresUser:
        if os.geteuid() != 0:
            me = pwd.getpwuid(os.geteuid())
            return cls(me.pw_uid, me.pw_gid, me.pw_name)
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                user = pwd.getpwnam(name)
                return cls(user.pw_uid, user.pw_gid, user.pw_name)
        raise SystemExit("[test-services] Postgres refuses root and there is no postgres user")

    def run(self, cmd: list[str], cwd: Path | str) -> subprocess.CompletedProcess[str]:
        """Run `cmd` as this user (dropping root's groups too), capturing its output."""
        other = self.uid != os.geteuid()
        return subprocess.run(
            cmd,
            cwd=cwd,
            text=True,
            capture_output=True,
            user=self.uid if other else None,
            group=self.gid if other else None,
            extra_groups=[] if other else None,
        )

    def can_write(self, path: Path) -> bool:
        return self.run(["test", "-w", str(path)], cwd="/").returncode == 0


def make_state_dir(pg_user: PostgresUser, owner: str) -> Path:
    """var/test-services/<random> in the checkout if the Postgres user can reach it, else /tmp.

    The Unix socket lives in the data directory and its path must fit in 107 bytes."""
    candidates = []
    with contextlib.suppress(OSError):
        STATE_BASE.mkdir(parents=True, exist_ok=True)
        candidates.append(STATE_BASE)
    candidates.append(Path(tempfile.gettempdir()))
    for base in candidates:
        state = Path(tempfile.mkdtemp(prefix="cc-", dir=base))
        try:
            state.chmod(0o755)
            (state / MARKER).write_text(f"{REPO}\n{owner}\n")
            probe = state / "postgres"
            probe.mkdir()
            os.chown(probe, pg_user.uid, pg_user.gid)
            if len(str(probe / ".s.PGSQL.65535")) < 100 and pg_user.can_write(probe):
                return state
        except BaseException:
            remove_state_dir(state)
            raise
        remove_state_dir(state)
    raise SystemExit("[test-services] found no directory the Postgres user can write to")


def remove_state_dir(state: Path) -> None:
    shutil.rmtree(state, ignore_errors=True)
    if state.parent == STATE_BASE:
        with contextlib.suppress(OSError):  # once the last one is gone
            STATE_BASE.rmdir()


def orphans() -> list[Path]:
    """This checkout's state directories whose owner has exited without stopping them."""
    found = []
    for base in (STATE_BASE, Path(tempfile.gettempdir())):
        for state in base.glob("cc-*"):
            try:
                checkout, owner = (state / MARKER).read_text().splitlines()[:2]
            except (OSError, ValueError):
                continue  # not ours, or not readable by us
            if checkout == str(REPO) and identity(int(owner.split()[0])) != owner:
                found.append(state)
    return found


# ------------------------------------------------------------------ throwaway servers


def start_postgres(state: Path, pg_user: PostgresUser, bindir: Path) -> str:
    data = state / "postgres"  # made by make_state_dir, owned by `owner`
    initdb = pg_user.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
        + ["--encoding=UTF8", "--no-locale", "--no-sync"],
        cwd=state,
    )
    if initdb.returncode:
        raise SystemExit(f"[test-services] initdb failed:\n{initdb.stdout}{initdb.stderr}")
    socket_dir = str(data).replace("'", "''")
    for _ in range(3):  # the free port may be taken before Postgres binds it: try another
        port = free_port()
        # Later lines win in postgresql.conf; durability is not worth its cost in tests.
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {port}\n"
                f"unix_socket_directories = '{socket_dir}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            )
        started = pg_user.run(
            [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log")]
            + ["-w", "-t", str(int(START_TIMEOUT_S)), "start"],
            cwd=state,
        )
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        if started.returncode == 0 and postgres_answers(url):
            say(f"started a throwaway Postgres on 127.0.0.1:{port} under {state}")
            return url
        stop_postgres(data)
    log = (data / "server.log").read_text(errors="replace")[-2000:]
    raise SystemExit(f"[test-services] Postgres did not start:\n{log}")


def stop_postgres(data: Path) -> None:
    # SIGINT is Postgres's "fast" shutdown: it ends the sessions and exits at once.
    pid = read_pid(data / "postmaster.pid")
    if pid is not None:
        end_process(pid, signal.SIGINT)


def start_redis(state: Path, binary: str, db: str) -> str:
    home = state / "redis"
    home.mkdir(exist_ok=True)
    for _ in range(3):  # the free port may be taken before Redis binds it: try another
        port = free_port()
        log = home / f"redis-{port}.log"
        started = subprocess.run(
            [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
            + ["--appendonly", "no", "--daemonize", "yes", "--dir", str(home)]
            + ["--pidfile", str(home / "redis.pid"), "--logfile", str(log)],
            capture_output=True,
            text=True,
        )
        url = f"redis://127.0.0.1:{port}{db}"
        # The daemon binds after the command returns; a failed bind only shows in its log.
        deadline = time.monotonic() + START_TIMEOUT_S
        while started.returncode == 0 and time.monotonic() < deadline:
            if redis_answers(url):
                say(f"started a throwaway Redis on 127.0.0.1:{port} under {state}")
                return url
            if log.exists() and "Could not create server TCP listening" in log.read_text():
                break
            time.sleep(0.05)
        stop_redis(home)
    output = log.read_text(errors="replace")[-2000:] if log.exists() else started.stderr
    raise SystemExit(f"[test-services] Redis did not start:\n{output}")


def stop_redis(home: Path) -> None:
    pid = read_pid(home / "redis.pid")
    if pid is not None:
        end_process(pid, signal.SIGTERM)  # with --save "" it exits without writing a dump


# ------------------------------------------------------------------ commands


class Throwaways:
    """The state directory of this run's throwaway servers, made when the first one is needed."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.state: Path | None = None

    def directory(self) -> Path:
        if self.state is None:
            self.state = make_state_dir(PostgresUser.for_postgres(), self.owner)
        return self.state


def provide_postgres(url: str, throwaways: Throwaways) -> str:
    if not postgres_answers(url) and postgres_bindir() is None:
        apt_install("postgresql")  # Debian's package may start a cluster on 5432: ask again
    if postgres_answers(url):
        say(f"using the running Postgres at {redacted(url)}")
        return url
    bindir = postgres_bindir()
    if bindir is None:
        raise SystemExit("[test-services] no initdb found after installing postgresql")
    return start_postgres(throwaways.directory(), PostgresUser.for_postgres(), bindir)


def provide_redis(url: str, throwaways: Throwaways) -> str:
    if not redis_answers(url) and shutil.which("redis-server") is None:
        apt_install("redis-server")  # which may start Debian's Redis on 6379: ask again
    if redis_answers(url):
        say(f"using the running Redis at {redacted(url)}")
        return url
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("[test-services] no redis-server found after installing it")
    return start_redis(throwaways.directory(), binary, db=urlsplit(url).path or "/15")


def start(owner_pid: int) -> None:
    owner = identity(owner_pid)
    if owner is None:
        raise SystemExit(f"[test-services] --owner {owner_pid}: no such process")
    for orphan in orphans():
        stop(orphan, "left by an interrupted run ")
    throwaways = Throwaways(owner)
    # A failure or Ctrl-C half-way stops what was already started; SIGTERM does the same.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        postgres_url = provide_postgres(
            os.environ.get(POSTGRES_ENV) or DEFAULT_POSTGRES_URL, throwaways
        )
        redis_url = provide_redis(os.environ.get(REDIS_ENV) or DEFAULT_REDIS_URL, throwaways)
    except BaseException:
        if throwaways.state is not None:
            stop(throwaways.state)
        raise
    exports = {
        POSTGRES_ENV: postgres_url,
        REDIS_ENV: redis_url,
        STATE_ENV: str(throwaways.state or ""),
    }
    sys.stdout.write("".join(f"export {k}={shlex.quote(v)}\n" for k, v in exports.items()))


def stop(state: Path, why: str = "") -> None:
    """Stop the throwaway servers in `state` and remove it (nothing if it is not ours)."""
    if not (state / MARKER).is_file():
        return
    stop_postgres(state / "postgres")
    stop_redis(state / "redis")
    remove_state_dir(state)
    say(f"stopped the throwaway servers {why}under {state}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("--owner", type=int, default=os.getppid(), help="(start) their owner")
    args = parser.parse_args()
    if args.command == "start":
        start(args.owner)
        return
    if os.environ.get(STATE_ENV):
        stop(Path(os.environ[STATE_ENV]))
    for state in orphans():
        stop(state, "left by an interrupted run ")


if __name__ == "__main__":
    main()

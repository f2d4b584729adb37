"""A small reader for nginx configuration files, and what the proxy's config must do.

The reader understands nginx's syntax as our config uses it (directives ending in `;`, blocks
in braces, `#` comments, single- and double-quoted arguments); it does not follow `include`.
The checks return lists of problems, like the compose checks in test_compose.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from shared.contracts import MAX_BODY_BYTES

# The headers every proxied request must carry to the replicas.
FORWARDED_HEADERS = ("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host")
# The live events endpoint (a websocket) and how long an idle one must be allowed to stay open.
WEBSOCKET_PATH = "/v1/events"
MIN_WEBSOCKET_TIMEOUT_S = 3600
DOCKER_DNS = "127.0.0.11"
TEMP_PATHS = (
    "client_body_temp_path",
    "proxy_temp_path",
    "fastcgi_temp_path",
    "uwsgi_temp_path",
    "scgi_temp_path",
)


@dataclass
class Directive:
    name: str
    args: list[str]
    line: int
    block: list[Directive] | None = None  # children, for `name args { ... }`

    def all(self, name: str) -> list[Directive]:
        return [d for d in self.block or [] if d.name == name]

    def first(self, name: str) -> Directive | None:
        found = self.all(name)
        return found[0] if found else None


@dataclass
class Config:
    directives: list[Directive] = field(default_factory=list)

    def all(self, name: str) -> list[Directive]:
        return [d for d in self.directives if d.name == name]

    def first(self, name: str) -> Directive | None:
        found = self.all(name)
        return found[0] if found else None

    def walk(self) -> Iterator[Directive]:
        todo = list(self.directives)
        while todo:
            directive = todo.pop(0)
            yield directive
            todo.extend(directive.block or [])


TOKEN = re.compile(r"""#[^\n]*|"((?:\\.|[^"\\])*)"|'((?:\\.|[^'\\])*)'|([{};])|([^\s{};"'#]+)""")


def parse(text: str) -> Config:
    stack: list[list[Directive]] = [[]]
    words: list[str] = []
    start = 0
    for match in TOKEN.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if match.group(0).startswith("#") and match.group(4) is None:
            continue
        quoted = match.group(1) if match.group(1) is not None else match.group(2)
        if quoted is not None or match.group(4) is not None:
            if not words:
                start = line
            words.append(quoted if quoted is not None else match.group(4))
            continue
        punct = match.group(3)
        if punct == ";":
            if not words:
                raise ValueError(f"line {line}: empty directive")
            stack[-1].append(Directive(words[0], words[1:], start))
            words = []
        elif punct == "{":
            if not words:
                raise ValueError(f"line {line}: block without a name")
            block: list[Directive] = []
            stack[-1].append(Directive(words[0], words[1:], start, block))
            stack.append(block)
            words = []
        elif punct == "}":
            if words or len(stack) == 1:
                raise ValueError(f"line {line}: unexpected '}}'")
            stack.pop()
    if words or len(stack) != 1:
        raise ValueError("unterminated directive or block at the end of the file")
    return Config(stack[0])


def seconds(value: str) -> float:
    """nginx time: ``90``, ``90s``, ``5m``, ``1h``, ``1h30m``, ``500ms``."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "": 1}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"not an nginx time: {value!r}")
    return sum(int(n) * units[u] for n, u in parts)


def size_bytes(value: str) -> int:
    """nginx size: ``1024``, ``64k``, ``2m``, ``1g`` (``0``: no limit)."""
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", value)
    if match is None:
        raise ValueError(f"not an nginx size: {value!r}")
    return (
        int(match.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(2).lower()]
    )


# ------------------------------------------------------------------------- what it does
@dataclass(frozen=True)
class Server:
    """One `server` of an upstream block."""

    host: str
    port: int
    params: dict[str, str]  # name -> value ('' for a flag such as `resolve`)


def http_block(config: Config) -> Directive | None:
    return config.first("http")


def upstreams(config: Config) -> dict[str, list[Server]]:
    http = http_block(config)
    found: dict[str, list[Server]] = {}
    for upstream in http.all("upstream") if http else []:
        servers = []
        for server in upstream.all("server"):
            host, _, port = server.args[0].rpartition(":")
            params = dict(arg.partition("=")[::2] for arg in server.args[1:])
            servers.append(Server(host or server.args[0], int(port or 80), params))
        found[upstream.args[0]] = servers
    return found


def servers(config: Config) -> list[Directive]:
    http = http_block(config)
    return http.all("server") if http else []


def locations(server: Directive) -> dict[str, Directive]:
    """`location [=] path` -> the location block, keyed by ``"= /path"`` or ``"/path"``."""
    return {" ".join(location.args): location for location in server.all("location")}


def effective(name: str, *levels: Directive | None) -> list[Directive]:
    """The ``name`` directives in force in the innermost level (nginx inherits an array-type
    directive such as proxy_set_header only while the inner level sets none of its own)."""
    for level in reversed(levels):
        if level is not None and level.all(name):
            return level.all(name)
    return []


def effective_headers(http: Directive | None, *inner: Directive) -> dict[str, str]:
    return {
        d.args[0].lower(): d.args[1] if len(d.args) > 1 else ""
        for d in effective("proxy_set_header", http, *inner)
    }


def effective_value(name: str, *levels: Directive | None) -> list[str] | None:
    found = effective(name, *levels)
    return found[-1].args if found else None


def proxied_upstream(location: Directive) -> str | None:
    """The upstream a location's `proxy_pass http://<name>` sends to."""
    proxy_pass = location.first("proxy_pass")
    if proxy_pass is None:
        return None
    match = re.fullmatch(r"https?://([^/:$]+)/?", proxy_pass.args[0])
    return match.group(1) if match else None


def connection_upgrade_maps(config: Config) -> set[str]:
    """Variables mapped from $http_upgrade to `upgrade` (and to '' without an Upgrade)."""
    http = http_block(config)
    found = set()
    for block in http.all("map") if http else []:
        if len(block.args) != 2 or block.args[0] != "$http_upgrade":
            continue
        entries = {d.name: d.args[0] if d.args else "" for d in block.block or []}
        if entries.get("default") == "upgrade" and entries.get("") in ("", "close"):
            found.add(block.args[1])
    return found


def config_problems(config: Config, *, replicas: dict[str, int] | None = None) -> list[str]:
    """What the proxy's nginx.conf must do. ``replicas``: service name -> port, from compose."""
    problems: list[str] = []
    http = http_block(config)
    if http is None:
        return ["no http block"]

    # Non-root on a read-only root: no `user`, the pid file and every temporary file in /tmp.
    if config.first("user"):
        problems.append("`user` directive: it needs a root master (the proxy runs as uid 101)")
    pid = config.first("pid")
    if pid is None or not pid.args[0].startswith("/tmp/"):
        problems.append(f"pid file {pid.args if pid else None} is not under /tmp (read-only root)")
    for name in TEMP_PATHS:
        value = effective_value(name, http)
        if value is None or not value[0].startswith("/tmp/"):
            problems.append(f"{name} is {value}, not under /tmp (read-only root)")

    # The replicas: one upstream, every replica in it with passive health checks, re-resolved.
    groups = upstreams(config)
    if len(groups) != 1:
        problems.append(f"expected one upstream for the replicas, found {sorted(groups)}")
    upstream_name, members = next(iter(groups.items()), ("", []))
    if replicas is not None:
        found = {(s.host, s.port) for s in members}
        expected = set(replicas.items())
        if found != expected:
            problems.append(
                f"upstream servers {sorted(found)} are not the replicas {sorted(expected)}"
            )
    if len(members) < 2:
        problems.append(f"upstream has {len(members)} server(s): nothing to fail over to")
    upstream = next((u for u in http.all("upstream") if u.args[0] == upstream_name), None)
    for server in members:
        for param in ("max_fails", "fail_timeout"):
            if param not in server.params:
                problems.append(f"upstream server {server.host}: no {param} (passive health)")
        if server.params.get("max_fails") == "0":
            problems.append(f"upstream server {server.host}: max_fails=0 never marks it failed")
        if "resolve" not in server.params or "backup" in server.params:
            problems.append(
                f"upstream server {server.host}: without `resolve` nginx resolves it once, at "
                "start: a replica recreated on another address would never get traffic again"
            )
    if upstream is not None and upstream.first("zone") is None:
        problems.append("upstream has no zone (`resolve` and shared failure counts need one)")
    resolver = effective_value("resolver", http, upstream)
    if not resolver or resolver[0] != DOCKER_DNS:
        problems.append(f"resolver is {resolver}, not Docker's embedded DNS {DOCKER_DNS}")

    # The server: listens on every address, proxies everything to the replicas.
    maps = connection_upgrade_maps(config)
    listed = servers(config)
    if len(listed) != 1:
        problems.append(f"expected one server block, found {len(listed)}")
    for block in listed:
        for listen in block.all("listen"):
            if listen.args[0].startswith(("127.", "localhost", "[::1]")):
                problems.append(f"listens on loopback only ({listen.args[0]})")
        body = effective_value("client_max_body_size", http, block)
        limit = size_bytes(body[0]) if body else 1024**2  # nginx's default is 1m
        if limit != 0 and limit <= MAX_BODY_BYTES:
            problems.append(
                f"client_max_body_size {body} is not above the API's {MAX_BODY_BYTES} bytes: "
                "nginx, not the API, would answer 413"
            )
        all_locations = locations(block)
        if "/" not in all_locations:
            problems.append("no `location /`: not everything reaches the API")
        websocket = all_locations.get(f"= {WEBSOCKET_PATH}") or all_locations.get(WEBSOCKET_PATH)
        if websocket is None:
            problems.append(f"no location for {WEBSOCKET_PATH} (the websocket needs long timeouts)")
        for key, location in all_locations.items():
            if proxied_upstream(location) != upstream_name:
                problems.append(f"location {key}: does not proxy_pass to the replicas' upstream")
                continue
            headers = effective_headers(http, block, location)
            for header in FORWARDED_HEADERS:
                if header.lower() not in headers:
                    problems.append(f"location {key}: does not pass {header}")
            version = effective_value("proxy_http_version", http, block, location)
            if version != ["1.1"]:
                problems.append(
                    f"location {key}: proxy_http_version {version} (websockets and upstream "
                    "keepalive need 1.1)"
                )
            retry = effective_value("proxy_next_upstream", http, block, location) or [
                "error",
                "timeout",
            ]
            if "error" not in retry or "off" in retry:
                problems.append(
                    f"location {key}: proxy_next_upstream {retry} does not retry a refused "
                    "connection on the next replica"
                )
            if "non_idempotent" in retry:
                problems.append(
                    f"location {key}: proxy_next_upstream non_idempotent could run a POST twice"
                )
        if websocket is not None and proxied_upstream(websocket) == upstream_name:
            headers = effective_headers(http, block, websocket)
            if headers.get("upgrade") != "$http_upgrade":
                problems.append(f"{WEBSOCKET_PATH}: Upgrade is not passed on ($http_upgrade)")
            if headers.get("connection") not in maps | {"upgrade", '"upgrade"'}:
                problems.append(
                    f"{WEBSOCKET_PATH}: Connection is {headers.get('connection')!r}, not "
                    "upgrade (or a map of $http_upgrade to it)"
                )
            timeout = effective_value("proxy_read_timeout", http, block, websocket)
            if timeout is None or seconds(timeout[0]) < MIN_WEBSOCKET_TIMEOUT_S:
                problems.append(
                    f"{WEBSOCKET_PATH}: proxy_read_timeout {timeout} would cut an idle "
                    f"websocket before {MIN_WEBSOCKET_TIMEOUT_S} s (the default is 60 s)"
                )
    return problems


def listen_port(config: Config) -> int | None:
    for server in servers(config):
        for listen in server.all("listen"):
            port = listen.args[0].rpartition(":")[2]
            if port.isdigit():
                return int(port)
    return None


def for_nginx_test(
    text: str, prefix: str, backends: dict[str, str] | None = None, listen: str | None = None
) -> str:
    """The config as a local nginx can load it, outside the stack:

    - /tmp/... (the container's tmpfs) becomes ``prefix``/...;
    - each replica's ``name:port``, which only Docker's DNS knows, becomes
      ``backends[name]`` (default ``127.0.0.1:port``), and the `resolve` flag goes: nginx
      resolves a plain `server` name when it loads the file, and Debian's nginx (1.22 on
      bookworm, 1.26 on trixie) predates the open-source `resolve` parameter (1.27.3) that
      the image's nginx (1.28) has;
    - with ``listen``, the server listens there instead (``127.0.0.1:<free port>``).
    """
    backends = backends or {}
    text = re.sub(r"(?<=\s)/tmp/", prefix.rstrip("/") + "/", text)
    members = [s for group in upstreams(parse(text)).values() for s in group]
    for server in members:
        address = backends.get(server.host, f"127.0.0.1:{server.port}")
        text = re.sub(rf"(?<=\sserver ){re.escape(server.host)}:{server.port}(?=\s)", address, text)
    if listen is not None:
        text = re.sub(r"(?<=\slisten )\S+(?=;)", listen, text)
    return re.sub(r"(?<=\S)[ \t]+resolve(?=[\s;])", "", text)

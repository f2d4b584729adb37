"""Where webhooks may go: never inside (loopback, private, link-local, metadata, ...).

A target is checked when it is registered (a subscription's ``url``, a run's
``callback_url``) and again before every delivery, because DNS can change in between. The
delivery then connects to the address that was checked (see ``Verdict.address``), so a
second resolution cannot swap it. Hosts listed in ``ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS``
(names, or CIDRs the resolved addresses fall in) are exempt; ``http://`` is for them only.

The ranges come from the standard library's ``ipaddress`` (``is_global`` and friends follow
the IANA special-purpose registries and are maintained with CPython) plus the few it calls
global that are not for us: multicast, CGNAT (100.64/10, where Alibaba's metadata lives),
other clouds' metadata addresses, and IPv4 embedded in IPv6 (mapped, 6to4, NAT64).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_HOSTS_SETTING = "ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS"
CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Instance metadata that ``ipaddress`` does not already class as non-global.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, ...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IPv6
        "100.100.100.200",  # Alibaba
        "168.63.129.16",  # Azure wire server
        "192.0.0.192",  # Oracle
    )
)
# Names that reach the machine itself or its cloud's metadata, whatever DNS says of them.
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
    }
)
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_IPV4_LOOSE = frozenset(string.hexdigits + "xX.")


class TargetRefused(Exception):
    """A webhook target that must not be sent to; ``reason`` never holds the URL."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unresolvable(TargetRefused):
    """The host has no address (or none within the time allowed): nothing could be checked."""


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Every address ``host`` has now; raise ``Unresolvable`` when it has none."""
        ...


class SystemResolver:
    """The system's resolver, in the event loop's executor (the caller bounds the time)."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise Unresolvable("its host does not resolve to any address") from None
        found: list[IPAddress] = []
        for *_, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in found:
                found.append(address)
        if not found:
            raise Unresolvable("its host does not resolve to any address")
        return found


class StaticResolver:
    """In-memory resolver for tests: a table of names (lower case, no trailing dot) to
    addresses, which a test may change between registration and delivery."""

    def __init__(self, table: Mapping[str, Sequence[str]] | None = None) -> None:
        self.table: dict[str, list[str]] = {k: list(v) for k, v in (table or {}).items()}
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        name = host.lower().rstrip(".")
        self.asked.append(name)
        addresses = self.table.get(name)
        if not addresses:
            raise Unresolvable("its host does not resolve to any address")
        return [ipaddress.ip_address(a) for a in addresses]


def ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` names literally, in any form a resolver would accept: dotted
    quad, IPv6 (bracketed or not, with a zone), and ``inet_aton``'s forms (``127.1``,
    ``0x7f000001``, ``2130706433``, ``0``, octal parts). IPv4-mapped IPv6 is unwrapped."""
    text = host.strip().removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        address: IPAddress = ipaddress.ip_address(text)
    except ValueError:
        if not text or not set(text) <= _IPV4_LOOSE or not text[0].isdigit():
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` is no place for a webhook (None: it is a public address)."""
    inner: IPAddress = address
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            inner = address.ipv4_mapped
        elif address.sixtofour is not None:
            inner = address.sixtofour
        elif address in NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    for candidate in dict.fromkeys((inner, address)):  # the embedded one says more
        if candidate in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if candidate.is_unspecified:
            return "the unspecified address (it reaches this machine)"
        if candidate.is_loopback:
            return "a loopback address"
        if candidate.is_link_local:
            return "a link-local address (cloud metadata lives there)"
        if candidate.is_multicast:
            return "a multicast address"
        if isinstance(candidate, ipaddress.IPv4Address) and candidate in CGNAT:
            return "a shared (CGNAT, 100.64.0.0/10) address"
        if candidate.is_reserved:
            return "a reserved address"
        if candidate.is_private:
            return "a private address"
        if not candidate.is_global:
            return "a special-purpose address that is not globally reachable"
    return None


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")


@dataclass(frozen=True)
class AllowList:
    """``ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS``: host names and CIDRs webhooks may reach even
    though they are inside (and over plain http)."""

    names: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, raw: str) -> AllowList:
        """Comma-separated names and CIDRs (a bare address is its own /32 or /128);
        raises ValueError naming the entry that is neither."""
        names: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in (e.strip() for e in raw.split(",")):
            if not entry:
                continue
            literal = ip_literal(entry) if "/" not in entry else None
            if literal is not None:
                networks.append(ipaddress.ip_network(literal))
                continue
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError(
                        f"{ALLOW_HOSTS_SETTING}: {entry!r} is not a CIDR (as in 10.0.0.0/8)"
                    ) from None
                continue
            name = _name(entry)
            if not _NAME.match(name):
                raise ValueError(
                    f"{ALLOW_HOSTS_SETTING}: {entry!r} is neither a host name nor a CIDR"
                )
            names.add(name)
        return cls(frozenset(names), tuple(networks))

    def covers(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)

    def covers_all(self, addresses: Iterable[IPAddress]) -> bool:
        listed = list(addresses)
        return bool(listed) and all(self.covers(a) for a in listed)


@dataclass(frozen=True)
class Verdict:
    """A target that may be sent to. ``address``: connect there (the address that was
    checked); None: the host is allow-listed by name and connected to as usual."""

    address: IPAddress | None


class TargetGuard:
    def __init__(self, allow: AllowList, resolver: Resolver, *, timeout_s: float) -> None:
        self.allow = allow
        self._resolver = resolver
        self._timeout_s = timeout_s

    async def check(self, url: str) -> Verdict:
        """The verdict on ``url`` (an absolute http(s) URL with a host, as ``http_url``
        admits), or ``TargetRefused`` saying why, in words that never repeat the URL."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        name = _name(host)
        if name in self.allow.names:
            return Verdict(address=None)
        plain = parts.scheme != "https"
        literal = ip_literal(host)
        if literal is not None:
            addresses = [literal]
        else:
            if name == "localhost" or name.endswith(LOCAL_SUFFIXES) or name in METADATA_NAMES:
                raise TargetRefused(
                    "its host is a local or cloud-metadata name; list it in "
                    f"{ALLOW_HOSTS_SETTING} to allow it"
                )
            port = parts.port or (80 if plain else 443)
            try:
                async with asyncio.timeout(self._timeout_s):
                    addresses = await self._resolver.resolve(host, port)
            except TimeoutError:
                raise Unresolvable(
                    f"its host could not be resolved within {self._timeout_s:g} s"
                ) from None
        listed = self.allow.covers_all(addresses)
        if not listed:
            for address in addresses:
                if self.allow.covers(address):
                    continue
                why = refusal(address)
                if why is not None:
                    what = "is" if literal is not None else "resolves to"
                    raise TargetRefused(
                        f"its host {what} {why}; webhooks may only reach public addresses "
                        f"unless the host is listed in {ALLOW_HOSTS_SETTING}"
                    )
            if plain:
                raise TargetRefused(
                    "http:// is only allowed to hosts listed in "
                    f"{ALLOW_HOSTS_SETTING}; use https://"
                )
        return Verdict(address=addresses[0])

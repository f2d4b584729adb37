"""Webhook targets never reach inside: loopback (in every literal form a resolver accepts),
private, link-local, CGNAT, multicast, reserved and cloud-metadata addresses and names are
refused at registration, a subscription's url and a run's callback_url alike (422 naming the
field, the URL not repeated); a name that DNS moves inside after it was registered is refused
again at delivery, with no request sent, and a delivery connects to the address that was
checked. ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS lists the exceptions, and nothing else is one.

Names are looked up in an in-memory resolver (``StaticResolver``): no test asks real DNS,
and nothing is ever sent beyond loopback."""

import asyncio
import base64
import ipaddress
import secrets

import httpx
import pytest

from orchestrator.app import create_app
from orchestrator.settings import OrchestratorSettings
from orchestrator.webhooks.targets import AllowList, IPAddress, StaticResolver, ip_literal
from orchestrator.webhooks.targets import refusal as why_refused
from tests.orchestrator.conftest import ADMIN_TOKEN, start, wait_for
from tests.orchestrator.webhook_receiver import Receiver
from tests.support.apps import serving
from tests.support.servers import free_port

SUB_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
PLATFORM_SECRET = "platform-signing-secret-" + secrets.token_hex(16)
FINAL = {"succeeded", "escalated", "failed", "cancelled"}
PUBLIC = "93.184.215.14"  # example.com: resolved in the stub only, never sent to
SECRET_QUERY = "?token=" + "q" * 8 + secrets.token_hex(8)  # a URL may carry a secret


@pytest.fixture
def allow_hosts():
    return ""


@pytest.fixture
def orchestrator_settings(orchestrator_settings, allow_hosts):
    values = {
        "webhook_secret": PLATFORM_SECRET,
        "webhook_retry_initial_s": 0.2,
        "webhook_retry_max_s": 0.5,
        "webhook_max_attempts": 30,
        "webhook_timeout_s": 2.0,
        "webhook_resolve_timeout_s": 0.5,
        "webhook_allow_hosts": allow_hosts,
    }
    return type(orchestrator_settings).model_validate(
        {**orchestrator_settings.model_dump(), **values}
    )


class PublicOnce(StaticResolver):
    """A name on the public address answers once (its registration): a delivery to it finds
    no address and is never sent."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        found = await super().resolve(host, port)
        if str(found[0]) == PUBLIC:
            del self.table[host.lower().rstrip(".")]
        return found


@pytest.fixture
def resolver():
    return PublicOnce(
        {
            "hooks.example.com": [PUBLIC],
            "cb.example.com": [PUBLIC],
            "plain.example.com": [PUBLIC],
            "localhost": ["127.0.0.1", "::1"],
            "intranet.example.com": ["10.1.2.3"],
            "split.example.com": [PUBLIC, "192.168.0.10"],
            "mixed.example.com": ["10.9.9.9", PUBLIC],
            "hooks.rebind.test": ["127.0.0.1"],
        }
    )


@pytest.fixture
async def orchestrator_app(orchestrator_settings, peers, resolver):
    return create_app(orchestrator_settings, peer_transports=peers, webhook_resolver=resolver)


async def register(api, url: str):
    return await api.post(
        "/v1/webhooks", json={"url": url, "events": ["run.finished"], "secret": SUB_SECRET}
    )


async def create_run(api, callback_url: str):
    return await api.post("/v1/runs", json={"task": "Explain tides.", "callback_url": callback_url})


def refusal(response, field: str) -> str:
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "WebhookRefused", response.text
    [detail] = response.json()["detail"]
    assert detail["loc"] == ["body", field]
    return str(detail["msg"])


INSIDE = [
    # (url, what the refusal says): https throughout, so the address alone is refused
    ("https://169.254.169.254/latest/meta-data/", "metadata"),
    ("https://169.254.170.2/v2/credentials", "metadata"),
    ("https://100.100.100.200/latest/meta-data/", "metadata"),
    ("https://[fd00:ec2::254]/latest/meta-data/", "metadata"),
    ("https://168.63.129.16/machine", "metadata"),
    ("https://metadata.google.internal/computeMetadata/v1/", "metadata name"),
    ("https://metadata.azure.com/metadata/instance", "metadata name"),
    ("https://169.254.1.1/", "link-local"),
    ("https://[fe80::1]/", "link-local"),
    ("https://[64:ff9b::a9fe:a9fe]/", "metadata"),  # NAT64 of 169.254.169.254
    ("https://[2002:a00:1::]/", "private"),  # 6to4 of 10.0.0.1
    ("https://10.0.0.5/", "private"),
    ("https://172.16.3.4:8443/", "private"),
    ("https://192.168.1.1/", "private"),
    ("https://[fd12:3456::1]/", "private"),
    ("https://100.64.1.1/", "CGNAT"),
    ("https://224.0.0.1/", "multicast"),
    ("https://240.0.0.1/", "reserved"),
    ("https://127.0.0.1:8010/control", "loopback"),
    ("https://0/", "unspecified"),
    ("https://0.0.0.0:8010/", "unspecified"),
    ("https://[::]/", "unspecified"),
    ("https://0x7f000001:8010/", "loopback"),
    ("https://2130706433:8010/", "loopback"),
    ("https://127.1:8010/", "loopback"),
    ("https://0177.0.0.1:8010/", "loopback"),
    ("https://[::1]:8010/", "loopback"),
    ("https://[::ffff:127.0.0.1]:8010/", "loopback"),
    ("https://localhost:8010/", "local"),
    ("https://localhost.:8010/", "local"),
    ("https://hooks.localhost/", "local"),
    ("https://intranet.example.com/", "resolves to a private"),
    ("https://split.example.com/", "resolves to a private"),  # one address inside is enough
]


@pytest.mark.sqlite_only
class TestRegistrationRefusesTargetsInside:
    @pytest.mark.parametrize(("url", "says"), INSIDE)
    async def test_a_subscription_url_inside_is_a_422(self, api, url, says):
        response = await register(api, url + SECRET_QUERY)
        assert says in refusal(response, "url")
        assert SECRET_QUERY not in response.text  # the URL is not repeated
        assert (await api.get("/v1/webhooks")).json()["items"] == []

    @pytest.mark.parametrize(("url", "says"), INSIDE)
    async def test_a_callback_url_inside_is_a_422(self, api, url, says):
        response = await create_run(api, url + SECRET_QUERY)
        assert says in refusal(response, "callback_url")
        assert SECRET_QUERY not in response.text
        assert (await api.get("/v1/runs")).json()["items"] == []

    async def test_a_public_https_target_is_accepted_and_plain_http_is_not(self, api):
        assert (await register(api, "https://hooks.example.com/in")).status_code == 201
        assert (await create_run(api, "https://cb.example.com/cb")).status_code == 201
        says = refusal(await register(api, "http://plain.example.com/in"), "url")
        assert "use https://" in says
        says = refusal(await create_run(api, f"http://{PUBLIC}/cb"), "callback_url")
        assert "use https://" in says

    async def test_a_host_that_does_not_resolve_is_a_422(self, api, resolver):
        says = refusal(await register(api, "https://nowhere.example.com/in"), "url")
        assert "does not resolve" in says
        assert resolver.asked == ["nowhere.example.com"]

    async def test_a_slow_resolver_is_given_up_on_and_never_holds_the_loop(
        self, orchestrator_settings, peers
    ):
        class Stuck(StaticResolver):
            def __init__(self) -> None:
                super().__init__()
                self.waiting = asyncio.Event()

            async def resolve(self, host: str, port: int) -> list[IPAddress]:
                self.waiting.set()
                await asyncio.Event().wait()  # never answers
                raise AssertionError("unreachable")

        stuck = Stuck()
        app = create_app(orchestrator_settings, peer_transports=peers, webhook_resolver=stuck)
        async with serving(app, ADMIN_TOKEN) as api:
            pending = asyncio.create_task(register(api, "https://slow.example.com/in"))
            await asyncio.wait_for(stuck.waiting.wait(), 10)
            # while the name is being resolved, the loop still serves other requests
            assert (await api.get("/v1/webhooks")).status_code == 200
            response = await asyncio.wait_for(pending, 10)
        assert "could not be resolved within 0.5 s" in refusal(response, "url")


@pytest.mark.sqlite_only
class TestAllowList:
    async def test_empty_allows_nothing_inside(self, api):
        for url in ("http://127.0.0.1:8010/hooks", "https://127.0.0.1:8010/hooks"):
            assert "loopback" in refusal(await register(api, url), "url")

    @pytest.mark.parametrize("allow_hosts", ["127.0.0.1, intranet.example.com"])
    async def test_a_listed_host_is_accepted_over_http_and_an_unlisted_one_is_not(
        self, api, resolver, allow_hosts
    ):
        port = free_port()  # nothing listens there: what is delivered goes nowhere
        assert (await register(api, f"http://127.0.0.1:{port}/hooks")).status_code == 201
        assert (await create_run(api, f"http://127.0.0.1:{port}/cb")).status_code == 201
        assert (await register(api, "http://intranet.example.com/hooks")).status_code == 201
        assert "intranet.example.com" not in resolver.asked  # listed by name: not looked up
        # the same kind of host, not listed
        assert "loopback" in refusal(await register(api, "http://127.0.0.2:8010/x"), "url")
        assert "loopback" in refusal(await register(api, "http://2130706434/x"), "url")
        assert "local" in refusal(await create_run(api, "http://localhost:8010/"), "callback_url")
        says = refusal(await register(api, "https://169.254.169.254/"), "url")
        assert "metadata" in says

    @pytest.mark.parametrize("allow_hosts", ["10.0.0.0/8"])
    async def test_a_listed_cidr_admits_the_names_resolving_into_it(self, api, allow_hosts):
        assert (await register(api, "http://intranet.example.com/hooks")).status_code == 201
        assert (await register(api, "https://0xa000001/hooks")).status_code == 201  # 10.0.0.1
        assert "private" in refusal(await register(api, "https://192.168.1.1/"), "url")
        # partly inside the listed range, partly public: plain http is still refused
        assert "use https://" in refusal(await register(api, "http://mixed.example.com/"), "url")

    @pytest.mark.parametrize("value", ["not a host!", "10.0.0.0/33", "exa mple.com"])
    def test_a_bad_entry_is_refused_at_start(self, service_token, value):
        with pytest.raises(ValueError, match="ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS"):
            OrchestratorSettings(service_token=service_token, webhook_allow_hosts=value)


class TestDeliveryChecksAgain:
    @pytest.mark.parametrize("allow_hosts", ["127.0.0.0/8"])
    async def test_a_name_moved_inside_after_registration_is_refused_unsent(
        self, api, resolver, allow_hosts
    ):
        """DNS rebinding: at registration the name is on an allowed address, at delivery on a
        private one. The delivery fails at once with the reason and sends nothing; once the
        name is back, a redelivery reaches the address the stub gave (the system's resolver
        does not know the name: the connection went to the checked address)."""
        receiver = Receiver().start()
        try:
            url = f"http://hooks.rebind.test:{receiver.port}/hooks"
            assert (await register(api, url)).status_code == 201
            resolver.table["hooks.rebind.test"] = ["10.0.0.7"]
            run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
            await wait_for(api, run_id, statuses=FINAL)
            row = await _settled(api, "failed")
            assert (row["attempts"], row["next_attempt_at"]) == (1, None)
            assert row["last_status_code"] is None
            assert "refused, not sent" in row["last_error"]
            assert "private" in row["last_error"]
            assert receiver.received == []

            resolver.table["hooks.rebind.test"] = ["127.0.0.1"]
            redo = await api.post(f"/v1/webhooks/deliveries/{row['id']}/redeliver")
            assert redo.status_code == 202, redo.text
            [got] = await receiver.wait_for("run.finished", timeout=10)
            assert got.headers["host"] == f"hooks.rebind.test:{receiver.port}"
            assert got.headers["webhook-id"] == row["id"]
            done = await _settled(api, "delivered")
            assert done["last_status_code"] == 200
        finally:
            receiver.stop()

    @pytest.mark.parametrize("allow_hosts", ["127.0.0.0/8"])
    async def test_a_name_that_stops_resolving_is_retried_not_failed(
        self, api, resolver, allow_hosts
    ):
        receiver = Receiver().start()
        try:
            url = f"http://hooks.rebind.test:{receiver.port}/hooks"
            assert (await register(api, url)).status_code == 201
            del resolver.table["hooks.rebind.test"]
            run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
            await wait_for(api, run_id, statuses=FINAL)

            async def retried():
                rows = await _deliveries(api)
                return rows if rows and rows[0]["attempts"] >= 2 else None

            [row] = await _until(retried, "a second attempt")
            assert row["status"] == "pending"
            assert "does not resolve" in row["last_error"]
            resolver.table["hooks.rebind.test"] = ["127.0.0.1"]
            await receiver.wait_for("run.finished", timeout=10)
        finally:
            receiver.stop()


async def _deliveries(api, **params) -> list[dict]:
    response = await api.get("/v1/webhooks/deliveries", params=params)
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


async def _until(predicate, what: str, timeout: float = 20.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _settled(api, status: str) -> dict:
    async def found():
        return await _deliveries(api, status=status)

    [row] = await _until(found, f"a {status} delivery")
    return dict(row)


class TestHttpsDeliveryIsPinned:
    """Over https the request connects to the checked address and verifies the certificate
    against the name: ``Host`` and the TLS server name (httpcore's ``sni_hostname``) are
    the URL's host. The network is an in-process ``httpx.MockTransport``: no socket opens."""

    @pytest.fixture
    def sent(self):
        return []

    @pytest.fixture
    def resolver(self):
        return StaticResolver({"hooks.example.com": [PUBLIC]})

    @pytest.fixture
    async def orchestrator_app(self, orchestrator_settings, peers, resolver, sent):
        def answer(request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return httpx.Response(204)

        return create_app(
            orchestrator_settings,
            peer_transports=peers,
            webhook_resolver=resolver,
            webhook_transport=httpx.MockTransport(answer),
        )

    async def test_the_request_goes_to_the_checked_address_under_the_name(
        self, api, resolver, sent
    ):
        assert (await register(api, "https://hooks.example.com:8443/in?x=1")).status_code == 201
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        await wait_for(api, run_id, statuses=FINAL)
        await _settled(api, "delivered")
        [request] = sent
        assert str(request.url) == f"https://{PUBLIC}:8443/in?x=1"
        assert request.headers["host"] == "hooks.example.com:8443"
        assert request.extensions["sni_hostname"] == "hooks.example.com"
        assert request.headers["connection"] == "close"  # never shared with another name
        assert resolver.asked == ["hooks.example.com", "hooks.example.com"]

        # DNS moves the name inside: the next delivery is refused and nothing is sent
        resolver.table["hooks.example.com"] = ["169.254.169.254"]
        again = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        await wait_for(api, again, statuses=FINAL)
        row = await _settled(api, "failed")
        assert "metadata" in row["last_error"]
        assert len(sent) == 1


class TestAddressRules:
    """The pure rules under the guard, for the forms a resolver accepts."""

    @pytest.mark.parametrize(
        ("host", "address"),
        [
            ("0", "0.0.0.0"),
            ("0x7f000001", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("::ffff:7f00:1", "127.0.0.1"),
            ("[fe80::1%25eth0]", "fe80::1"),
            ("93.184.215.14", "93.184.215.14"),
        ],
    )
    def test_odd_literal_forms_are_normalised(self, host, address):
        assert str(ip_literal(host)) == address

    @pytest.mark.parametrize("host", ["example.com", "deadbeef", "1.2.3.4.5", "08", "0x.com"])
    def test_names_are_not_literals(self, host):
        assert ip_literal(host) is None

    @pytest.mark.parametrize(
        "address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "8.8.8.8"]
    )
    def test_public_addresses_pass(self, address):
        assert why_refused(ipaddress.ip_address(address)) is None

    def test_the_allow_list_takes_names_cidrs_and_bare_addresses(self):
        allow = AllowList.parse(" Hooks.Example.com. , 10.0.0.0/8,127.0.0.1,::1, ")
        assert allow.names == {"hooks.example.com"}
        assert [str(n) for n in allow.networks] == ["10.0.0.0/8", "127.0.0.1/32", "::1/128"]
        assert allow.covers(ipaddress.ip_address("10.200.0.1"))
        assert not allow.covers(ipaddress.ip_address("127.0.0.2"))
        assert AllowList.parse("") == AllowList()

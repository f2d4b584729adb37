"""The routes the console adds to Streamlit's server: a page's own URL gets Streamlit's page
with the server's base URL in it, so the frontend probes only ``/_stcore/health``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient
from streamlit import config

from console import server
from console.pages import PAGES

APP = Path(__file__).resolve().parents[2] / "ui" / "console" / "app.py"
LOCATOR = 'BACKEND_BASE_URL: new URL("/", window.location.origin).href'


@pytest.fixture
def client() -> TestClient:
    return TestClient(Starlette(routes=server.page_routes()))


@pytest.mark.parametrize("path", ["/", "/review?review=rev_1", *(f"/{p.url_path}" for p in PAGES)])
def test_every_page_url_names_the_server_root(client, path):
    answer = client.get(path)
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-cache"
    head = answer.text.split("</head>", 1)[0]
    # before Streamlit's bundle, which reads window.__streamlit once when it loads
    assert head.index(LOCATOR) < head.index('src="./static/js/index.')


def test_other_paths_are_left_to_streamlit(client):
    for path in ("/favicon.png", "/review/_stcore/health", "/nowhere", "/_stcore/health"):
        assert client.get(path).status_code == 404  # not ours: Streamlit's server answers


def test_a_base_url_path_is_kept(monkeypatch):
    monkeypatch.setattr(config, "get_option", lambda name: "/console/")
    answer = TestClient(Starlette(routes=server.page_routes())).get("/console/review")
    assert answer.status_code == 200
    assert 'new URL("/console/", window.location.origin)' in answer.text


def test_streamlit_run_serves_the_app_with_those_routes():
    """``streamlit run app.py`` finds ``app = st.App(...)`` by reading the file, not running it."""
    from streamlit.web.server.app_discovery import discover_asgi_app

    found = discover_asgi_app(APP)
    assert (found.is_asgi_app, found.app_name) == (True, "app")
    calls = [n for n in ast.walk(ast.parse(APP.read_text())) if isinstance(n, ast.Call)]
    assert any(k.arg == "routes" for c in calls for k in c.keywords)


def _python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_the_server_imports_pandas_and_pyarrow_before_it_serves():
    """Streamlit imports them on the first custom component or table, which was the session
    cookie's right after the first login: seconds of a blank queue on a busy machine."""
    loaded = "print('pandas' in sys.modules, 'pyarrow' in sys.modules)"
    assert _python(f"import sys, console.server\n{loaded}") == ["False", "False"]
    started = (
        "import asyncio, sys\n"
        "from console.server import lifespan\n"
        "async def serve():\n"
        "    async with lifespan(None):\n"
        f"        {loaded}\n"
        "asyncio.run(serve())\n"
    )
    assert _python(started) == ["True", "True"]


class TestSessionCookie:
    """The session cookie is set by the route's Set-Cookie, so it is HttpOnly: a cookie a page
    script writes (``document.cookie``) can never be, and any script on the page could read it."""

    def test_a_ticket_sets_the_cookie_httponly_strict_and_only_once(self, client):
        ticket = server.SESSION_COOKIES.set({server.COOKIE: "tok-1", server.WHO: "ana%7Cr"}, 600)
        answer = client.post("/_console/session", json={"ticket": ticket})
        assert answer.status_code == 204
        cookies = answer.headers.get_list("set-cookie")
        assert len(cookies) == 2
        for header in cookies:
            attributes = {a.strip().split("=")[0].lower() for a in header.split(";")}
            assert {"httponly", "max-age", "path"} <= attributes, header
            assert "samesite=strict" in header.lower()
            assert "secure" not in attributes  # plain http on loopback: a Secure one is lost
        assert any(h.startswith(f"{server.COOKIE}=tok-1;") for h in cookies)
        assert server.SESSION_COOKIES.done(ticket)
        again = client.post("/_console/session", json={"ticket": ticket})
        assert again.status_code == 403
        assert again.json()["error"] == "Forbidden"
        assert "set-cookie" not in again.headers

    def test_over_https_the_cookie_is_secure(self, client):
        ticket = server.SESSION_COOKIES.set({server.COOKIE: "tok-1"}, 600)
        answer = client.post(
            "/_console/session", json={"ticket": ticket}, headers={"X-Forwarded-Proto": "https"}
        )
        assert "secure" in {a.strip().lower() for a in answer.headers["set-cookie"].split(";")}

    def test_a_clear_ticket_expires_both_cookies(self, client):
        ticket = server.SESSION_COOKIES.clear()
        answer = client.post("/_console/session", json={"ticket": ticket})
        assert answer.status_code == 204
        cookies = answer.headers.get_list("set-cookie")
        assert sorted(h.split("=")[0] for h in cookies) == sorted([server.COOKIE, server.WHO])
        assert all("max-age=0" in h.lower() and "httponly" in h.lower() for h in cookies)

    @pytest.mark.parametrize("body", [{"ticket": "forged"}, {"ticket": 1}, {}, [], "x"])
    def test_no_ticket_no_cookie(self, client, body):
        answer = client.post("/_console/session", json=body)
        assert answer.status_code == 403
        assert "set-cookie" not in answer.headers
        assert client.post("/_console/session", content=b"{not json").status_code == 403

    def test_the_page_script_posts_the_ticket_and_never_writes_document_cookie(self):
        script = server.cookie_script("tkt_abc")
        assert '"/_console/session"' in script
        assert "tkt_abc" in script
        assert "document.cookie" not in script

    def test_under_a_base_url_path_the_route_and_the_cookie_path_follow_it(self, monkeypatch):
        monkeypatch.setattr(config, "get_option", lambda name: "/console/")
        client = TestClient(Starlette(routes=server.page_routes()))
        ticket = server.SESSION_COOKIES.set({server.COOKIE: "tok-1"}, 600)
        assert '"/console/_console/session"' in server.cookie_script(ticket)
        answer = client.post("/console/_console/session", json={"ticket": ticket})
        assert answer.status_code == 204
        assert "path=/console/" in answer.headers["set-cookie"].lower()

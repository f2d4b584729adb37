"""Routes the console adds to Streamlit's server (see ``app.py``).

Streamlit's frontend finds its server by probing ``<URL path>/_stcore/health`` and
``host-config`` first, then the path's parent (``PD()`` in the frontend bundle), unless the
page says where the server is in ``window.__streamlit.BACKEND_BASE_URL``. Opened on a page's
own URL such as ``/review``, the first probe is a 404 that the browser logs as an error, on
every reload and shared link. These routes answer the root and each page's URL with
Streamlit's own ``index.html`` plus one line naming the server's base URL, so the only probe is
the right one. Everything else (assets, the websocket, health) stays Streamlit's.

The session cookie is set and cleared here too, by ``POST <base>/_console/session`` with a
``Set-Cookie`` header, so it is ``HttpOnly`` (no script on the page can read the token),
``SameSite=Strict`` and, served over https, ``Secure``. A cookie written from JavaScript
(``document.cookie``) can never be HttpOnly. The script (a Streamlit run, in this process)
hands the browser a one-use ticket from :data:`SESSION_COOKIES`, never the token; the browser
posts the ticket back and this route answers with the cookie the ticket stands for.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from streamlit import config, file_util

from console.pages import PAGES


def base_path() -> str:
    """``server.baseUrlPath`` as ``/prefix`` (empty when the console is at the root)."""
    base = str(config.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}" if base else ""


def locator(base: str) -> str:
    """The script that tells the frontend where its server is: the page's origin + ``base``."""
    where = json.dumps(f"{base}/")
    return (
        "<script>window.__streamlit = "
        f"{{BACKEND_BASE_URL: new URL({where}, window.location.origin).href}};</script>"
    )


@cache
def _index(base: str) -> str:
    html = (Path(file_util.get_static_dir()) / "index.html").read_text(encoding="utf-8")
    if "<head>" not in html:  # a Streamlit whose page we do not know: serve it unchanged
        return html
    return html.replace("<head>", f"<head>\n    {locator(base)}", 1)


def index_html() -> str:
    """Streamlit's ``index.html`` with :func:`locator` first in its head."""
    return _index(base_path())


async def _page(request: Request) -> HTMLResponse:
    return HTMLResponse(index_html(), headers={"Cache-Control": "no-cache"})


COOKIE = "crosscheck_session"  # the session token; never in the URL, never readable by a script
WHO = "crosscheck_who"  # name and role, for display only (the API checks the token)
SESSION_ROUTE = "/_console/session"
TICKET_S = 300.0  # a ticket the browser has not redeemed by then is dropped


@dataclass(frozen=True)
class _Order:
    values: dict[str, str] | None  # the cookies to set; None: clear them
    max_age: int
    expires: float  # monotonic


class SessionCookies:
    """One-use tickets for setting or clearing the session cookie, shared by the script runs
    (which issue them) and :func:`session_cookie` (which redeems them); all in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._orders: dict[str, _Order] = {}
        self._done: dict[str, float] = {}

    def _issue(self, order: _Order) -> str:
        ticket = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._orders = {t: o for t, o in self._orders.items() if o.expires > now}
            self._done = {t: e for t, e in self._done.items() if e > now}
            self._orders[ticket] = order
        return ticket

    def set(self, values: dict[str, str], max_age: int) -> str:
        """A ticket that sets ``values`` as HttpOnly cookies for ``max_age`` seconds."""
        return self._issue(_Order(dict(values), max_age, time.monotonic() + TICKET_S))

    def clear(self) -> str:
        """A ticket that clears the session cookies."""
        return self._issue(_Order(None, 0, time.monotonic() + TICKET_S))

    def redeem(self, ticket: str) -> _Order | None:
        with self._lock:
            order = self._orders.pop(ticket, None)
            if order is None or order.expires <= time.monotonic():
                return None
            self._done[ticket] = order.expires
            return order

    def done(self, ticket: str) -> bool:
        """The browser has redeemed it: the cookie is written (or cleared)."""
        with self._lock:
            return ticket in self._done


SESSION_COOKIES = SessionCookies()


def _over_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


async def session_cookie(request: Request) -> Response:
    """Set or clear the session cookie a ticket from this process stands for."""
    try:
        body = await request.json()
    except ValueError:
        body = None
    ticket = body.get("ticket") if isinstance(body, dict) else None
    order = SESSION_COOKIES.redeem(ticket) if isinstance(ticket, str) else None
    if order is None:
        detail = "an unknown, used or expired session ticket: log in again"
        return JSONResponse({"error": "Forbidden", "detail": detail}, status_code=403)
    answer = Response(status_code=204, headers={"Cache-Control": "no-store"})
    path = f"{base_path()}/"
    secure = _over_https(request)
    for name in (COOKIE, WHO):
        if order.values is None:
            answer.delete_cookie(name, path=path, secure=secure, httponly=True, samesite="strict")
        elif name in order.values:
            answer.set_cookie(
                name,
                order.values[name],
                max_age=order.max_age,
                path=path,
                secure=secure,
                httponly=True,
                samesite="strict",
            )
    return answer


def cookie_script(ticket: str) -> str:
    """The page's side of a ticket: post it back to :func:`session_cookie`."""
    where = json.dumps(f"{base_path()}{SESSION_ROUTE}")
    body = json.dumps(json.dumps({"ticket": ticket}))
    return (
        f"<script>fetch({where}, {{method: 'POST', credentials: 'same-origin', "
        f"headers: {{'Content-Type': 'application/json'}}, body: {body}}});</script>"
    )


def page_routes() -> list[BaseRoute]:
    """``GET`` the root and each page's URL: Streamlit's page that knows where its server is;
    ``POST`` the session route: the session cookie, HttpOnly."""
    base = base_path()
    paths = [base or "/", *(f"{base}/{page.url_path}" for page in PAGES)]
    return [
        *(Route(path, _page, methods=["GET"]) for path in paths),
        Route(f"{base}{SESSION_ROUTE}", session_cookie, methods=["POST"]),
    ]


WARM_MODULES = ("pandas", "pyarrow")


def warm_up() -> None:
    """Import what Streamlit would otherwise import in a reviewer's first script run."""
    for name in WARM_MODULES:
        importlib.import_module(name)


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """``st.App``'s lifespan: :func:`warm_up` (off the event loop) before serving."""
    await asyncio.to_thread(warm_up)
    yield

"""Routes the console adds to Streamlit's server (see ``app.py``).

Streamlit's frontend finds its server by probing ``<URL path>/_stcore/health`` and
``host-config`` first, then the path's parent (``PD()`` in the frontend bundle), unless the
page says where the server is in ``window.__streamlit.BACKEND_BASE_URL``. Opened on a page's
own URL such as ``/review``, the first probe is a 404 that the browser logs as an error, on
every reload and shared link. These routes answer the root and each page's URL with
Streamlit's own ``index.html`` plus one line naming the server's base URL, so the only probe is
the right one. Everything else (assets, the websocket, health) stays Streamlit's.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
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


def page_routes() -> list[BaseRoute]:
    """``GET`` the root and each page's URL: Streamlit's page that knows where its server is."""
    base = base_path()
    paths = [base or "/", *(f"{base}/{page.url_path}" for page in PAGES)]
    return [Route(path, _page, methods=["GET"]) for path in paths]


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

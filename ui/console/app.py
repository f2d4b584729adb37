"""Entry point: ``streamlit run ui/console/app.py`` serves the console (``main.py``).

``streamlit run`` finds the ``st.App`` below and serves it as an ASGI app: Streamlit's own
server and routes, plus :mod:`console.server`'s page routes. Those answer a page's URL
(``/review?review=<id>``, a reload, a shared link) with Streamlit's page, told where the
server is, so the browser never probes ``/review/_stcore/health`` (a 404 and a console error
each time) before finding it at the root; and it imports pandas and pyarrow before it
answers its health check, not in the first reviewer's script run.
"""

import streamlit as st

from console.server import lifespan, page_routes

app = st.App("main.py", routes=page_routes(), lifespan=lifespan)

"""The console's Streamlit script (served by ``app.py``). Builds navigation; pages only render.

Every page is registered whether or not the reviewer is logged in, so a shared link such as
``/review?review=<id>`` always resolves: logged out, the login form shows in the page's place
and, once logged in, the same URL renders the page it names. No page icons: Streamlit's
``:material/...:`` icons load a font from a web host.
"""

import streamlit as st

from console import mode
from console.client import get_client
from console.pages import PAGES
from console.views import login as session

st.set_page_config(page_title="Crosscheck reviewer console", layout="wide")

session.restore()  # a session cookie from an earlier visit (reload, new tab, shared link)
logged_in = bool(st.session_state.get("token"))

page = st.navigation(
    [
        st.Page(page.script, title=page.title, url_path=page.url_path, default=i == 0)
        for i, page in enumerate(PAGES)
    ],
    position="sidebar" if logged_in else "hidden",
)
if not logged_in:
    session.drop_cookie()
    session.show()
else:
    session.keep_cookie()
    with st.sidebar:
        st.caption(session.signed_in_as())
        mode.show_caption(get_client())
        if st.button("Log out", key="logout"):
            session.log_out()
    page.run()

"""Oreo's Streamlit entrypoint: page config, sign-in gate, then the page router.

The file plays two parts. ``streamlit run app/main.py`` finds the ``st.App`` below and
imports this file once as the server's ASGI app, whose lifespan starts the shared Spark
session in the background as the server starts (one JVM per server process, shared by
every browser session), plus the sender that drains the notification outbox and the
Prometheus side port (``core.metrics.serve``, ``OREO_METRICS_PORT``), and whose
``/oreo/engine`` endpoint says how far that start is. Once Spark is up the same thread warms
it up (``core.warmup``: a small MERGE on a scratch table, the GX import), so the first
approval does not pay for the JVM's first MERGE; ``warm`` says when that ended.
Every browser session then runs this file as its page script (``__name__ == "__main__"``),
which signs the user in and routes to a page.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import streamlit as st

from app.background import log_approvals
from app.components import (
    NEEDED_ROLE_KEY,
    catalog,
    current_user,
    inbox_link,
    readable_captions,
    remember_deep_link,
    sign_out,
    sync_session_cookie,
    take_deep_link,
)
from core import auth, background, engine, metrics, reactions, warmup

reactions.install()  # notifications and metrics follow the domain's events, once per process

PAGES = Path(__file__).resolve().parent.parent / "pages"
# Every page's address. Streamlit names a page by a hash of its url_path, so the login page,
# served under these same paths while signed out, reruns into the page asked for after sign-in.
URL_PATHS = ("datasets", "table", "imports", "history", "requests", "review", "admin", "rules", "inbox")
# Pages a role opens, by address: their title and the lowest role that sees them.
ROLE_PAGES = {
    "review": ("Review", auth.Role.APPROVER),
    "admin": ("Admin", auth.Role.ADMIN),
    "rules": ("Rules", auth.Role.ADMIN),
}


def _route() -> None:
    """Sign-in gate, then the page the user asked for."""
    st.set_page_config(page_title="Oreo", page_icon=":material/table_view:", layout="wide")
    readable_captions()

    user = current_user()
    refused: dict[str, tuple[str, str]] = {}  # address -> (page title, role it needs), for pages/no_role.py
    if user is None:
        login = [st.Page(PAGES / "login.py", title="Sign in", icon=":material/login:", url_path="login", default=True)]
        login += [
            st.Page(PAGES / "login.py", title="Sign in", icon=":material/login:", url_path=path, visibility="hidden")
            for path in URL_PATHS
        ]
        router = st.navigation(login)
    else:
        role = auth.highest_role(catalog(), user)
        pages = [
            st.Page(
                PAGES / "datasets.py",
                title="Datasets",
                icon=":material/folder_open:",
                url_path="datasets",
                default=True,
            ),
            st.Page(PAGES / "table.py", title="Table", icon=":material/table:", url_path="table"),
            st.Page(PAGES / "imports.py", title="Import", icon=":material/upload_file:", url_path="imports"),
            st.Page(PAGES / "history.py", title="History", icon=":material/history:", url_path="history"),
            st.Page(PAGES / "requests.py", title="My requests", icon=":material/outbox:", url_path="requests"),
            # Reached through the sidebar's badge link (app.components.inbox_link), not listed twice.
            inbox := st.Page(
                PAGES / "inbox.py",
                title="Inbox",
                icon=":material/notifications:",
                url_path="inbox",
                visibility="hidden",
            ),
        ]
        if role is not None and role.rank >= auth.Role.APPROVER.rank:
            pages.append(st.Page(PAGES / "review.py", title="Review", icon=":material/rule:", url_path="review"))
        if role is not None and role.rank >= auth.Role.ADMIN.rank:
            pages.append(st.Page(PAGES / "admin.py", title="Admin", icon=":material/build:", url_path="admin"))
            pages.append(st.Page(PAGES / "rules.py", title="Rules", icon=":material/fact_check:", url_path="rules"))
        # The addresses of pages this role does not open say which role they need (not "Page not found").
        for path, (title, needed) in ROLE_PAGES.items():
            if role is None or role.rank < needed.rank:
                refused[path] = (title, needed.value)
                icon = ":material/lock:"
                pages.append(st.Page(PAGES / "no_role.py", title=title, icon=icon, url_path=path, visibility="hidden"))
        # A flat list, not one "Oreo" section: Streamlit draws a section's header inside the nav's <ul>,
        # which breaks the list for screen readers (axe: list, listitem).
        router = st.navigation(pages)
        with st.sidebar:
            st.markdown(f"Signed in as **{user.label}**  \n`{user.username}` · {role.value if role else 'no role yet'}")
            inbox_link(inbox, user)
            if st.button("Sign out", key="sign_out", icon=":material/logout:"):
                sign_out()
            sync_session_cookie()
        asked_for = take_deep_link()  # after an SSO sign-in, which always returns to the root
        for page in pages:
            if asked_for is not None and page.url_path == asked_for and page is not router:
                st.switch_page(page)
    if router.url_path in refused:
        st.session_state[NEEDED_ROLE_KEY] = refused[router.url_path]
    router.run()
    if user is None:
        # Below the form, where their script elements take no room.
        sync_session_cookie()  # clears an ended session's cookie
        remember_deep_link(router.url_path)


@asynccontextmanager
async def _warm_engine(_app: Any) -> AsyncIterator[None]:
    """Start Spark in the background as the server starts, warm it up, and log when it is ready."""
    log_approvals(sys.stdout)  # each approval's start, stages and outcome, in the server's log
    engine.start_in_background(warm_up=warmup.warm_server)  # a small MERGE, then the tables under review
    warmup.keep_prepared()  # file lists built ahead while it serves (docs/running.md)
    background.start_background_drainer(None)  # stale requests told, the outbox sent: one per server process
    metrics.serve()  # the side port: once per server process (a browser session's rerun never gets here)
    announce = asyncio.create_task(_announce_engine())
    yield
    announce.cancel()
    background.stop_background_drainer(timeout=1.0)
    warmup.stop_preparing()


async def _announce_engine() -> None:
    status = engine.engine_status()
    while status.state == "starting":
        status = await asyncio.to_thread(engine.wait_for_engine, 1.0)  # short: shutdown waits for it
    detail = status.error if status.state == "failed" else f"{status.elapsed_s:.1f} s"
    print(f"Oreo engine {status.state}: {detail}", flush=True)


async def _engine_endpoint(_request: Any) -> Any:
    from starlette.responses import JSONResponse

    status = engine.engine_status()
    # ``first_use_warmed``: the name this field had before the warm-up moved into the engine's status.
    return JSONResponse({**status.to_json(), "first_use_warmed": status.warm})


if __name__ == "__main__":  # a browser session's run
    _route()
else:  # imported by `streamlit run` to find the server's app
    from starlette.routing import Route

    app = st.App(__file__, lifespan=_warm_engine, routes=[Route("/oreo/engine", _engine_endpoint)])

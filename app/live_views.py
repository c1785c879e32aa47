"""Editing together on the Table and Review pages: who else is here, what landed under me, who has a cell pending.

The presence line and the notices live in fragments that rerun on a timer
(``st.fragment(run_every=OREO_PRESENCE_REFRESH_S)``): each run is one heartbeat
(``core.presence.beat``: one catalog write and one read) and, only when something moved, the
reads that say what. The rest of the page, and the grid's scroll and selection, are not
rebuilt: the grid refreshes when the person chooses to ("Refresh the table").

A page's full run passes its fragment what it showed (the dataset's version, or a token of
the run); a fragment rerun keeps those arguments, so it can tell what is new since.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from app.components import flash, oreo_errors
from app.editing import MARK_COLUMN
from app.formatting import EMPTY
from core import diff, early_conflicts, overlaps, presence, sessions
from core.auth import User
from core.catalog import Catalog
from core.change_requests import ChangeRequest
from core.config import get_settings
from core.conflicts import ROW_DELETED
from core.errors import OreoError

logger = logging.getLogger("oreo.live")
# The server CPU each fragment run took (seconds of this thread), for the benchmark and the logs.
CPU_SAMPLES: list[float] = []
_KEPT_SAMPLES = 10_000
ALSO_KEY = "live_also_pending"
# Rows of the shown page listed in full above the grid (the change column shows the start of each mark).
ALSO_ROWS_SHOWN = 8


def refresh_every() -> float | None:
    """How often the live fragments rerun; None when presence is off (``OREO_PRESENCE_REFRESH_S=0``)."""
    every = get_settings().presence_refresh_s
    return float(every) if every > 0 else None


def _timed(cpu_started: float) -> None:
    spent = time.thread_time() - cpu_started
    if len(CPU_SAMPLES) >= _KEPT_SAMPLES:
        del CPU_SAMPLES[: _KEPT_SAMPLES // 2]
    CPU_SAMPLES.append(spent)
    logger.debug("live fragment run: %.1f ms of CPU", spent * 1000)


def _beat(catalog: Catalog, page: presence.PageRef, user: User, every: float) -> presence.Beat:
    """The page's heartbeat, at most one per ``every`` seconds: a full run soon after one reuses it."""
    kept = st.session_state.setdefault("live_beats", {})
    last = kept.get(page.key)
    if last is not None and time.monotonic() - last[0] < every * 0.8:
        return last[1]
    beat = presence.beat(catalog, page, actor=user)
    kept[page.key] = (time.monotonic(), beat)
    return beat


def _also_here(beat: presence.Beat, key: str) -> None:
    with st.container(key=key):
        if beat.others:
            st.caption(f":material/group: Also here: {presence.describe(beat.others)}")
        else:
            st.caption(":material/person: No one else has this page open.")


# ---------------------------------------------------------------- the Table page


def table_live(
    catalog: Catalog, user: User, project_id: str, dataset_id: str, *, shown_version: int, session_id: str | None,
    paused: bool = False,
) -> None:  # fmt: skip
    """The Table page's live strip: who else is here, and a notice when a new version of main lands.

    ``paused``: a dialog of the page is open; the strip is drawn once, without its timer (``dialogs_open``).
    """
    every = refresh_every()
    if every is None:
        return
    timer = None if paused else every
    st.fragment(_table_strip, run_every=timer)(catalog, user, project_id, dataset_id, shown_version, session_id, every)


def _table_strip(
    catalog: Catalog, user: User, project_id: str, dataset_id: str, shown_version: int, session_id: str | None,
    every: float,
) -> None:  # fmt: skip
    started = time.thread_time()
    try:
        beat = _beat(catalog, presence.table_page(project_id, dataset_id), user, every)
    except OreoError:
        return  # no role any more, or the catalog is away for a moment: the next beat tries again
    _also_here(beat, "table_presence")
    if beat.version is not None and beat.version > shown_version:
        _main_moved(catalog, user, project_id, dataset_id, shown_version, session_id)
    _timed(started)


def _main_moved(
    catalog: Catalog, user: User, project_id: str, dataset_id: str, shown: int, session_id: str | None
) -> None:
    """The notice that main moved past ``shown`` (read once per new version, then kept for the page)."""
    kept = st.session_state.setdefault("live_moved", {})
    ident = (project_id, dataset_id, shown, session_id)
    moved = kept.get(ident)
    with oreo_errors():
        latest = early_conflicts.main_moved(catalog, project_id, dataset_id, shown, actor=user, session_id=session_id)
        if latest is not None and (moved is None or moved.version != latest.version):
            kept[ident] = moved = latest
    if moved is None:
        return
    with st.container(key="table_main_moved", border=True):
        conflicts = (
            f" **{moved.conflicts}** of your pending change(s) now conflict with it: refresh to decide each."
            if moved.conflicts
            else ""
        )
        st.warning(f"{moved.sentence()}{conflicts}", icon=":material/update:")
        if st.button("Refresh the table", key="table_refresh", icon=":material/refresh:"):
            st.session_state.pop("live_moved", None)
            st.session_state.pop(ALSO_KEY, None)  # said of the table before it moved
            st.rerun()  # the whole page: the grid now shows the new version


def conflicts_panel(
    catalog: Catalog, user: User, session: sessions.SessionInfo, reset_editor: Callable[[], None]
) -> None:
    """The session's early conflicts, each with base, mine and now and the choices (module ``core.early_conflicts``)."""
    with oreo_errors():
        found = early_conflicts.find_early_conflicts(catalog, session.session_id, actor=user)
    if not found:
        return
    with st.container(key="table_early_conflicts", border=True):
        st.markdown(
            f"**Main changed under {len(found)} of your pending change(s)** · decide each before you submit: "
            "keep mine (your value goes on top of the new version; a row deleted since comes back with your "
            "values), take theirs (your change is dropped), or edit the cell again.",
        )
        for n, conflict in enumerate(found):
            _conflict_row(catalog, user, session, conflict, n, reset_editor)


def _conflict_row(
    catalog: Catalog, user: User, session: sessions.SessionInfo, conflict: early_conflicts.EarlyConflict, n: int,
    reset_editor: Callable[[], None],
) -> None:  # fmt: skip
    def shown(value: str | None) -> str:
        return EMPTY if value is None else value

    text, mine, theirs, again = st.columns([5, 1.2, 1.2, 1.2], vertical_alignment="center")
    text.markdown(
        f"row `{conflict.row_id}` · **{conflict.column or 'whole row'}** ({conflict.reason}, version "
        f"{conflict.version}): base `{shown(conflict.base)}` · mine `{shown(conflict.mine)}` · "
        f"now `{shown(conflict.now)}`"
    )
    choices: list[tuple[Any, str, str, early_conflicts.Choice]] = [
        (mine, "Keep mine", "keep", "mine"), (theirs, "Take theirs", "take", "theirs"),
    ]  # fmt: skip
    helps = {"mine": _keep_mine_help(conflict), "theirs": None}
    for slot, label, tag, choice in choices:
        if choice in conflict.choices and slot.button(
            label, key=f"early_{tag}_{n}", width="stretch", help=helps[choice]
        ):
            with oreo_errors():
                done = early_conflicts.resolve_early_conflict(
                    catalog, session.session_id, conflict.row_id, conflict.column, choice, actor=user
                )
                moved = f" Your session now starts from version {done.base_version}." if done.rebased else ""
                flash(f"{label} on row {conflict.row_id} · {conflict.column or 'row'}.{moved}", kind="success")
                st.session_state.pop(ALSO_KEY, None)
                reset_editor()
                st.rerun()
    if conflict.column is not None and again.button("Edit again", key=f"early_edit_{n}", width="stretch"):
        st.session_state["early_edit"] = (conflict.row_id, conflict.column)
    if st.session_state.get("early_edit") == (conflict.row_id, conflict.column):
        _edit_again(catalog, user, session, conflict, n, reset_editor)


def _keep_mine_help(conflict: early_conflicts.EarlyConflict) -> str:
    if conflict.reason == ROW_DELETED and conflict.column is not None:
        return "Main deleted this row: keeping yours brings the row back, with your pending values, as a new row."
    return "Your value goes on top of main's new version."


def _edit_again(
    catalog: Catalog, user: User, session: sessions.SessionInfo, conflict: early_conflicts.EarlyConflict, n: int,
    reset_editor: Callable[[], None],
) -> None:  # fmt: skip
    """A new value for the cell, saved over main's value now (the conflict is decided by it)."""
    assert conflict.column is not None
    value = st.text_input(f"New value for row {conflict.row_id} · {conflict.column}", value=conflict.mine or "",
                          key=f"early_value_{n}")  # fmt: skip
    if st.button("Save this value", key=f"early_save_{n}", type="primary"):
        with oreo_errors():
            early_conflicts.resolve_early_conflict(
                catalog, session.session_id, conflict.row_id, conflict.column, "mine", actor=user
            )
            sessions.apply_edits(
                catalog, session.session_id, [sessions.SetCell(conflict.row_id, conflict.column, value)], actor=user
            )
            st.session_state.pop("early_edit", None)
            flash(f"Saved row {conflict.row_id} · {conflict.column} again over version {conflict.version}.")
            reset_editor()
            st.rerun()


def mark_overlaps(catalog: Catalog, user: User, project_id: str, dataset_id: str, frame: pd.DataFrame) -> None:
    """Add to each row's change mark the cells someone else has pending on it ("also pending: name · Bob (session)").

    Above the grid, what the last save said (``tell_overlaps``) stays until the next save or refresh.
    """
    said = st.session_state.get(ALSO_KEY)
    if said:
        with st.container(key="table_also_pending"):
            st.warning(said, icon=":material/group:")
    if not len(frame) or MARK_COLUMN not in frame.columns:
        return
    try:
        found = overlaps.pending_elsewhere(
            catalog, project_id, dataset_id, actor=user, row_ids=[str(r) for r in frame["row_id"]]
        )
    except OreoError:
        return  # a hint, not a check: the page works without it
    if not found:
        return
    by_row: dict[str, list[str]] = {}
    for o in found:
        by_row.setdefault(o.row_id, []).append(f"{o.column or 'row'} · {o.label}")
    marks = []
    for row_id, mark in zip(frame["row_id"], frame[MARK_COLUMN], strict=True):
        also = by_row.get(str(row_id))
        said = f"also pending: {'; '.join(sorted(also))}" if also else ""
        marks.append(" · ".join(part for part in (mark, said) if part))
    frame[MARK_COLUMN] = marks
    _list_overlaps(catalog, user, project_id, dataset_id, frame, by_row)


def _list_overlaps(
    catalog: Catalog, user: User, project_id: str, dataset_id: str, frame: pd.DataFrame, by_row: dict[str, list[str]]
) -> None:
    """Above the grid, in full, the rows of this page that others have changes pending on, named by their label.

    The change column is narrow (the table's own columns keep the width), so a long mark is
    cut there; this line says each one whole.
    """
    try:
        labels = [c for c in diff.label_columns(catalog, project_id, dataset_id, actor=user) if c in frame.columns]
    except OreoError:
        labels = []
    lines = []
    for _, row in frame[frame["row_id"].astype(str).isin(by_row)].iterrows():
        named = " · ".join(str(row[c]) for c in labels if not pd.isna(row[c])) or f"row {row['row_id']}"
        lines.append(f"**{named}**: {'; '.join(sorted(by_row[str(row['row_id'])]))}")
    more = f" (and {len(lines) - ALSO_ROWS_SHOWN} more row(s))" if len(lines) > ALSO_ROWS_SHOWN else ""
    with st.container(key="table_also_pending_rows"):
        st.caption(
            f":material/group: Others have changes pending on {len(lines)} row(s) of this page, not shown to you "
            f"until they submit: {' — '.join(lines[:ALSO_ROWS_SHOWN])}{more}."
        )


def tell_overlaps(catalog: Catalog, user: User, project_id: str, dataset_id: str, ops: list[sessions.EditOp]) -> None:
    """After a save: say (not refuse) which saved cells someone else also has a change pending on."""
    st.session_state.pop(ALSO_KEY, None)
    cells = [(op.row_id, op.column) for op in ops if isinstance(op, sessions.SetCell)]
    try:
        said = overlaps.also_pending(catalog, project_id, dataset_id, cells, actor=user)
    except OreoError:
        return
    if said:  # shown above the grid until the next save
        st.session_state[ALSO_KEY] = " ".join(line[0].upper() + line[1:] + "." for line in said)


# ---------------------------------------------------------------- the Review page


def review_live(catalog: Catalog, user: User, cr: ChangeRequest, *, paused: bool = False) -> None:
    """The Review page's live strip: who else is reviewing, and a notice when someone else moves the request.

    ``paused``: a dialog of the page is open; the strip is drawn once, without its timer (``dialogs_open``).
    """
    every = refresh_every()
    if every is None:
        return
    run = st.session_state["live_review_run"] = st.session_state.get("live_review_run", 0) + 1
    page = presence.PageRef("review", cr.project_id, cr.id)
    st.fragment(_review_strip, run_every=None if paused else every)(catalog, user, page, run, every)


def _review_strip(catalog: Catalog, user: User, page: presence.PageRef, run: int, every: float) -> None:
    started = time.thread_time()
    cr_id = page.target
    try:
        beat = _beat(catalog, page, user, every)
    except OreoError:
        return
    _also_here(beat, "review_presence")
    base = st.session_state.get("live_review_mark")
    if beat.request is not None and (base is None or base[0] != (cr_id, run)):
        st.session_state["live_review_mark"] = base = ((cr_id, run), beat.request)
    if base is not None and beat.request is not None:
        news = presence.request_news(base[1], beat.request, me=user.username)
        if news:
            with st.container(key="review_news", border=True):
                st.info(f"While you had `{cr_id}` open: {'; '.join(news)}.", icon=":material/notifications:")
                if st.button("Reload the request", key="review_reload", icon=":material/refresh:"):
                    st.rerun()  # the whole page, with the request as it is now
    _timed(started)

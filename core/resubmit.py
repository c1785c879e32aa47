"""Re-submitting an open change request against the current version of ``main``.

An edit request is replayed into a new session and submitted anew; an import request is
planned again from its stored upload (``core.imports``). Either way the old request is
withdrawn. This sits above both kinds of request, so neither module calls the other.
"""

from __future__ import annotations

from typing import Any

from core import imports, reads, sessions
from core.auth import User
from core.catalog import Catalog
from core.change_requests import (
    CHANGED_COLUMN,
    OP_COLUMN,
    ChangeRequest,
    CRState,
    get_change_request,
    staging_path,
    submit_change_request,
    withdraw_change_request,
)
from core.datasets import get_dataset, layout_for
from core.errors import ConflictError, InvalidInput, NotFound, PermissionDenied
from core.storage import Location, location


def resubmit_change_request(catalog: Catalog, cr_id: str, *, actor: User) -> ChangeRequest:
    """The author re-submits an open request against the current version of ``main``.

    An import request is planned again from its stored upload (same mode and key) and
    submitted as a new import request. For an edit request, a new session, based on the
    current version, gets the request's changes: each changed cell's new value, the added
    rows and the deleted rows. Changes to rows that no longer exist (and additions of keys
    that now exist) are left out. The new session is submitted and validated like any
    other. Either way, the old request is then withdrawn.

    Raises:
        PermissionDenied: ``actor`` is not the author.
        ConflictError: The request is not open, or the author has pending edits on the dataset.
        InvalidInput: Nothing of the request still applies.
    """
    record = get_change_request(catalog, cr_id, actor=actor)
    if record.author != actor.username:
        raise PermissionDenied(f"only the author {record.author!r} can re-submit {cr_id}", user=actor.username)
    if record.state != CRState.OPEN:
        raise ConflictError(f"change request {cr_id} is {record.state.value}; only open requests can be re-submitted")
    layout = layout_for(record.project_id, record.dataset_id)
    staging = staging_path(layout, record)
    if not (staging / "_delta_log").is_dir():
        raise NotFound(f"the staging table of {cr_id} is missing", kind="staging")
    if record.kind == "import":
        fresh = imports.resubmit_import(catalog, record, actor=actor)
        withdraw_change_request(catalog, cr_id, actor=actor, reason=f"re-submitted as {fresh.id}")
        return fresh
    current = sessions.current_session(catalog, record.project_id, record.dataset_id, actor=actor)
    if current is not None and sessions.effective_edits(layout, current.session_id):
        raise ConflictError(
            f"you have pending edits on {record.project_id}/{record.dataset_id} (session {current.session_id}); "
            "submit or discard them first"
        )
    dataset = get_dataset(catalog, record.project_id, record.dataset_id, actor=actor)
    ops = _replay_ops(location(dataset.path), int(dataset.version or 0), staging)
    if not ops:
        raise InvalidInput(f"nothing of {cr_id} applies to the current version any more", field="cr_id")
    session = sessions.open_session(catalog, record.project_id, record.dataset_id, actor=actor)
    try:
        sessions.apply_edits(catalog, session.session_id, ops, actor=actor)
        fresh = submit_change_request(
            catalog, session.session_id, actor=actor, title=record.title, description=record.description
        )
    except BaseException:
        sessions.discard_session(catalog, session.session_id, actor=actor, reason="re-submit failed")
        raise
    withdraw_change_request(catalog, cr_id, actor=actor, reason=f"re-submitted as {fresh.id}")
    return fresh


def _replay_ops(main: Location, version: int, staging: Location) -> list[Any]:
    """Edit operations that redo a staged change on ``main`` at ``version``."""
    columns = [c.name for c in reads.table_schema(main, version) if c.name != "row_id"]
    texts = ", ".join(f"CAST(s.{reads.quote_ident(c)} AS VARCHAR)" for c in columns)
    sql = (
        f"SELECT s.row_id, s.{OP_COLUMN}, s.{CHANGED_COLUMN}, m.row_id IS NOT NULL, {texts} "
        "FROM delta_scan(?) s LEFT JOIN (SELECT row_id FROM delta_scan(?, version => ?)) m USING (row_id) "
        "ORDER BY s.row_id"
    )
    ops: list[Any] = []
    for row in reads.cursor().execute(sql, [str(staging), str(main), version]).fetchall():
        row_id, op, changed, exists, values = row[0], row[1], list(row[2] or []), row[3], row[4:]
        by_name = dict(zip(columns, values, strict=True))
        if op == "update" and exists:
            ops += [sessions.SetCell(row_id, c, by_name[c]) for c in changed if c in by_name]
        elif op == "delete" and exists:
            ops.append(sessions.DeleteRow(row_id))
        elif op == "insert" and not exists:
            ops.append(sessions.AddRow({c: v for c, v in by_name.items() if v is not None}))
    return ops

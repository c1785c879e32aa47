"""The ``/api/v1`` resources of editing together: presence, others' pending cells and a session's early conflicts.

Like ``api.routes``, each endpoint checks its input's shape, calls the core function the CLI
or the pages call, and answers with the CLI's ``--json`` document.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from api import errors
from api.routes import Caller, CrId, DatasetId, ProjectId, SessionId
from core import early_conflicts, overlaps, presence, sessions
from interface import context, documents

router = APIRouter(prefix="/api/v1", responses=errors.RESPONSES)


def _document(doc: dict[str, Any], status: int = 200) -> Response:
    return Response(documents.encode(doc), status_code=status, media_type="application/json")


def _page_doc(page: presence.PageRef, beat: presence.Beat) -> dict[str, Any]:
    return {"page": page.key, **beat.to_json()}


@router.get("/projects/{project_id}/datasets/{dataset_id}/presence", tags=["presence"])
def table_presence(project_id: ProjectId, dataset_id: DatasetId, user: Caller) -> Response:
    """Who else has the dataset's Table page open now (name, role, since when), and the dataset's version."""
    page = presence.table_page(project_id, dataset_id)
    return _document(_page_doc(page, presence.present(context.catalog(), page, actor=user)))


@router.post("/projects/{project_id}/datasets/{dataset_id}/presence", tags=["presence"])
def table_beat(project_id: ProjectId, dataset_id: DatasetId, user: Caller) -> Response:
    """Be on the dataset's Table page for the idle time (``OREO_PRESENCE_IDLE_S``), and see who else is."""
    page = presence.table_page(project_id, dataset_id)
    return _document(_page_doc(page, presence.beat(context.catalog(), page, actor=user)))


@router.get("/change-requests/{cr_id}/presence", tags=["presence"])
def review_presence(cr_id: CrId, user: Caller) -> Response:
    """Who else has the change request's Review page open now, and the request's state, revision and comments."""
    catalog = context.catalog()
    page = presence.review_page(catalog, cr_id)
    return _document(_page_doc(page, presence.present(catalog, page, actor=user)))


@router.get("/projects/{project_id}/datasets/{dataset_id}/pending-elsewhere", tags=["presence"])
def pending_elsewhere(project_id: ProjectId, dataset_id: DatasetId, user: Caller) -> Response:
    """The cells others have a change pending on (in a session, or an open request): who and where, never values."""
    found = overlaps.pending_elsewhere(context.catalog(), project_id, dataset_id, actor=user)
    return _document({"project_id": project_id, "dataset_id": dataset_id, "cells": [o.to_json() for o in found]})


@router.get("/sessions/{session_id}/conflicts", tags=["sessions"])
def session_conflicts(session_id: SessionId, user: Caller) -> Response:
    """The session's early conflicts: each pending change main changed since its base, with base, mine and now."""
    catalog = context.catalog()
    found = early_conflicts.find_early_conflicts(catalog, session_id, actor=user)
    info = sessions.get_session(catalog, session_id, actor=user)
    return _document(
        {"session_id": session_id, "base_version": info.base_version, "conflicts": [c.to_json() for c in found]}
    )


class EarlyResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    row_id: str = Field(min_length=1, description="The conflicting row, as an edit's row_id")
    column: str | None = Field(default=None, description="None (or *) for a whole-row conflict")
    choice: Literal["mine", "theirs"] = Field(description="mine: keep your pending value; theirs: drop it")


@router.post("/sessions/{session_id}/conflicts/resolve", tags=["sessions"])
def session_resolve(session_id: SessionId, body: EarlyResolveBody, user: Caller) -> Response:
    """Decide one early conflict; once none is left the session starts from main's version now."""
    done = early_conflicts.resolve_early_conflict(
        context.catalog(), session_id, body.row_id, body.column, body.choice, actor=user
    )
    column = None if body.column in ("", "*") else body.column
    return _document(
        {
            "session_id": session_id, "row_id": body.row_id, "column": column, "choice": body.choice,
            "base_version": done.base_version, "rebased": done.rebased,
            "conflicts": [c.to_json() for c in done.remaining],
        }
    )  # fmt: skip

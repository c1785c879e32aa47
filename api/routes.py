"""The ``/api/v1`` resources. Each endpoint checks its input's shape, calls the core function the
CLI calls, and answers with the CLI's ``--json`` document (``interface.documents``).

Endpoints are plain ``def``s: FastAPI runs them in its thread pool, as core is blocking.
"""

from __future__ import annotations

import email.message
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Form, Path, Query, Request, Response, UploadFile
from fastapi.responses import FileResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from starlette.background import BackgroundTask

from api import errors, jobs
from core import (
    auth,
    bulk,
    change_requests,
    clusters,
    conflicts,
    datasets,
    engine,
    facets,
    history,
    import_folders,
    imports,
    layout,
    maintenance,
    merge,
    projects,
    sessions,
    warmup,
)
from core.errors import InvalidInput
from core.filters import Condition, parse_where
from core.values import load_json
from interface import context, documents, views


def _is_json(request: Request) -> bool:
    """Whether FastAPI would read the body as JSON: no content type, or ``application/json`` or ``+json``."""
    content_type = request.headers.get("content-type")
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class _ExactJsonRoute(APIRoute):
    """Reads a JSON body with ``core.values.load_json`` before FastAPI does: numbers stay exact.

    Starlette's ``json.loads`` would turn ``12345678901234567890.123`` into a rounded float and
    accept ``NaN``; ``load_json`` keeps ints and Decimals and refuses those literals (and lone
    surrogates) with a 400 naming where. The parsed body is left where FastAPI reads it from
    (``Request._json``); text that is not JSON at all is left to FastAPI's own 400.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def exact_json(request: Request) -> Response:
            if _is_json(request):  # never an upload: it is read as a stream
                body = await request.body()
                try:
                    request._json = load_json(body, field="body") if body else None
                except json.JSONDecodeError:
                    pass
            return await handle(request)

        return exact_json


router = APIRouter(prefix="/api/v1", route_class=_ExactJsonRoute, responses=errors.RESPONSES)
# A state-changing call made with ``Prefer: respond-async`` where the route allows it.
_ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {"description": "Started in the background (`Prefer: respond-async`): poll the `Location`'s operation"}
}
_bearer = HTTPBearer(auto_error=False, description="A personal access token from `oreo token create`.")


# The configured catalog (``interface.context``), which every route works on.
_catalog = context.catalog


def caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> auth.User:
    """The user the request's bearer token acts as (with the token's scope); its id goes into the audit log."""
    bearer = credentials is not None and credentials.scheme.lower() == "bearer"
    user = context.token_user(credentials.credentials if credentials is not None and bearer else None)
    request.state.username = user.username
    tags = getattr(request.state, "audit_tags", None)
    if tags is not None and user.scope is not None:
        tags["token_id"] = user.scope.token_id
    return user


Caller = Annotated[auth.User, Depends(caller)]
Limit = Annotated[int, Query(ge=1, le=10_000, description="Page size")]
Offset = Annotated[int, Query(ge=0, description="Items to skip")]

# Every id Oreo makes or accepts (core.layout.ID_PATTERN), stated where the schema can show it.
ID_PATTERN = "^" + layout.ID_PATTERN.pattern + "$"
ProjectId = Annotated[str, Path(pattern=ID_PATTERN, description="A project id")]
DatasetId = Annotated[str, Path(pattern=ID_PATTERN, description="A dataset id")]
SessionId = Annotated[str, Path(pattern=ID_PATTERN, description="A live-edit session id")]
CrId = Annotated[str, Path(pattern=ID_PATTERN, description="A change request id")]
OperationId = Annotated[str, Path(pattern=ID_PATTERN, description="An operation id (the 202's Location)")]


class _Body(BaseModel):
    # strict: a JSON body's types are as the schema states them (no "0" or 0 for false).
    model_config = ConfigDict(extra="forbid", strict=True)


def _whole(value: Any) -> Any:
    """JSON Schema's integer includes 72.0; strict pydantic would refuse it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


JsonInt = Annotated[int, BeforeValidator(_whole)]


def _one_of_these(*alternatives: dict[str, Any]) -> dict[str, Any]:
    """A body schema's "at least one of these" rule, stated as JSON Schema ``anyOf`` for clients and fuzzers."""
    return {"anyOf": [{"required": list(a), "properties": a} for a in alternatives]}


def _document(doc: dict[str, Any], status: int = 200) -> Response:
    """A CLI document as the response body, encoded once (``interface.documents.encode``: strict JSON)."""
    return Response(documents.encode(doc), status_code=status, media_type="application/json")


# Where things live on the server's disk: the CLI's documents show them to the operator; the API never does.
_SERVER_PATHS = ("path", "report")
# A short retention is forced by the body's own field, not the CLI's --force.
FORCE_HINT = "set force to true to do it anyway"


def _public(doc: dict[str, Any]) -> dict[str, Any]:
    """A CLI document without its server paths (the dataset's folder, a maintenance report's file)."""
    return {key: value for key, value in doc.items() if key not in _SERVER_PATHS}


def _respond(answer: jobs.Answer, *, replayed: bool = False) -> Response:
    """A state-changing call's answer (or its stored first answer, ``replayed``), encoded like every body."""
    response = _document(answer.body, answer.status)
    response.headers.update(answer.headers)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response


def _act(request: Request, user: auth.User, kind: str, body: Any, work: jobs.Work, *, can_async: bool) -> Response:
    """Run a state-changing call: once per ``Idempotency-Key``, and in the background if asked and allowed."""
    catalog = _catalog()
    key = request.headers.get("Idempotency-Key")
    if key is not None:
        stored = jobs.claim_key(catalog, user, key, jobs.request_hash(request.method, request.url.path, body))
        if stored is not None:
            return _respond(stored, replayed=True)
    try:
        if can_async and "respond-async" in request.headers.get("Prefer", "").lower():
            answer = jobs.start_operation(catalog, user, kind, work)
        elif key is not None:
            with jobs.key_kept_alive(catalog, user, key):
                answer = jobs.run_now(work)
        else:
            answer = jobs.run_now(work)
    except BaseException:
        if key is not None:
            jobs.settle_key(catalog, user, key, None)
        raise
    if key is not None:
        jobs.settle_key(catalog, user, key, answer if answer.status < 500 else None)
    return _respond(answer)


# ---------------------------------------------------------------- health and operations


_ENGINE_STATES = {"ready": "up", "starting": "starting"}


@router.get("/health", tags=["service"])
def health() -> dict[str, str]:
    """Liveness, and whether the Spark engine is up, starting or down (no token needed)."""
    return {"status": "ok", "engine": _ENGINE_STATES.get(engine.engine_status().state, "down")}


@router.get("/operations/{op_id}", tags=["service"])
def operation(op_id: OperationId, user: Caller) -> dict[str, Any]:
    """A long operation started with ``Prefer: respond-async``: running, succeeded (with its result) or failed."""
    return jobs.operation_document(_catalog(), op_id, user)


# ---------------------------------------------------------------- projects and datasets


@router.get("/projects", tags=["datasets"])
def project_list(user: Caller) -> dict[str, Any]:
    return {"projects": [documents.project_doc(p) for p in projects.list_projects(_catalog(), user)]}


def _project_id(value: str) -> str:
    """core's check, so a refusal says what core says ("invalid project id ...: use ...")."""
    try:
        return layout.validate_id(value, kind="project id")
    except InvalidInput as exc:
        raise ValueError(str(exc)) from exc


class ProjectCreate(_Body):
    id: Annotated[str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN}), AfterValidator(_project_id)] = Field(
        description="The new project's id"
    )
    name: str | None = None


@router.post("/projects", tags=["datasets"], status_code=201)
def project_create(body: ProjectCreate, user: Caller) -> Response:
    """Create a project (site admins), as ``oreo project create``."""
    project = projects.create_project(_catalog(), body.id, name=body.name, actor=user)
    return _document(documents.project_doc(project), 201)


@router.get("/projects/{project_id}/datasets", tags=["datasets"])
def dataset_list(project_id: ProjectId, user: Caller) -> dict[str, Any]:
    found = datasets.list_datasets(_catalog(), actor=user, project_id=project_id)
    return {"datasets": [_public(documents.dataset_doc(i)) for i in found]}


@router.post("/projects/{project_id}/datasets", tags=["datasets"], status_code=201)
def dataset_create(
    project_id: ProjectId,
    user: Caller,
    dataset_id: Annotated[str, Form(pattern=ID_PATTERN, description="The new dataset's id")],
    file: Annotated[UploadFile, File(description="CSV, Parquet or XLSX")],
    key: Annotated[str | None, Form(description="Column whose values become row_id")] = None,
    sheet: Annotated[str | None, Form(description="XLSX sheet to read")] = None,
) -> Response:
    """Create a dataset from an uploaded file (admins); Spark writes its main Delta table."""
    projects.get_project(_catalog(), project_id)  # an unknown project is named before the file is looked at
    with imports.saved_upload(file.file, file.filename or "upload") as source:
        info = datasets.create_dataset(_catalog(), project_id, dataset_id, source, key=key, sheet=sheet, actor=user)
    return _document(_public(documents.dataset_doc(info)), 201)


@router.get("/projects/{project_id}/datasets/{dataset_id}", tags=["datasets"])
def dataset_show(project_id: ProjectId, dataset_id: DatasetId, user: Caller) -> dict[str, Any]:
    info = datasets.get_dataset(_catalog(), project_id, dataset_id, actor=user)
    return _public(documents.dataset_show_doc(info, datasets.dataset_columns(info)))


@router.get("/projects/{project_id}/datasets/{dataset_id}/rows", tags=["datasets"])
def dataset_rows(
    project_id: ProjectId,
    dataset_id: DatasetId,
    user: Caller,
    limit: Limit = 50,
    offset: Offset = 0,
    version: Annotated[int | None, Query(ge=0, description="A version of main (default: the latest)")] = None,
    order_by: Annotated[str | None, Query(min_length=1, description="A column to sort by")] = None,
    desc: bool = False,
    where: Annotated[list[str] | None, Query(description="COLUMN OP VALUE, as the CLI's --where; ANDed")] = None,
    session_id: Annotated[
        str | None, Query(pattern=ID_PATTERN, description="Apply this live-edit session's overlay (not with version)")
    ] = None,
) -> Response:
    """A page of rows, filtered (the CLI's ``--where`` grammar), sorted, as of a version.

    Whole numbers are JSON integers, FLOAT values the shortest text of their float32, and
    DECIMAL values strings of their exact digits (a JSON reader would round them as a double).
    """
    catalog = _catalog()
    if session_id is not None:
        context.session_on(catalog, session_id, project_id, dataset_id, user)
        if version is not None:
            raise InvalidInput("session_id shows pending edits over the latest version; drop version", field="version")
    elif where:
        datasets.get_dataset(
            catalog, project_id, dataset_id, actor=user
        )  # an unknown dataset is 404 before a bad where
    conditions = [parse_where(text) for text in where or []]
    if session_id is not None:
        page: Any = sessions.overlay_page(
            catalog, session_id, actor=user, conditions=conditions, order_by=order_by, descending=desc,
            limit=limit, offset=offset,
        )  # fmt: skip
    else:
        page = datasets.dataset_rows(
            catalog, project_id, dataset_id, actor=user, version=version, conditions=conditions, order_by=order_by,
            descending=desc, limit=limit, offset=offset,
        )  # fmt: skip
    return _document(documents.rows_doc(page))


Where = Annotated[list[str] | None, Query(description="COLUMN OP VALUE, as the CLI's --where; ANDed")]
ColumnName = Annotated[str, Query(min_length=1, description="A column of the dataset")]
OverlaySession = Annotated[
    str | None, Query(pattern=ID_PATTERN, description="Read the table as this live-edit session's edits leave it")
]


def _conditions(project_id: str, dataset_id: str, user: auth.User, where: list[str] | None) -> list[Condition]:
    """The ``where`` conditions, read once the dataset is known to exist (an unknown one is 404 before a bad where)."""
    if where:
        datasets.get_dataset(_catalog(), project_id, dataset_id, actor=user)
    return [parse_where(text) for text in where or []]


@router.get("/projects/{project_id}/datasets/{dataset_id}/facet", tags=["datasets"])
def dataset_facet(
    project_id: ProjectId,
    dataset_id: DatasetId,
    column: ColumnName,
    user: Caller,
    where: Where = None,
    limit: Annotated[int, Query(ge=1, le=facets.MAX_LIMIT, description="How many of the most frequent values")] = 20,
    session_id: OverlaySession = None,
) -> Response:
    """A column's most frequent values with their row counts, its number of distinct values, and for
    numbers and dates a histogram, among the rows ``where`` keeps (``oreo dataset facet``)."""
    catalog = _catalog()
    conditions = _conditions(project_id, dataset_id, user, where)
    facet = facets.dataset_facet(
        catalog, project_id, dataset_id, column, actor=user, conditions=conditions, session_id=session_id, limit=limit
    )
    return _document({"project": project_id, "dataset": dataset_id, **facet.to_json()})


@router.get("/projects/{project_id}/datasets/{dataset_id}/clusters", tags=["datasets"])
def dataset_clusters(
    project_id: ProjectId,
    dataset_id: DatasetId,
    column: ColumnName,
    user: Caller,
    method: Literal["fingerprint", "ngram", "levenshtein"] = "fingerprint",
    radius: Annotated[int, Query(ge=1, le=clusters.MAX_RADIUS, description="levenshtein: the most edits")] = 1,
    ngram_size: Annotated[int, Query(ge=1, le=clusters.MAX_NGRAM, description="ngram: the n-grams' length")] = 2,
    where: Where = None,
    session_id: OverlaySession = None,
) -> Response:
    """Groups of a text column's values that probably mean the same thing, each value with its row count
    (``oreo dataset clusters``)."""
    catalog = _catalog()
    conditions = _conditions(project_id, dataset_id, user, where)
    found = clusters.dataset_clusters(
        catalog, project_id, dataset_id, column, actor=user, method=method, radius=radius, ngram_size=ngram_size,
        conditions=conditions, session_id=session_id,
    )  # fmt: skip
    return _document({"project": project_id, "dataset": dataset_id, **found.to_json()})


@router.get("/projects/{project_id}/datasets/{dataset_id}/rules", tags=["datasets"])
def rules_show(project_id: ProjectId, dataset_id: DatasetId, user: Caller) -> dict[str, Any]:
    """The dataset's ExpectationSuite (GX JSON)."""
    return datasets.dataset_rules(_catalog(), project_id, dataset_id, actor=user)


@router.get("/projects/{project_id}/datasets/{dataset_id}/rules/proposal", tags=["datasets"])
def rules_propose(project_id: ProjectId, dataset_id: DatasetId, user: Caller) -> Response:
    """Rules inferred from the data beside the current ones, as ``oreo rules propose``; nothing is stored."""
    proposal = datasets.propose_dataset_rules(_catalog(), project_id, dataset_id, actor=user)
    return _document(documents.rule_proposal_doc(proposal))


class AcceptRulesBody(_Body):
    """Either ``rules`` (one or more names) or ``all: true``."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["rules"],
                    "properties": {
                        "rules": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "all": {"const": False},
                    },
                },
                {"required": ["all"], "properties": {"all": {"const": True}, "rules": {"maxItems": 0}}},
            ]
        }
    )
    rules: list[str] | None = Field(default=None, description="Names of proposed rules, as the proposal lists them")
    all: bool = Field(default=False, description="Accept every proposed change")


@router.post("/projects/{project_id}/datasets/{dataset_id}/rules/accept", tags=["datasets"])
def rules_accept(project_id: ProjectId, dataset_id: DatasetId, body: AcceptRulesBody, user: Caller) -> Response:
    """Accept proposed rules (admins), as ``oreo rules accept``; a rule a person wrote or edited is kept."""
    if body.all == bool(body.rules):
        raise InvalidInput('send "rules": [names] or "all": true, not both', field="rules")
    result = datasets.accept_proposed_rules(
        _catalog(), project_id, dataset_id, actor=user, names=None if body.all else body.rules
    )
    return _document(documents.rules_accepted_doc(result))


# ---------------------------------------------------------------- sessions and edits


# A cell's value as JSON carries it: text, a number, true/false or null (core checks it against the column).
CellValue = Annotated[Any, WithJsonSchema({"type": ["string", "number", "boolean", "null"]})]


class SetCell(_Body):
    row_id: str = Field(min_length=1)
    column: str = Field(min_length=1)
    value: CellValue = None


class EditsBody(_Body):
    """At least one edit: ``set``, ``delete_rows`` or ``add_rows``."""

    model_config = ConfigDict(
        json_schema_extra=_one_of_these(
            {"set": {"minItems": 1}}, {"delete_rows": {"minItems": 1}}, {"add_rows": {"minItems": 1}}
        )
    )
    session_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Default: your open session")
    set: list[SetCell] = Field(default_factory=list)
    delete_rows: list[str] = Field(default_factory=list)
    add_rows: list[dict[str, CellValue]] = Field(default_factory=list)


@router.post("/projects/{project_id}/datasets/{dataset_id}/edits", tags=["sessions"])
def edit(project_id: ProjectId, dataset_id: DatasetId, body: EditsBody, user: Caller) -> dict[str, Any]:
    """Save cell edits, deleted rows and added rows to a live-edit session (default: the caller's open one).

    Numbers are read from their JSON text, never through a double: `9007199254740993.0` lands in a
    BIGINT exactly, `1e400` is refused as out of range. `NaN`, `Infinity` and `-Infinity` are not
    JSON and are refused (send the text `"NaN"` where the dataset allows non-finite floats).
    """
    ops: list[sessions.EditOp] = [sessions.SetCell(c.row_id, c.column, c.value) for c in body.set]
    ops += [sessions.DeleteRow(r) for r in body.delete_rows]
    ops += [sessions.AddRow(r) for r in body.add_rows]
    if not ops:  # refused before a session is opened, so a refused edit leaves nothing behind
        raise InvalidInput("no edits given; send set, delete_rows or add_rows", field="edits")
    catalog = _catalog()
    session_id = body.session_id
    if session_id is None:  # a session is started only for values that fit: a refused edit leaves none
        info, count = sessions.save_edits(catalog, project_id, dataset_id, ops, actor=user)
        session_id = info.session_id
    else:
        context.session_on(catalog, session_id, project_id, dataset_id, user)
        count = sessions.apply_edits(catalog, session_id, ops, actor=user)
    return documents.edit_doc(session_id, count)


@router.get("/sessions/{session_id}", tags=["sessions"])
def session_show(session_id: SessionId, user: Caller) -> Response:
    info = sessions.get_session(_catalog(), session_id, actor=user)
    layout = datasets.layout_for(info.project_id, info.dataset_id)
    edits = sessions.effective_edits(layout, session_id)
    return _document(documents.session_doc(info, edits, bulk.session_bulks(layout, session_id)))


class SetAll(_Body):
    value: CellValue = Field(description="The typed value every matching cell gets; null empties them")


class ReplaceSpec(_Body):
    find: str = Field(description="The text (or pattern) to find")
    replace: str = Field(description="What it becomes (a regex's groups as \\1 or \\g<name>)")
    mode: Literal["whole", "substring", "regex"] = "substring"
    ignore_case: bool = False


class BulkBody(_Body):
    """One bulk change of ``column`` in every row matching ``where``: one of ``set``, ``replace`` or ``transform``."""

    # Exactly one operation; each is left out rather than sent as null.
    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["set"]}, {"required": ["replace"]}, {"required": ["transform"]}]}
    )
    session_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Default: your open session")
    where: list[str] = Field(default_factory=list, description="COLUMN OP VALUE, as the CLI's --where; ANDed")
    column: str = Field(min_length=1)
    set: SetAll = Field(default=None)  # type: ignore[assignment]
    replace: ReplaceSpec = Field(default=None)  # type: ignore[assignment]
    transform: str = Field(
        default=None,  # type: ignore[assignment]
        pattern=r"^(trim|collapse|upper|lower|title|round:-?[0-9]{1,2}|number:[.,]|date:.*%.*)$",
        description="trim, collapse, upper, lower, title, round:N, number:SEP (. or ,) or date:FORMAT (strptime)",
    )

    def operation(self) -> bulk.Operation:
        given = [o for o in (self.set, self.replace, self.transform) if o is not None]
        if len(given) != 1:
            raise InvalidInput("send exactly one of set, replace or transform", field="body")
        if self.set is not None:
            return bulk.SetValue(self.set.value)
        if self.replace is not None:
            r = self.replace
            return bulk.Replace(r.find, r.replace, r.mode, r.ignore_case)
        return bulk.parse_transform(str(self.transform))


def _bulk_call(project_id: str, dataset_id: str, body: BulkBody, user: auth.User, *, preview: bool) -> dict[str, Any]:
    datasets.get_dataset(_catalog(), project_id, dataset_id, actor=user)  # an unknown dataset is 404 before a bad body
    operation = body.operation()
    conditions = [parse_where(text) for text in body.where]
    call = bulk.preview_bulk if preview else bulk.apply_bulk
    result = call(_catalog(), project_id, dataset_id, body.column, operation, actor=user, conditions=conditions,
                  session_id=body.session_id)  # fmt: skip
    return {**result.to_json(), "preview": preview}


@router.post("/projects/{project_id}/datasets/{dataset_id}/bulk-edits/preview", tags=["sessions"])
def bulk_preview(project_id: ProjectId, dataset_id: DatasetId, body: BulkBody, user: Caller) -> dict[str, Any]:
    """What a bulk change would do: the matching and changing rows and a sample, before → after; nothing is saved.

    Refused (400) for a bad regular expression, more matching rows than `OREO_MAX_BULK_ROWS`, or a new
    value the column cannot hold (naming its first rows).
    """
    return _bulk_call(project_id, dataset_id, body, user, preview=True)


@router.post("/projects/{project_id}/datasets/{dataset_id}/bulk-edits", tags=["sessions"], status_code=201)
def bulk_apply(project_id: ProjectId, dataset_id: DatasetId, body: BulkBody, user: Caller) -> Response:
    """Change every matching row at once: one pending change in the session (started if none), undone as one."""
    return _document(_bulk_call(project_id, dataset_id, body, user, preview=False), 201)


class ClusterMergeBody(_Body):
    """Merge clusters of ``column`` (as ``GET .../clusters`` finds them) into one bulk change."""

    column: str = Field(min_length=1)
    method: Literal["fingerprint", "ngram", "levenshtein"] = "fingerprint"
    radius: JsonInt = Field(default=1, ge=1, le=clusters.MAX_RADIUS, description="levenshtein: the most edits")
    ngram_size: JsonInt = Field(default=2, ge=1, le=clusters.MAX_NGRAM, description="ngram: the n-grams' length")
    where: list[str] = Field(default_factory=list, description="COLUMN OP VALUE, as the CLI's --where; ANDed")
    session_id: str | None = Field(default=None, pattern=ID_PATTERN, description="Default: your open session")
    clusters: list[str] | None = Field(
        default=None, min_length=1, description="Each cluster by its key or one of its values; left out: every cluster"
    )
    into: str | None = Field(
        default=None, description="With one cluster: the value it becomes (default: its most frequent)"
    )


def _cluster_merge(
    project_id: str, dataset_id: str, body: ClusterMergeBody, user: auth.User, *, preview: bool
) -> dict[str, Any]:
    conditions = _conditions(project_id, dataset_id, user, body.where)
    result = clusters.merge_named(
        _catalog(), project_id, dataset_id, body.column, body.clusters, actor=user, into=body.into, preview=preview,
        method=body.method, radius=body.radius, ngram_size=body.ngram_size, conditions=conditions,
        session_id=body.session_id,
    )  # fmt: skip
    return {**result.to_json(), "preview": preview}


@router.post("/projects/{project_id}/datasets/{dataset_id}/cluster-merges/preview", tags=["sessions"])
def cluster_merge_preview(
    project_id: ProjectId, dataset_id: DatasetId, body: ClusterMergeBody, user: Caller
) -> dict[str, Any]:
    """What merging the named clusters would do, as a bulk change's preview; nothing is saved."""
    return _cluster_merge(project_id, dataset_id, body, user, preview=True)


@router.post("/projects/{project_id}/datasets/{dataset_id}/cluster-merges", tags=["sessions"], status_code=201)
def cluster_merge(project_id: ProjectId, dataset_id: DatasetId, body: ClusterMergeBody, user: Caller) -> Response:
    """Merge the named clusters (``oreo dataset clusters --merge``): each value becomes its cluster's chosen value,
    as one pending change in the session (started if none), undone as one."""
    return _document(_cluster_merge(project_id, dataset_id, body, user, preview=False), 201)


@router.get("/sessions/{session_id}/bulk-edits", tags=["sessions"])
def bulk_list(session_id: SessionId, user: Caller) -> dict[str, Any]:
    """The bulk changes pending in a session, each with its summary line."""
    info = sessions.get_session(_catalog(), session_id, actor=user)
    changes = bulk.session_bulks(datasets.layout_for(info.project_id, info.dataset_id), session_id)
    return {"session_id": session_id, "bulk_edits": [c.to_json() for c in changes]}


@router.delete("/sessions/{session_id}/bulk-edits/{bulk_id}", tags=["sessions"])
def bulk_undo(
    session_id: SessionId,
    bulk_id: Annotated[str, Path(pattern=ID_PATTERN, description="A bulk change's id")],
    user: Caller,
) -> dict[str, Any]:
    """Undo a bulk change: each of its cells gets its value before it back (one save)."""
    restored = bulk.undo_bulk(_catalog(), session_id, bulk_id, actor=user)
    return {"session_id": session_id, "bulk_id": bulk_id, "restored": restored}


# ---------------------------------------------------------------- change requests


class SubmitBody(_Body):
    session_id: str = Field(pattern=ID_PATTERN)
    title: str | None = None
    description: str = ""


@router.post("/projects/{project_id}/datasets/{dataset_id}/change-requests", tags=["change requests"], status_code=201)
def cr_submit(
    project_id: ProjectId, dataset_id: DatasetId, body: SubmitBody, request: Request, user: Caller
) -> Response:
    """Submit a session's edits as a change request (staged, then validated)."""
    catalog = _catalog()

    def work() -> tuple[int, dict[str, Any]]:
        context.session_on(catalog, body.session_id, project_id, dataset_id, user)
        cr = change_requests.submit_change_request(
            catalog, body.session_id, actor=user, title=body.title, description=body.description
        )
        return 201, documents.submit_doc(cr, change_requests.validation_for(catalog, cr.id, actor=user))

    return _act(request, user, "submit", body.model_dump(), work, can_async=False)


@router.get("/change-requests", tags=["change requests"])
def cr_list(
    user: Caller,
    project: Annotated[str | None, Query(pattern=ID_PATTERN, description="Only this project's requests")] = None,
    dataset: Annotated[
        str | None, Query(pattern=ID_PATTERN, description="Only requests on datasets of this id")
    ] = None,
    state: change_requests.CRState | None = None,
) -> Response:
    found = change_requests.list_change_requests(
        _catalog(), actor=user, project_id=project, dataset_id=dataset, state=state
    )
    return _document({"change_requests": [documents.cr_doc(c) for c in found]})


@router.get("/change-requests/{cr_id}", tags=["change requests"])
def cr_show(
    cr_id: CrId,
    user: Caller,
    limit: Annotated[
        int, Query(ge=1, le=views.PAGE_MAX, description="At most this many changes (and rows)")
    ] = views.PAGE_MAX,
    offset: Offset = 0,
    rows: bool = False,
    kind: Annotated[
        list[Literal["insert", "update", "delete"]] | None, Query(description="With rows: only these kinds of change")
    ] = None,
    column: Annotated[list[str] | None, Query(description="With rows: only rows changing these columns")] = None,
) -> Response:
    """A change request with its cell changes, validation, conflicts and thread (``rows=true``: row-shaped diff too).

    The changes (and rows) are one page of ``interface.views``' paging rule: ``limit`` from ``offset``,
    ``total`` in all.
    """
    catalog = _catalog()
    view = views.change_request_view(catalog, cr_id, actor=user)
    doc = views.show_document(view, views.changes_page(catalog, cr_id, actor=user, limit=limit, offset=offset))
    warmup.prepare_for_review(view.request, user.username)  # its approval, if one follows, starts sooner
    if rows:
        row_page = views.rows_page(catalog, cr_id, actor=user, kinds=kind, columns=column, limit=limit, offset=offset)
        doc.update(documents.row_diff_doc(row_page))
    return _document(doc)


class _Reviewed(_Body):
    """The revision the caller reviewed (``revision``, ``digest`` as ``GET /change-requests/{id}`` shows them).

    Both optional, as the head SHA of GitHub's merge API is: without them the current
    revision is decided on and the answer names it; with them a request that moved on is
    refused with 409.
    """

    revision: Annotated[int, Field(ge=1), BeforeValidator(_whole)] | None = None
    digest: str | None = Field(default=None, max_length=64)


class ApproveBody(_Reviewed):
    comment: str | None = None


@router.post("/change-requests/{cr_id}/approve", tags=["change requests"], responses=_ACCEPTED)
def cr_approve(cr_id: CrId, request: Request, user: Caller, body: ApproveBody | None = None) -> Response:
    """Merge a change request into main (one Delta MERGE). ``Prefer: respond-async`` answers 202."""
    body = body or ApproveBody()
    catalog = _catalog()

    def work() -> tuple[int, dict[str, Any]]:
        merged = merge.approve_change_request(
            catalog,
            cr_id,
            actor=user,
            comment=body.comment,
            expected_revision=body.revision,
            expected_digest=body.digest,
        )
        return 200, documents.approve_doc(merged)

    # The revision and digest count for the Idempotency-Key only when given: a key's hash stays what it was.
    reviewed = body.model_dump(exclude_none=True, include={"revision", "digest"})
    return _act(request, user, "approve", {"comment": body.comment, **reviewed}, work, can_async=True)


class ReasonBody(_Reviewed):
    reason: str = Field(min_length=1, pattern=r"\S", description="Why; the author is told")


@router.post("/change-requests/{cr_id}/reject", tags=["change requests"])
def cr_reject(cr_id: CrId, body: ReasonBody, user: Caller) -> dict[str, Any]:
    cr = change_requests.reject_change_request(
        _catalog(), cr_id, actor=user, reason=body.reason, expected_revision=body.revision, expected_digest=body.digest
    )
    return documents.state_doc(cr)


@router.post("/change-requests/{cr_id}/withdraw", tags=["change requests"])
def cr_withdraw(cr_id: CrId, user: Caller) -> dict[str, Any]:
    return documents.state_doc(change_requests.withdraw_change_request(_catalog(), cr_id, actor=user))


@router.post("/change-requests/{cr_id}/request-changes", tags=["change requests"])
def cr_request_changes(cr_id: CrId, body: ReasonBody, user: Caller) -> dict[str, Any]:
    cr = change_requests.request_changes(
        _catalog(), cr_id, body.reason, actor=user, expected_revision=body.revision, expected_digest=body.digest
    )
    return documents.changes_requested_doc(cr)


@router.post("/change-requests/{cr_id}/revise", tags=["change requests"])
def cr_revise(cr_id: CrId, user: Caller) -> Response:
    catalog = _catalog()
    cr = change_requests.revise_change_request(catalog, cr_id, actor=user)
    return _document(documents.revise_doc(cr, change_requests.validation_for(catalog, cr.id, actor=user)))


class ResolveBody(_Body):
    row_id: str = Field(min_length=1)
    column: str | None = Field(default=None, description="None (or *) for a whole-row conflict")
    choice: Literal["mine", "theirs"] = Field(description="mine: keep the request's value; theirs: drop it")


@router.post("/change-requests/{cr_id}/resolve", tags=["change requests"])
def cr_resolve(cr_id: CrId, body: ResolveBody, user: Caller) -> Response:
    """The author settles one conflict; the result is the request's next revision, with the conflicts left."""
    catalog = _catalog()
    cr = conflicts.resolve_conflict(catalog, cr_id, body.row_id, body.column, body.choice, actor=user)
    doc = documents.revise_doc(cr, change_requests.validation_for(catalog, cr.id, actor=user))
    doc["conflicts"] = [documents.conflict_doc(cr, c) for c in conflicts.find_conflicts(catalog, cr.id, actor=user)]
    return _document(doc)


class CommentBody(_Body):
    text: str = Field(min_length=1, pattern=r"\S")
    row_id: str | None = None
    column: str | None = None


@router.post("/change-requests/{cr_id}/comments", tags=["change requests"], status_code=201)
def cr_comment(cr_id: CrId, body: CommentBody, user: Caller) -> Response:
    """Comment on a change request, or on one cell of its diff (row_id and column)."""
    comment = change_requests.add_comment(
        _catalog(), cr_id, body.text, actor=user, row_id=body.row_id, column=body.column
    )
    return _document(documents.comment_doc(cr_id, comment), 201)


# ---------------------------------------------------------------- history


@router.get("/projects/{project_id}/datasets/{dataset_id}/history", tags=["history"])
def history_list(
    project_id: ProjectId,
    dataset_id: DatasetId,
    user: Caller,
    limit: Annotated[int | None, Query(ge=1, description="At most this many versions (default: all)")] = None,
    offset: Offset = 0,
    hide_maintenance: bool = False,
) -> Response:
    """The versions of the dataset's main table, newest first."""
    page = history.table_history(
        _catalog(), project_id, dataset_id, actor=user, limit=limit, offset=offset, hide_maintenance=hide_maintenance
    )
    return _document(documents.history_doc(page))


@router.get("/projects/{project_id}/datasets/{dataset_id}/diff", tags=["history"])
def version_diff(
    project_id: ProjectId,
    dataset_id: DatasetId,
    user: Caller,
    from_version: Annotated[int, Query(alias="from", ge=0, description="The older version (400 unless before to)")],
    to_version: Annotated[int, Query(alias="to", ge=0, description="The newer version")],
    limit: Annotated[int, Query(ge=1, le=10_000, description="At most this many cell changes")] = 100,
    offset: Offset = 0,
) -> Response:
    """The cell-level changes between two versions."""
    result = history.diff_versions(
        _catalog(), project_id, dataset_id, from_version, to_version, actor=user, limit=limit, offset=offset
    )
    return _document(documents.version_diff_doc(result))


class RestoreBody(_Body):
    version: JsonInt = Field(ge=0)
    reason: str = Field(min_length=1, pattern=r"\S", description="Why; kept in the table's history")


@router.post("/projects/{project_id}/datasets/{dataset_id}/restore", tags=["history"], responses=_ACCEPTED)
def restore(
    project_id: ProjectId, dataset_id: DatasetId, body: RestoreBody, request: Request, user: Caller
) -> Response:
    """Restore main to an earlier version in one new commit (admins). ``Prefer: respond-async`` answers 202."""
    catalog = _catalog()

    def work() -> tuple[int, dict[str, Any]]:
        result = history.restore_version(catalog, project_id, dataset_id, body.version, actor=user, reason=body.reason)
        return 200, documents.restore_doc(result)

    return _act(request, user, "restore", body.model_dump(), work, can_async=True)


@router.get(
    "/projects/{project_id}/datasets/{dataset_id}/export",
    tags=["history"],
    response_class=FileResponse,
    responses={200: {"content": {"application/vnd.apache.parquet": {}, "text/csv": {}}}},
)
def export(
    project_id: ProjectId,
    dataset_id: DatasetId,
    user: Caller,
    version: Annotated[int | None, Query(ge=0, description="A version of main (default: the latest)")] = None,
    format: Literal["parquet", "csv"] = "parquet",  # the issue names the parameter
    raw: Annotated[
        bool, Query(description="CSV: text cells as they are (default: a leading ' before =, +, -, @, tab or CR)")
    ] = False,
) -> FileResponse:
    """Every column of a version as one Parquet or CSV file, streamed from disk (constant memory)."""
    folder = FilePath(tempfile.mkdtemp(prefix="oreo-export-"))
    try:
        name = f"{project_id}-{dataset_id}.{format}"
        result = history.export_version(
            _catalog(), project_id, dataset_id, folder / name, actor=user, version=version, raw=raw
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return FileResponse(
        result.path,
        media_type="application/vnd.apache.parquet" if format == "parquet" else "text/csv",
        filename=f"{project_id}-{dataset_id}-v{result.version}.{format}",
        headers={"X-Oreo-Version": str(result.version), "X-Oreo-Rows": str(result.rows)},
        background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True),
    )


# ---------------------------------------------------------------- imports and maintenance


@router.post(
    "/projects/{project_id}/datasets/{dataset_id}/imports",
    tags=["imports"],
    status_code=201,
    responses=_ACCEPTED,
    # Exactly one of the two sources, stated beside the form's generated schema.
    openapi_extra={
        "requestBody": {
            "content": {"multipart/form-data": {"schema": {"oneOf": [{"required": ["file"]}, {"required": ["path"]}]}}}
        }
    },
)
def import_file(
    project_id: ProjectId,
    dataset_id: DatasetId,
    request: Request,
    user: Caller,
    file: Annotated[UploadFile | None, File(description="CSV, Parquet or XLSX")] = None,
    path: Annotated[
        str | None,
        Form(
            min_length=1, description="Instead of file: a file on the server (site admins, inside OREO_IMPORT_FOLDERS)"
        ),
    ] = None,
    mode: Annotated[
        Literal["append", "upsert", "replace"],
        Form(description="append, upsert or replace (seed 000's overwrite)"),
    ] = "append",
    key: Annotated[str | None, Form()] = None,
    sheet: Annotated[str | None, Form()] = None,
    title: Annotated[str | None, Form()] = None,
    review: Annotated[bool, Query(description="false: an admin's direct commit, merged at once and audited")] = True,
) -> Response:
    """Import a file as a change request (multipart upload, or ``path`` on the server: ``core.import_folders``)."""
    catalog = _catalog()
    if (file is None) == (path is None):
        raise InvalidInput("send exactly one of file (a multipart upload) or path (a file on the server)", field="file")
    stack = ExitStack()
    if file is not None:
        datasets.get_dataset(catalog, project_id, dataset_id, actor=user)  # an unknown dataset before the file
        source = stack.enter_context(imports.saved_upload(file.file, file.filename or "upload"))
        fingerprint: Any = {"file": _file_digest(source)}
    else:
        source = import_folders.server_file(str(path), actor=user)  # refused before the file is opened
        fingerprint = {"path": str(path)}
    fingerprint.update(mode=mode, key=key, sheet=sheet, title=title, review=review)

    def work() -> tuple[int, dict[str, Any]]:
        try:
            cr, plan = imports.import_file(
                catalog, project_id, dataset_id, source, actor=user, mode=mode, key=key, sheet=sheet, title=title,
                review=review,
            )  # fmt: skip
            run = change_requests.validation_for(catalog, cr.id, actor=user)
            summary = imports.import_summary(catalog, cr.id, actor=user)
            return 201, documents.import_doc(cr, run, plan, summary, reviewed=review)
        finally:
            stack.close()

    try:
        response = _act(request, user, "import", fingerprint, work, can_async=True)
    except BaseException:
        stack.close()
        raise
    if response.status_code != 202 or "Idempotent-Replayed" in response.headers:
        stack.close()  # the work ran (and closed it) or never will; a fresh 202's work closes it when done
    return response


def _file_digest(path: FilePath) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class MaintenanceBody(_Body):
    """At least one of ``optimize``, ``zorder``, ``vacuum`` or ``checkpoint``."""

    model_config = ConfigDict(
        json_schema_extra=_one_of_these(
            {"optimize": {"const": True}},
            {"zorder": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            {"vacuum": {"const": True}},
            {"checkpoint": {"const": True}},
        )
    )
    optimize: bool = False
    zorder: list[str] | None = None
    vacuum: bool = False
    retain_hours: float | None = Field(default=None, ge=0)
    force: bool = False
    checkpoint: bool = False


@router.post("/projects/{project_id}/datasets/{dataset_id}/maintenance", tags=["maintenance"], responses=_ACCEPTED)
def maintain(
    project_id: ProjectId, dataset_id: DatasetId, body: MaintenanceBody, request: Request, user: Caller
) -> Response:
    """OPTIMIZE, VACUUM and/or a checkpoint of the main table (admins); the run's report."""
    if not (body.optimize or body.zorder or body.vacuum or body.checkpoint):
        raise InvalidInput("nothing to do: choose at least one of optimize, zorder, vacuum, checkpoint")
    catalog = _catalog()

    def work() -> tuple[int, dict[str, Any]]:
        report = maintenance.maintain(
            catalog, project_id, dataset_id, actor=user, optimize=body.optimize, zorder=body.zorder,
            vacuum=body.vacuum, retain_hours=body.retain_hours, force=body.force, checkpoint=body.checkpoint,
            force_hint=FORCE_HINT,
        )  # fmt: skip
        return 200, _public(report)

    return _act(request, user, "maintenance", body.model_dump(), work, can_async=True)


class CleanupBody(_Body):
    ttl_hours: float | None = Field(default=None, ge=0, le=maintenance.MAX_TTL_HOURS)
    dry_run: bool = False


@router.post("/cleanup", tags=["maintenance"])
def cleanup(body: CleanupBody, user: Caller) -> Response:
    """Remove expired sessions, staging tables of closed requests and orphan imports."""
    report = maintenance.cleanup(_catalog(), actor=user, ttl_hours=body.ttl_hours, dry_run=body.dry_run)
    return _document(_public(report))

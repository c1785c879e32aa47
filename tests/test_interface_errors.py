"""The one error table: each core error family's exit code, HTTP status, type and message, for every front end."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import errors as core_errors
from core.errors import (
    CatalogUnavailable,
    ConflictError,
    EngineError,
    InvalidFile,
    InvalidInput,
    NotFound,
    OreoError,
    StaleRevision,
    ValidationFailed,
)
from interface import errors
from interface.errors import ERRORS, Message


def _families() -> set[type[OreoError]]:
    return {cls for cls in vars(core_errors).values() if isinstance(cls, type) and OreoError in cls.__bases__}


def test_every_family_has_a_row_and_none_is_shadowed() -> None:
    assert {rule.error for rule in ERRORS} == _families() | {OreoError}
    for position, rule in enumerate(ERRORS):
        earlier = [r.error for r in ERRORS[:position]]
        assert not any(issubclass(rule.error, cls) for cls in earlier), rule  # an earlier row would take it
    assert ERRORS[-1].error is OreoError


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (NotFound("unknown dataset demo/x"), 404, "not_found"),
        (InvalidFile("not a CSV", path="x.csv"), 400, "invalid_input"),
        (StaleRevision("moved on", cr_id="cr_1", state="open", revision=2, reviewed=1), 409, "conflict"),
        (CatalogUnavailable("the catalog is down"), 503, "engine_unavailable"),
    ],
)
def test_a_subclass_is_shown_as_its_family(exc: OreoError, status: int, kind: str) -> None:
    rule = errors.rule_for(exc)
    assert (rule.exit_code, rule.status, rule.type) == (1, status, kind)


def test_an_engine_failure_shows_its_first_line_and_is_logged_whole(tmp_path: Path) -> None:
    exc = EngineError("Spark failed: the task died\n\tat org.apache.spark.Whatever(...)")
    log = tmp_path / "oreo.log"

    line = errors.on_one_line(exc, log)
    assert (line.text, line.logged) == (f"Spark failed: the task died (details in {log})", True)
    page = errors.on_a_page(exc)
    assert (page.text, page.logged) == ("Spark failed: the task died", True)
    status, body, logged = errors.oreo_error_document(exc)
    assert (status, logged) == (503, True)
    assert body == {"error": {"status": 503, "type": "engine_unavailable", "message": "Spark failed: the task died"}}


def test_a_whole_message_is_shown_whole_where_there_is_room_for_it(tmp_path: Path) -> None:
    one = ConflictError("the request moved on; reload it")
    several = ValidationFailed("2 rows break a rule:\nrow 1\nrow 2", offending=("a", "b"))

    assert errors.rule_for(one).message is Message.WHOLE
    assert (errors.on_one_line(one, tmp_path).text, errors.on_one_line(one).logged) == (str(one), False)
    assert errors.on_a_page(several) == errors.Shown(errors.rule_for(several), str(several), logged=False)
    # The CLI's error line and the API's message are one line.
    assert errors.on_one_line(several, tmp_path / "oreo.log").text.startswith("2 rows break a rule: (details in ")
    _status, body, logged = errors.oreo_error_document(several)
    assert body["error"] == {
        "status": 422, "type": "validation_failed", "message": "2 rows break a rule:", "offending": ["a", "b"],
    }  # fmt: skip
    assert not logged
    _status, body, _logged = errors.oreo_error_document(InvalidInput("bad id", field="cr_id"))
    assert body["error"]["field"] == "cr_id"

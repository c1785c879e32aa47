"""My requests and Review pages: withdraw, the approvers' queue, diff, data checks, conflicts, four-eyes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import live_views
from core import change_requests, datasets, imports, merge
from core.catalog import Catalog
from core.change_requests import CRState
from tests.diff_support import diff_rows, html_bodies
from tests.page_support import (
    REQUESTS_PAGE,
    REVIEW_PAGE,
    button_keys,
    copy_workspace,
    has_text,
    record_timers,
    seed_requests,
    signed_in,
    texts,
    user,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TITLES = {
    "warn": "Platinum for 1000",
    "fail": "Refund 1002",
    "mine": "Pro for 1003",
    "own": "Enterprise for 1003",
}


@pytest.fixture(scope="module")
def seeded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("pages-review")
    return folder, seed_requests(folder)


@pytest.fixture
def ids(seeded: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return seeded[1]


@pytest.fixture
def workspace(seeded: tuple[Path, dict[str, str]], data_root: Path) -> Catalog:
    return copy_workspace(seeded[0], data_root)


def _state(catalog: Catalog, cr_id: str) -> CRState:
    return change_requests.get_change_request(catalog, cr_id, actor=user(catalog, "abe")).state


def _review(username: str, cr_id: str | None = None) -> AppTest:
    at = signed_in(username, REVIEW_PAGE)
    if cr_id is not None:
        at.selectbox(key="review_cr").select(cr_id).run(timeout=120)
    assert not at.exception
    return at


def _queue(at: AppTest) -> list[str]:
    return list(at.dataframe[0].value["id"])


def _markdown(at: AppTest) -> str:
    return "\n".join(texts(at.markdown))


# ---------------------------------------------------------------- My requests


def test_my_requests_lists_only_the_users_own(workspace: Catalog, ids: dict[str, str]) -> None:
    at = signed_in("eve", REQUESTS_PAGE)

    assert texts(at.title) == ["My requests"]
    table = at.dataframe[0].value
    assert list(table["id"]) == [ids["mine"], ids["fail"]]  # newest first
    assert set(table["state"]) == {"open"}
    assert list(table["title"]) == [TITLES["mine"], TITLES["fail"]]
    assert list(table["checks"]) == ["passed", "failed"]
    assert list(table["kind"]) == ["edit", "edit"]
    assert {f"withdraw_{ids['mine']}", f"withdraw_{ids['fail']}"} <= set(button_keys(at))
    assert not [k for k in button_keys(at) if k.startswith("withdraw_") and k[9:] not in (ids["mine"], ids["fail"])]


def test_withdraw_asks_first_then_closes_the_request(workspace: Catalog, ids: dict[str, str]) -> None:
    at = signed_in("erin", REQUESTS_PAGE)

    at.button(key=f"withdraw_{ids['warn']}").click().run(timeout=120)
    assert "withdraw_confirm" in button_keys(at)
    at.button(key="withdraw_cancel").click().run(timeout=120)
    assert "withdraw_confirm" not in button_keys(at)
    assert _state(workspace, ids["warn"]) == CRState.OPEN

    at.button(key=f"withdraw_{ids['warn']}").click().run(timeout=120)
    at.button(key="withdraw_confirm").click().run(timeout=120)

    assert not at.error, texts(at.error)
    assert _state(workspace, ids["warn"]) == CRState.WITHDRAWN
    assert f"Withdrew change request `{ids['warn']}`." in texts(at.info)
    assert list(at.dataframe[0].value["state"]) == ["withdrawn"]
    assert f"withdraw_{ids['warn']}" not in button_keys(at)
    # Withdrawn requests leave the approvers' queue.
    assert ids["warn"] not in _queue(_review("abe"))


def test_my_requests_without_any(workspace: Catalog) -> None:
    at = signed_in("abe", REQUESTS_PAGE)

    assert texts(at.info) == ["You have not submitted any change requests yet. Edit a table and submit your changes."]
    assert not at.dataframe


# ---------------------------------------------------------------- Review


@pytest.mark.parametrize(("username", "listed"), [("erin", False), ("eve", False), ("ann", True), ("abe", True)])
def test_review_page_is_listed_for_approvers_only(workspace: Catalog, username: str, listed: bool) -> None:
    at = signed_in(username)
    if listed:
        at.switch_page(REVIEW_PAGE).run(timeout=120)
        assert texts(at.title) == ["Review"]
    else:
        with pytest.raises(ValueError, match="Known pages"):
            at.switch_page(REVIEW_PAGE)
    # Everyone signed in has My requests.
    at.switch_page(REQUESTS_PAGE).run(timeout=120)
    assert texts(at.title) == ["My requests"]


def test_queue_holds_every_open_request_of_the_approvers_projects(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("abe")

    queue = at.dataframe[0].value
    order = ["own", "mine", "fail", "warn"]
    assert list(queue["id"]) == [ids[n] for n in order]
    assert list(queue["author"]) == ["ann", "eve", "eve", "erin"]
    assert list(queue["checks"]) == ["passed", "passed", "failed", "warning"]
    assert at.selectbox(key="review_cr").value == ids["own"]
    assert at.selectbox(key="review_cr").options[0] == f"{TITLES['own']} · ann · {ids['own']}"


def _findings(at: AppTest) -> pd.DataFrame:
    """The data-check findings table of the shown request."""
    return next(d.value for d in at.dataframe if "check" in d.value.columns)


def test_review_shows_the_diff_and_a_warning_finding(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("abe", ids["warn"])

    assert TITLES["warn"] in texts(at.subheader)
    rows = [r for body in html_bodies(at) for r in diff_rows(body)]
    assert [(r["row_id"], r["kind"], r["cells"]["plan"]) for r in rows] == [("1000", "update", ("free", "platinum"))]
    assert {m.label: m.value for m in at.metric} == {"Rows updated": "1", "Rows inserted": "0", "Rows deleted": "0"}
    text = _markdown(at)
    assert ":orange-badge[:material/warning: warning]" in text
    # Every check evaluated is listed, failures first, with the values that failed.
    checks = _findings(at)
    failed = checks[checks["result"] == "failed"]
    assert set(failed["severity"]) == {"warning"} and set(failed["failing rows"]) == {1}
    assert set(failed["failing values (sample)"]) == {'"platinum"'}
    assert set(failed["check"]) == {'plan is one of "free", "pro", "enterprise", "starter"'}
    assert list(checks["result"]) == sorted(checks["result"])  # "failed" sorts before "passed"
    # The request changes only plan: the rules about row_id judge main's values and are not run.
    assert "row_id is never empty" not in set(checks["check"])
    assert re.search(r"\d+ expectation\(s\) evaluated · 1 failed · \d+ about columns the request does not change", text)
    assert "No conflicts with commits after version 0." in texts(at.markdown)
    # A warning does not block approval.
    assert not at.button(key="review_approve").disabled
    assert not at.button(key="review_reject").disabled


def test_authors_get_no_approve_action(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("ann", ids["own"])

    assert TITLES["own"] in texts(at.subheader)
    assert "review_approve" not in button_keys(at)
    assert "review_reject" not in button_keys(at)
    assert has_text(at.caption, "authors cannot approve their own request")
    # The same approver may approve someone else's request.
    at.selectbox(key="review_cr").select(ids["warn"]).run(timeout=120)
    assert "review_approve" in button_keys(at)
    assert not has_text(at.caption, "authors cannot approve their own request")


def test_a_critical_failure_blocks_approval(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("abe", ids["fail"])

    assert at.button(key="review_approve").disabled
    assert not at.button(key="review_reject").disabled
    assert has_text(at.caption, "Approval is blocked: a critical data check fails")
    text = _markdown(at)
    assert ":red-badge[:material/error: failed]" in text
    checks = _findings(at)
    critical = checks[(checks["result"] == "failed") & (checks["severity"] == "critical")]
    assert list(critical["check"]) == ["amount is at least 0"]


def test_approve_merges_after_confirmation(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("abe", ids["warn"])

    at.button(key="review_approve").click().run(timeout=120)
    at.text_area(key="approve_comment").input("Looks right.")
    at.button(key="approve_confirm").click().run(timeout=600)

    assert not at.exception
    assert not at.error, texts(at.error)
    merged = change_requests.get_change_request(workspace, ids["warn"], actor=user(workspace, "abe"))
    assert (merged.state, merged.closed_by, merged.close_reason) == (CRState.MERGED, "abe", "Looks right.")
    assert has_text(at.success, f"Merged `{ids['warn']}` ({TITLES['warn']}) into `shop/orders` as version 1.")
    rows = datasets.dataset_rows(workspace, "shop", "orders", actor=user(workspace, "abe"), limit=1).rows
    assert rows.iloc[0]["plan"] == "platinum"
    assert ids["warn"] not in _queue(at)
    assert "approve_confirm" not in button_keys(at)


def test_the_live_strip_pauses_its_timer_while_a_decision_dialog_is_open(
    workspace: Catalog, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A timed fragment rerun as a dialog ends with a rerun can make the browser drop the next run's
    # elements (the "Merged" message, in about one approval in ten under load): no timer under a dialog.
    every = live_views.refresh_every()
    assert every is not None
    timers = record_timers(monkeypatch)
    at = _review("abe", ids["warn"])
    assert ("_review_strip", every) in timers

    for opens, closes in (("review_approve", "approve_cancel"), ("review_reject", "reject_cancel")):
        timers.clear()
        at.button(key=opens).click().run(timeout=120)
        assert closes in button_keys(at)
        assert [t for t in timers if t[0] == "_review_strip"] == [("_review_strip", None)], timers
        timers.clear()
        at.button(key=closes).click().run(timeout=120)
        assert closes not in button_keys(at)
        assert ("_review_strip", every) in timers, timers  # resumed once it closed
    assert not at.exception


def test_reject_needs_a_reason(workspace: Catalog, ids: dict[str, str]) -> None:
    at = _review("abe", ids["fail"])

    at.button(key="review_reject").click().run(timeout=120)
    at.button(key="reject_confirm").click().run(timeout=120)
    assert has_text(at.error, "a reason is required to reject a change request"), texts(at.error)
    assert _state(workspace, ids["fail"]) == CRState.OPEN

    at.text_area(key="reject_reason").input("Refunds go through billing.")
    at.button(key="reject_confirm").click().run(timeout=120)

    assert _state(workspace, ids["fail"]) == CRState.REJECTED
    assert f"Rejected `{ids['fail']}` ({TITLES['fail']})." in texts(at.info)
    assert ids["fail"] not in _queue(at)
    # The author sees why.
    mine = signed_in("eve", REQUESTS_PAGE).dataframe[0].value
    assert mine.set_index("id").loc[ids["fail"], "note"] == "Refunds go through billing."


def test_conflicts_block_approval(workspace: Catalog, ids: dict[str, str]) -> None:
    merge.approve_change_request(workspace, ids["own"], actor=user(workspace, "abe"))

    at = _review("abe", ids["mine"])

    assert at.button(key="review_approve").disabled
    assert has_text(at.caption, "Approval is blocked: it conflicts with newer commits in 1 place(s)")
    assert has_text(at.warning, "1 change(s) collide with commits made after version 0.")
    conflicts = next(d for d in at.dataframe if "reason" in d.value.columns).value
    assert conflicts.to_dict("records") == [
        {"row_id": "1003", "column": "plan", "version": 1, "reason": "also changed"}
    ]


def test_each_conflict_shows_base_theirs_mine_and_only_its_author_settles_it(
    workspace: Catalog, ids: dict[str, str]
) -> None:
    merge.approve_change_request(workspace, ids["mine"], actor=user(workspace, "abe"))
    values = "base **starter** → theirs **pro** (version 1 by abe) · mine **enterprise**"

    at = _review("abe", ids["own"])
    assert values in _markdown(at)
    assert has_text(at.warning, "`ann`, the author, decides each")
    assert not [k for k in button_keys(at) if k.startswith(("review_keep_mine_", "review_take_theirs_"))]

    at = _review("ann", ids["own"])
    assert values in _markdown(at)
    assert {"review_keep_mine_0", "review_take_theirs_0"} <= set(button_keys(at))
    at.button(key="review_keep_mine_0").click().run(timeout=600)
    assert not at.exception and not at.error, texts(at.error)
    assert has_text(at.success, "Kept your change on `1003` · `plan`: revision 2 is open.")
    assert "No conflicts with commits after version 1." in _markdown(at)
    assert merge.find_conflicts(workspace, ids["own"], actor=user(workspace, "abe")) == []


def test_a_stale_request_is_resubmitted_on_the_current_version(workspace: Catalog, ids: dict[str, str]) -> None:
    merge.approve_change_request(workspace, ids["own"], actor=user(workspace, "abe"))
    at = signed_in("eve", REQUESTS_PAGE)
    assert f"resubmit_{ids['fail']}" in button_keys(at)
    assert has_text(at.caption, "Based on version 0; the table is now at version 1.")

    at.button(key=f"resubmit_{ids['mine']}").click().run(timeout=600)

    assert not at.exception and not at.error, texts(at.error)
    old = change_requests.get_change_request(workspace, ids["mine"], actor=user(workspace, "abe"))
    assert old.state == CRState.WITHDRAWN and old.close_reason and old.close_reason.startswith("re-submitted as ")
    fresh_id = old.close_reason.removeprefix("re-submitted as ")
    assert has_text(at.info, f"Re-submitted `{ids['mine']}` as `{fresh_id}` on version 1.")
    fresh = change_requests.get_change_request(workspace, fresh_id, actor=user(workspace, "abe"))
    assert (fresh.state, fresh.base_version) == (CRState.OPEN, 1)
    assert merge.find_conflicts(workspace, fresh_id, actor=user(workspace, "abe")) == []
    assert f"resubmit_{fresh_id}" not in button_keys(at)


def _findings_script() -> None:
    from app.change_views import findings
    from core.validation import Check, ValidationRun

    findings(
        ValidationRun(
            run_id="vr_test",
            status="failed",
            evaluated=3,
            checks=[
                Check("expect_column_values_to_not_be_null", "critical", "plan", False, "plan is never empty", 2,
                      [None, None]),
                Check("expect_column_values_to_be_between", "warning", "amount", False, "amount is 0 or more", 1,
                      [-5.0]),
                Check("expect_column_values_to_be_unique", "critical", "row_id", True, "row_id is unique", None),
            ],
        )
    )  # fmt: skip


def test_data_checks_show_counts_and_values_as_the_grid_does() -> None:
    """Failing rows are whole numbers (not 1.000000), a passed check has 0 (not None), an empty value is ∅."""
    import pyarrow as pa

    at = AppTest.from_function(_findings_script).run(timeout=60)
    assert not at.exception, at.exception
    [table] = at.dataframe
    shown = pa.ipc.open_stream(table.proto.arrow_data.styler.display_values).read_all().to_pandas()
    rows = {row["check"]: row for _, row in shown.iterrows()}
    assert rows["plan is never empty"]["failing rows"] == "2"
    assert rows["plan is never empty"]["failing values (sample)"] == "∅, ∅"
    assert rows["amount is 0 or more"]["failing rows"] == "1"
    assert rows["amount is 0 or more"]["failing values (sample)"] == "-5"
    assert rows["row_id is unique"]["failing rows"] == "0"


def test_a_withdrawn_request_shows_its_state_and_what_it_held(workspace: Catalog, ids: dict[str, str]) -> None:
    at = signed_in("erin", REQUESTS_PAGE)
    at.button(key=f"withdraw_{ids['warn']}").click().run(timeout=120)
    at.button(key="withdraw_confirm").click().run(timeout=120)
    assert _state(workspace, ids["warn"]) == CRState.WITHDRAWN

    # The picker's label carries no state that could be left saying "open"; the line below it says where it stands.
    assert at.selectbox(key="requests_cr").value == ids["warn"]
    assert not any("open" in label for label in at.selectbox(key="requests_cr").options)
    line = _markdown(at)
    assert f":gray-badge[withdrawn] **{TITLES['warn']}** · revision 1 · withdrawn by you on " in line
    # Its staged rows are gone: the page says what it held instead of an empty diff ("0 rows").
    assert has_text(at.info, "It changed **1** row(s), **1** cell(s) of `shop/orders`.")
    assert not [m for m in at.metric if m.label == "Rows updated"]


# ---------------------------------------------------------------- an import is rejected, not sent back


def test_the_review_page_offers_reject_not_request_changes_for_an_import(workspace: Catalog, tmp_path: Path) -> None:
    more = tmp_path / "more.csv"
    more.write_text("order_id,plan,amount\n9001,pro,1.50\n")
    cr, _ = imports.import_file(workspace, "shop", "orders", more, actor=user(workspace, "erin"))
    at = signed_in("abe", REVIEW_PAGE)
    at.selectbox(key="review_cr").select(cr.id).run(timeout=120)
    assert not at.exception, at.exception
    asked = at.button(key="review_request_changes")
    assert asked.disabled and "Reject it with a reason" in (asked.help or "")
    assert has_text(at.caption, "An import can't be sent back for changes")
    assert not at.button(key="review_reject").disabled

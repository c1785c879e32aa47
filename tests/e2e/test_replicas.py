"""Two app replicas on one cluster: an editor on replica A, an approver and an admin on replica B.

Both Streamlit servers share the loopback cluster of ``scripts/cluster.sh`` (the Spark
Connect server and the PostgreSQL catalog) and one data root, as replicas behind a load
balancer do. An edit submitted on A is approved on B and both show the merged value; a
sign-in made on A is valid on B; an approval and a restore on B wait for the writer lease
held by a writer in another process (as a merge or a restore on another replica holds it)
and give up, committing nothing, then land once it is free; A shows the restored value.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

from tests import cluster_support
from tests.e2e.test_edit_review import (
    SLOW_MS,
    alert,
    cell,
    choose,
    confirm_approval,
    editor,
    open_table,
    sign_in,
    submit_request,
    type_into_cell,
    wait_idle,
    wait_quiet,
)
from tests.e2e.test_history_admin import choose_version, open_history, show
from tests.in_process import oreo_json
from tests.test_cluster import cluster  # noqa: F401  # the session's loopback cluster (a fixture)

if TYPE_CHECKING:
    from tests.e2e.conftest import OreoServer

Settle = Callable[..., None]

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
ROWS = 1200
SHOT = {"width": 1400, "height": 1000}
NEW_NAME = "Replicated"
# A writer in another process holding the table's writer lease, as a merge or a restore does.
HOLD_LEASE = """
import sys
from core.catalog import open_catalog
from core.writer import writing
with writing(open_catalog(), "demo", "customers", what="merge of cr_elsewhere"):
    print("held", flush=True)
    sys.stdin.readline()
"""


@dataclass(frozen=True)
class Replicas:
    a: OreoServer
    b: OreoServer
    env: dict[str, str]  # what both replicas share: SPARK_REMOTE, OREO_DATABASE_URL, DELTA_DATA_ROOT
    passwords: dict[str, str]


@pytest.fixture(scope="module")
def replicas(
    cluster: dict[str, str],  # noqa: F811
    start_oreo: Callable[..., OreoServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Replicas:
    """The demo seeded once on the replicas' catalog and data root, then two servers on it.

    The seeding runs in this process on its own Spark (as the browser tests' demo does): what
    is under test is two replicas on one cluster, not how the demo was written, and an
    ``oreo demo`` child on the cluster took about a minute.
    """
    root = tmp_path_factory.mktemp("replicas")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OREO_", "STREAMLIT_"))}
    env.update(
        SPARK_REMOTE=cluster["SPARK_REMOTE"],
        OREO_DATABASE_URL=cluster_support.own_database(cluster["OREO_DATABASE_URL"], "test_replicas"),
        DELTA_DATA_ROOT=str(root / "delta"),
    )
    doc = oreo_json(root / "delta", "demo", database_url=env["OREO_DATABASE_URL"], env={"OREO_DEMO_ROWS": str(ROWS)})
    assert doc["created"] is True and doc["rows"] == ROWS, doc
    passwords = {a["username"]: a["password"] for a in doc["accounts"]}
    shared = {k: env[k] for k in ("SPARK_REMOTE", "OREO_DATABASE_URL", "DELTA_DATA_ROOT")}
    # A busy table is given up on after 3 s, so the fenced restore below reports at once.
    settings = {**shared, "OREO_WRITER_WAIT_S": "3"}
    a = start_oreo("replica-a", env=settings)
    b = start_oreo("replica-b", env=settings)
    return Replicas(a=a, b=b, env={**env, **shared}, passwords=passwords)


def hold_lease(env: dict[str, str]) -> Callable[[], None]:
    """Take the table's writer lease in another process; returns what releases it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LEASE],
        cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "held"

    def release() -> None:
        if holder.poll() is None:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.close()
            assert holder.wait(timeout=60) == 0

    return release


def versions(env: dict[str, str]) -> list[int]:
    """The table's versions, read in this process from the replicas' catalog and data root."""
    doc = oreo_json(Path(env["DELTA_DATA_ROOT"]), "history", "demo", "customers", database_url=env["OREO_DATABASE_URL"])
    return sorted(int(v["version"]) for v in doc["versions"])


def table_caption(page: Page) -> object:
    return page.get_by_test_id("stCaptionContainer").filter(has_text="Rows ")


def reopen_table(page: Page, settle: Settle, version: int) -> None:
    """Open the Table page again, sorted by the key (a MERGE moves the rows it rewrites)."""
    page.get_by_role("link", name="Table").click()
    settle(page, table_caption(page), f"version {version}")
    choose(page, "table_sort_col", "customer_id")
    wait_idle(page)


def approve(page: Page) -> None:
    """Approve the request on show, with a comment, through the dialog."""
    wait_quiet(page)
    page.get_by_role("button", name="Approve", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    wait_quiet(page)
    dialog.get_by_role("textbox", name="Comment (optional)").press_sequentially("Approved on replica B.")
    confirm_approval(page)


def shoot(page: Page, shots: Path, name: str) -> None:
    size = page.viewport_size
    page.set_viewport_size(SHOT)
    wait_idle(page)
    page.screenshot(path=str(shots / f"{name}.png"))
    if size:
        page.set_viewport_size(size)


def test_an_edit_on_one_replica_is_approved_on_the_other_and_a_restore_is_fenced(
    replicas: Replicas,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    # ---- replica A: the editor edits and submits
    page_a = new_page(replicas.a.url)
    sign_in(page_a, "editor", replicas.passwords["editor"], settle)
    open_table(page_a, settle, ROWS)
    choose(page_a, "table_sort_col", "customer_id")
    wait_idle(page_a)
    customer = cell(editor(page_a), 0, "customer_id").inner_text()
    old_name = cell(editor(page_a), 0, "first_name").inner_text()
    assert old_name != NEW_NAME
    type_into_cell(page_a, 0, "first_name", NEW_NAME)
    cr_id = submit_request(page_a, "Rename on replica A")

    # The sign-in made on A is valid on B: the browser presents the same session cookie.
    page_a.goto(replicas.b.url)
    settle(page_a, page_a.get_by_role("heading", name="Datasets", exact=True))
    expect(page_a.get_by_text("Signed in as")).to_contain_text("editor")
    page_a.goto(replicas.a.url)
    settle(page_a, page_a.get_by_role("heading", name="Datasets", exact=True))

    # ---- replica B: the approver sees A's request and merges it
    page_b = new_page(replicas.b.url)
    sign_in(page_b, "approver", replicas.passwords["approver"], settle)
    page_b.get_by_role("link", name="Review").click()
    settle(page_b, page_b.get_by_role("heading", name="Rename on replica A"))
    changed = page_b.locator(".st-key-review_changes td.oreo-changed")
    expect(changed).to_have_count(1)
    expect(changed.locator("ins")).to_have_text(NEW_NAME)
    shoot(page_b, shots, "replica-b-review")

    # Another writer holds the table (as a merge or restore on a third replica would): nothing lands.
    release = hold_lease(replicas.env)
    try:
        approve(page_b)
        busy = page_b.get_by_text(re.compile(r"demo/customers is busy: merge of cr_elsewhere .* is writing to it"))
        expect(busy.first).to_be_visible(timeout=SLOW_MS)
        wait_idle(page_b)
        shoot(page_b, shots, "replica-b-approve-fenced")
        assert versions(replicas.env) == [0]
    finally:
        release()
    # Once it is free, the same approval, tried again from the dialog that says so, merges.
    wait_quiet(page_b)
    page_b.get_by_role("dialog").get_by_role("button", name="Approve and merge").click()
    expect(alert(page_b, f"Merged {cr_id}")).to_contain_text("as version 1", timeout=SLOW_MS)
    wait_idle(page_b)

    # Both replicas show the merged value at version 1.
    for page in (page_b, page_a):
        reopen_table(page, settle, 1)
        expect(cell(editor(page), 0, "customer_id")).to_have_text(customer)
        expect(cell(editor(page), 0, "first_name")).to_have_text(NEW_NAME)
    shoot(page_a, shots, "replica-a-merged")

    # ---- replica B: an admin restores version 0 while another process holds the writer lease
    admin = new_page(replicas.b.url)
    sign_in(admin, "admin", replicas.passwords["admin"], settle)
    open_history(admin, settle)
    show(admin, "Version")
    choose_version(admin, "history_version", 0)
    wait_quiet(admin)
    admin.get_by_role("button", name="Restore to v0").click()
    dialog = admin.get_by_role("dialog")
    expect(dialog).to_contain_text("0 row(s) inserted, 1 updated and 0 deleted", timeout=SLOW_MS)
    wait_quiet(admin)
    reason = dialog.get_by_role("textbox", name="Reason (required, kept in the audit log)")
    reason.press_sequentially("Undo the replicated rename.")
    reason.press("Tab")  # the field keeps its text once it loses focus (a rerun), before the click
    wait_quiet(admin)
    release = hold_lease(replicas.env)
    try:
        busy = admin.get_by_text(re.compile(r"demo/customers is busy: merge of cr_elsewhere .* is writing to it"))
        for attempt in range(2):
            # A click the dialog drops while it is redrawn is clicked again, as a person would
            # when nothing happens (seen once in a whole-suite run: the dialog stayed as it was).
            dialog.get_by_role("button", name="Restore", exact=True).click()
            try:
                expect(busy.first).to_be_visible(timeout=60_000 if attempt == 0 else SLOW_MS)
                break
            except AssertionError:
                if attempt:
                    raise
                wait_quiet(admin)
        wait_quiet(admin)
        shoot(admin, shots, "replica-b-restore-fenced")
        assert versions(replicas.env) == [0, 1]  # the fenced restore committed nothing
    finally:
        release()

    # The other writer is done; the same restore now lands, and replica A shows it.
    dialog.get_by_role("button", name="Restore", exact=True).click()
    expect(alert(admin, "Restored demo/customers to version 0 as version 2")).to_be_visible(timeout=SLOW_MS)
    wait_idle(admin)
    assert versions(replicas.env) == [0, 1, 2]
    reopen_table(page_a, settle, 2)
    expect(cell(editor(page_a), 0, "customer_id")).to_have_text(customer)
    expect(cell(editor(page_a), 0, "first_name")).to_have_text(old_name)
    shoot(page_a, shots, "replica-a-restored")


def test_presence_reaches_across_replicas(
    replicas: Replicas,
    new_page: Callable[[str], Page],
    settle: Settle,
    shots: Path,
) -> None:
    """An editor on replica A and an approver on replica B see each other on one Table page (issue 29 §1).

    Presence lives in the shared catalog, so neither server's memory has to know the other.
    """
    page_a = new_page(replicas.a.url)
    sign_in(page_a, "editor", replicas.passwords["editor"], settle)
    open_table(page_a, settle, ROWS)
    page_b = new_page(replicas.b.url)
    sign_in(page_b, "approver", replicas.passwords["approver"], settle)
    open_table(page_b, settle, ROWS)
    here_a, here_b = page_a.locator(".st-key-table_presence"), page_b.locator(".st-key-table_presence")
    # Within a refresh or two (OREO_PRESENCE_REFRESH_S, 5 s): each page beats into the catalog and reads it back.
    expect(here_b).to_contain_text(re.compile(r"Also here: Editor \(editor, for \d+ (s|min)\)"), timeout=60_000)
    expect(here_a).to_contain_text(re.compile(r"Also here: Approver \(approver, for \d+ (s|min)\)"), timeout=60_000)
    shoot(page_b, shots, "replica-b-presence")

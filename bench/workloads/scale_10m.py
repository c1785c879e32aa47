"""The interactive steps on a 10,000,000-row table beside the same steps on the 1,000,000-row one.

Interactive cost must follow the page or the change, not the table. Timed in one run,
the two tables interleaved step by step (both built once under ``bench/.data`` through
``create_dataset``, one Spark CTAS each, and reused):

* page, stable order: ``core.datasets.dataset_rows``, 100 rows at offset rows/2 (5,000,000
  on the big table) in the dataset's key order, as the Table page reads it unsorted;
* page, sorted: the same page with the whole table sorted by ``monthly_spend`` descending;
* edit save: ``core.sessions.apply_edits`` of one cell at a random row (as ``edit_save``);
* submit: ``core.change_requests.submit_change_request`` of a 5-cell change (5 rows, one column);
* approve: ``core.merge.approve_change_request`` of that request (a different user).

Target: every 10M figure (median) within 1.5x its 1M figure.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from bench._data import (
    APPROVER,
    PROJECT,
    BenchTable,
    ensure_approver,
    ensure_big_customers,
    ensure_customers,
)
from bench._harness import BenchConfig, Check, Timing, WorkloadResult, expect, measure_interleaved, time_call

NAME = "scale_10m"
PAGE = 100
CR_CELLS = 5
MAX_RATIO = 1.5
FIRST_ID = 100_001
SMALL_ROWS = 1_000_000
SORT = "monthly_spend"
EDITOR = "bench_scale_editor"


@dataclass
class ScaleResult(WorkloadResult):
    """A workload result with one ratio target per step besides the harness's headline one."""

    extra_checks: list[Check] = field(default_factory=list)

    def checks(self) -> list[Check]:
        return [*super().checks(), *self.extra_checks]


def _label(table: BenchTable, step: str) -> str:
    return f"{table.rows // 1_000_000}M: {step}"


def _ensure_editor() -> None:
    """An editor of the bench project used by this workload alone.

    ``open_session`` returns the user's open session, so sharing ``READER`` with a
    workload running at the same time would submit that workload's edits too.
    """
    from core import auth
    from core.catalog import open_catalog
    from core.errors import NotFound

    catalog = open_catalog()
    try:
        auth.get_user(catalog, EDITOR)
    except NotFound:
        auth.create_user(catalog, EDITOR, display_name="Benchmark 10M editor")
    if auth.role_in(catalog, auth.get_user(catalog, EDITOR), PROJECT) is None:
        auth.add_member(catalog, PROJECT, EDITOR, auth.Role.EDITOR)


def _show(timings: dict[str, Timing]) -> None:
    """Each figure as soon as it is measured (a long run keeps what it has)."""
    for label, t in timings.items():
        print(f"[bench] {NAME}: {label}: median {t.median:.0f} ms, p95 {t.p95:.0f} ms", file=sys.stderr, flush=True)


def run(config: BenchConfig) -> WorkloadResult:
    """Time the page reads, edit saves, 5-cell submits and approvals on the 1M and the 10M table."""
    from core import auth, change_requests, datasets, engine, merge, sessions
    from core.catalog import open_catalog

    small = ensure_customers(SMALL_ROWS)
    big = ensure_big_customers()
    tables = (small, big)
    ensure_approver()
    _ensure_editor()
    catalog = open_catalog()
    editor, approver = auth.get_user(catalog, EDITOR), auth.get_user(catalog, APPROVER)
    notes: dict[str, object] = {}
    for t in tables:
        if t.created_in_s is not None:
            notes[f"{t.dataset_id} created in"] = f"{t.created_in_s:.0f} s (this run; later runs reuse it)"

    # ---------------------------------------------------------------- page reads
    def page_read(table: BenchTable, order_by: str | None) -> Callable[[], object]:
        offset = table.rows // 2

        def read() -> object:
            page = datasets.dataset_rows(
                catalog, PROJECT, table.dataset_id, actor=editor, order_by=order_by, descending=order_by is not None,
                limit=PAGE, offset=offset,
            )  # fmt: skip
            expect(len(page.rows) == PAGE and page.total == table.rows, f"core returned {len(page.rows)}/{page.total}")
            return page

        return read

    page_fns: dict[str, Callable[[], object]] = {}
    for t in tables:
        page_fns[_label(t, "page, stable order")] = page_read(t, None)
        page_fns[_label(t, f"page, sorted by {SORT} desc")] = page_read(t, SORT)
    # A version read twice is held in memory (``core.reads``); a big one by a background
    # load, during which pages are scanned. Pages are timed once both are held; the time
    # until then is shown beside them.
    from core import reads

    for t in tables:
        began = time.perf_counter()
        for _ in range(2):
            page_read(t, None)()
        while not any(key[0] == str(t.path) for key in reads._held) and time.perf_counter() - began < 600:
            time.sleep(0.1)
        held = any(key[0] == str(t.path) for key in reads._held)
        notes[f"{t.dataset_id}: held in memory"] = (
            f"after {time.perf_counter() - began:.1f} s" if held else "no (over OREO_READ_CACHE_MB): pages are scanned"
        )
    print(f"[bench] {NAME}: page reads", file=sys.stderr, flush=True)
    timings: dict[str, Timing] = dict(
        measure_interleaved(page_fns, warmup=config.warmup, repeats=max(5, config.repeats // 2))
    )
    _show(timings)

    # ---------------------------------------------------------------- edit saves
    rng = random.Random(7)
    counter = iter(range(10**9))
    save_sessions = {t.dataset_id: sessions.open_session(catalog, PROJECT, t.dataset_id, actor=editor) for t in tables}
    first_saves: dict[str, list[float]] = {}

    def edit_save(table: BenchTable) -> Callable[[], object]:
        session_id = save_sessions[table.dataset_id].session_id

        def save() -> object:
            row_id = str(FIRST_ID + rng.randrange(table.rows))
            n = sessions.apply_edits(
                catalog, session_id, [sessions.SetCell(row_id, "city", f"City {next(counter)}")], actor=editor
            )
            expect(n >= 1, "the edit was not saved")
            return n

        return save

    save_fns = {_label(t, "edit save (1 cell)"): edit_save(t) for t in tables}
    print(f"[bench] {NAME}: edit saves", file=sys.stderr, flush=True)
    try:
        for label, fn in save_fns.items():  # the first saves in a process scan main, then build a row locator
            first_saves[label] = []
            for _ in range(2):
                start = time.perf_counter()
                fn()
                first_saves[label].append((time.perf_counter() - start) * 1000.0)
        saves = measure_interleaved(save_fns, warmup=config.warmup, repeats=max(20, config.repeats))
        timings.update(saves)
        _show(saves)
    finally:
        for s in save_sessions.values():
            sessions.discard_session(catalog, s.session_id, actor=editor)
    notes["first two saves in the process"] = "; ".join(
        f"{label.split(':')[0]} {ms[0]:.0f} ms, {ms[1]:.0f} ms" for label, ms in first_saves.items()
    )

    # ---------------------------------------------------------------- 5-cell change requests
    run_tag = uuid.uuid4().hex[:6]  # the tables persist between runs: new values every run
    cr_samples: dict[str, list[tuple[float, float]]] = {}

    def one_request(table: BenchTable, round_no: int) -> None:
        picks = random.Random(f"{run_tag}-{round_no}-{table.rows}").sample(range(table.rows), CR_CELLS)
        ops: list[sessions.EditOp] = [
            sessions.SetCell(str(FIRST_ID + i), "city", f"City {run_tag}-{round_no}-{n}") for n, i in enumerate(picks)
        ]
        session = sessions.open_session(catalog, PROJECT, table.dataset_id, actor=editor)
        sessions.apply_edits(catalog, session.session_id, ops, actor=editor)
        submitted: list[change_requests.ChangeRequest] = []

        def submit() -> None:
            cr = change_requests.submit_change_request(catalog, session.session_id, actor=editor, title="bench 5 cells")
            expect(cr.cells == CR_CELLS, f"staged {cr.cells} cells")
            submitted.append(cr)

        def approve() -> None:
            merged = merge.approve_change_request(catalog, submitted[0].id, actor=approver)
            expect(merged.merged_version is not None, "not merged")

        for step, fn in (("submit 5 cells", submit), ("approve 5 cells", approve)):
            sample = time_call(fn)
            print(f"[bench] {NAME}: {_label(table, step)}: {sample[0]:.0f} ms", file=sys.stderr, flush=True)
            if round_no:  # round 0 warms both tables up
                cr_samples.setdefault(_label(table, step), []).append(sample)

    rounds = max(1, config.spark_repeats)
    engine.get_spark()  # the JVM's start is no part of a request
    for round_no in range(rounds + 1):
        order = tables if round_no % 2 == 0 else tables[::-1]
        for t in order:
            print(f"[bench] {NAME}: change request round {round_no}, {t.dataset_id}", file=sys.stderr, flush=True)
            one_request(t, round_no)
    for label, samples in sorted(cr_samples.items(), key=lambda kv: (kv[0].split(": ")[1], kv[0])):
        timings[label] = Timing(
            label=label, samples_ms=tuple(w for w, _ in samples), cpu_ms=tuple(c for _, c in samples), warmup=1
        )

    # ---------------------------------------------------------------- one ratio per step
    steps = ["page, stable order", f"page, sorted by {SORT} desc", "edit save (1 cell)", "submit 5 cells",
             "approve 5 cells"]  # fmt: skip
    checks: list[Check] = []
    for step in steps:
        ten, one = timings[_label(big, step)], timings[_label(small, step)]
        ratio = ten.median / one.median if one.median > 0 else float("inf")
        checks.append(
            Check(
                f"{step}: 10M vs 1M",
                ratio <= MAX_RATIO,
                f"{ten.median:.0f} ms vs {one.median:.0f} ms = {ratio:.2f}x (target <={MAX_RATIO:g}x)",
            )
        )
    ordered = [timings[_label(t, s)] for s in steps for t in tables]
    notes["tables"] = f"{small.dataset_id} and {big.dataset_id} (key customer_id), read as {EDITOR!r} (editor)"
    notes["pages"] = f"{PAGE} rows at offset rows/2: {small.rows // 2:,} and {big.rows // 2:,}"
    notes["change requests"] = (
        f"{rounds} timed rounds (+1 warm-up), {CR_CELLS} cells of 'city' at random rows, approved by {APPROVER!r}; "
        f"main versions after: {engine.latest_version(small.path)} and {engine.latest_version(big.path)}"
    )
    headline_step = "page, stable order"
    return ScaleResult(
        name=NAME,
        description=f"page read, edit save, 5-cell submit and approve: {big.rows:,} rows vs {small.rows:,} rows",
        core=timings[_label(big, headline_step)],
        baselines=[timings[_label(small, headline_step)]],
        ratio_baseline=_label(small, headline_step),
        max_ratio=MAX_RATIO,
        breakdown=ordered,
        notes=notes,
        extra_checks=checks,
    )

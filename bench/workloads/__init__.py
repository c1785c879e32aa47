"""The workloads, by name; each module exposes ``run(config) -> WorkloadResult``."""

from __future__ import annotations

from collections.abc import Callable

from bench._harness import BenchConfig, WorkloadResult
from bench.workloads import (
    approve,
    csv_append,
    diff_page,
    edit_save,
    history_list,
    migrate_postgres,
    page_filter,
    page_read,
    restore,
    version_diff,
)

Workload = Callable[[BenchConfig], WorkloadResult]

WORKLOADS: dict[str, Workload] = {
    page_read.NAME: page_read.run,
    page_filter.NAME: page_filter.run,
    edit_save.NAME: edit_save.run,
    approve.NAME: approve.run,
    diff_page.NAME: diff_page.run,
    history_list.NAME: history_list.run,
    version_diff.NAME: version_diff.run,
    restore.NAME: restore.run,
    csv_append.NAME: csv_append.run,
    migrate_postgres.NAME: migrate_postgres.run,
}

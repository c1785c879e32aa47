"""The workloads, by name; each module exposes ``run(config) -> WorkloadResult``."""

from __future__ import annotations

from collections.abc import Callable

from bench._harness import BenchConfig, WorkloadResult
from bench.workloads import (
    api_page_read,
    app_approve,
    app_start,
    approve,
    bulk_set,
    concurrent_readers,
    csv_append,
    diff_page,
    edit_save,
    facet_cluster,
    history_list,
    live_presence,
    merge_layout,
    migrate_postgres,
    page_filter,
    page_read,
    restore,
    scale_10m,
    small_approve,
    small_submit,
    streamlit_sessions,
    version_diff,
)

Workload = Callable[[BenchConfig], WorkloadResult]

WORKLOADS: dict[str, Workload] = {
    page_read.NAME: page_read.run,
    page_filter.NAME: page_filter.run,
    edit_save.NAME: edit_save.run,
    approve.NAME: approve.run,
    small_submit.NAME: small_submit.run,
    small_approve.NAME: small_approve.run,
    diff_page.NAME: diff_page.run,
    history_list.NAME: history_list.run,
    version_diff.NAME: version_diff.run,
    restore.NAME: restore.run,
    csv_append.NAME: csv_append.run,
    migrate_postgres.NAME: migrate_postgres.run,
    merge_layout.NAME: merge_layout.run,
    app_start.NAME: app_start.run,
    scale_10m.NAME: scale_10m.run,
    concurrent_readers.NAME: concurrent_readers.run,
    streamlit_sessions.NAME: streamlit_sessions.run,
    live_presence.NAME: live_presence.run,
    api_page_read.NAME: api_page_read.run,
    app_approve.NAME: app_approve.run,
    bulk_set.STAGE: bulk_set.run_stage,
    bulk_set.APPROVE: bulk_set.run_approve,
    facet_cluster.FACET: facet_cluster.run_facet,
    facet_cluster.CLUSTER: facet_cluster.run_cluster,
}

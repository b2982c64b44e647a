"""Metrics of the leader's housekeeping: DAG directory syncs and retention. Followers export zeros.

Names are part of the operator contract (dashboards, alerts); do not rename.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

PURGED_ROWS = Counter("leoflow_retention_purged_rows_total",
                      "Rows deleted by retention (LEOFLOW_RETENTION_DAYS), by `table`", ["table"])
DAG_DIRECTORY_SYNCS = Counter(
    "leoflow_dag_directory_syncs_total",
    "Syncs of LEOFLOW_DAGS_DIR by the leader, by `outcome` (`applied`, `unchanged`, `invalid`, `failed`)",
    ["outcome"])
DAG_DIRECTORY_PROBLEMS = Gauge(
    "leoflow_dag_directory_problems",
    "Problems found in LEOFLOW_DAGS_DIR at the leader's last sync attempt (0: the DAGs are in step with the files)")

for _table in ("dag_runs", "task_instances", "task_tries", "task_logs", "dag_versions", "dags"):
    PURGED_ROWS.labels(table=_table)
for _outcome in ("applied", "unchanged", "invalid", "failed"):
    DAG_DIRECTORY_SYNCS.labels(outcome=_outcome)

"""Metrics of the log archive (leoflow.executor.log_archive): bytes, objects, failures, deletions.

Names are part of the operator contract (dashboards, alerts); do not rename.
"""

from __future__ import annotations

from prometheus_client import Counter

ARCHIVED_BYTES = Counter("leoflow_log_archive_bytes_total",
                         "Bytes of task output archived to object storage (before compression)")
ARCHIVED_OBJECTS = Counter("leoflow_log_archive_objects_total", "Log chunks written to object storage")
ARCHIVE_FAILURES = Counter(
    "leoflow_log_archive_failures_total",
    "Failed object storage requests while archiving logs (retried with backoff), by `reason` "
    "(`refused`: credentials, permissions or a missing bucket; `unavailable`: timeouts and errors that may pass)",
    ["reason"])
ARCHIVES_ABANDONED = Counter(
    "leoflow_log_archive_abandoned_total",
    "Logs whose archive was given up incomplete (storage failing for longer than the give-up window)")
ARCHIVED_OBJECTS_DELETED = Counter("leoflow_log_archive_objects_deleted_total",
                                   "Archived log objects deleted by retention")

for _reason in ("refused", "unavailable"):
    ARCHIVE_FAILURES.labels(reason=_reason)

"""Executor metrics (prometheus_client default registry).

Names are part of the operator contract (dashboards, alerts); do not rename.
"""

from __future__ import annotations

from prometheus_client import Counter

PODS_CREATED = Counter("leoflow_pods_created_total", "Task pods this replica created (HTTP 201)")
POD_CREATE_CONFLICTS = Counter("leoflow_pod_create_conflicts_total",
                               "Pod creates answered 409 AlreadyExists whose pod was adopted as the same try")
POD_API_ERRORS = Counter("leoflow_pod_api_errors_total",
                         "Failed Kubernetes API calls for task pods, by HTTP status (0: no response)", ["code"])
PODS_DELETED = Counter("leoflow_pods_deleted_total",
                       "Task pods this replica deleted (cancel, timeout, reconcile, garbage collection)")
POD_EVENTS_DROPPED = Counter("leoflow_pod_events_dropped_total",
                             "Kubernetes events of task pods not kept: more were waiting to be written than the "
                             "executor holds (the database slow or away)")
TASK_LOGS_UNAVAILABLE = Counter("leoflow_task_logs_unavailable_total",
                                "Finished tries whose output could not be collected and was marked unavailable "
                                "(pod log unreadable within LEOFLOW_LOG_SHIP_ATTEMPTS, or files on another host)")

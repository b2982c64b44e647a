"""Probes, metrics and the API description: ``/healthz``, ``/readyz``, ``/metrics``, OpenAPI.

- ``/healthz`` (liveness) answers from the event loop alone. It never touches the database or
  leadership: a database outage must make replicas *unready*, not get them restarted.
- ``/readyz`` (readiness) is 200 when the database answers within a few seconds and its
  schema is at the head migration; otherwise 503 with the reason. Followers are ready: every
  replica serves the API.
- ``/metrics`` renders the default Prometheus registry after refreshing the work gauges (at
  most every few seconds, with a short deadline; stale values on failure).
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import REGISTRY, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.endpoint import api_state
from leoflow.api.errors import ApiError, error_response
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import openapi_document
from leoflow.db import api_queries, dag_metrics_store
from leoflow.db.migrations import head_revision
from leoflow.errors import DatabaseError
from leoflow.metrics.dags import DAG_METRICS, RunStatsRow
from leoflow.metrics.http import STATE_GAUGE_TTL, set_work_gauges

logger = logging.getLogger(__name__)

#: Readiness must answer well inside a kubelet probe timeout (default 1 s is too tight for a
#: loaded database; charts set timeoutSeconds >= 5), so the check gives up after 4 s.
READY_CHECK_TIMEOUT = 4.0
#: A scrape should never wait long on the database; stale gauges are better than no scrape.
GAUGE_QUERY_TIMEOUT = 2.0
#: ``generate_latest`` renders the classic text format 0.0.4 (what promtool and every
#: Prometheus version parse).
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def healthz(request: Request) -> Response:
    """Liveness: the process and its event loop respond."""
    return JsonResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Readiness: the database answers and the schema is at head."""
    state = api_state(request)
    head = head_revision()
    try:
        async with asyncio.timeout(READY_CHECK_TIMEOUT), state.db.connect() as conn:
            revision = await api_queries.schema_revision(conn)
    except (DatabaseError, TimeoutError) as exc:
        reason = "database did not answer in time" if isinstance(exc, TimeoutError) else str(exc)
        return error_response(ApiError(503, reason, code="not_ready", details={"database": "unavailable"},
                                       headers={"Retry-After": "5"}))
    if revision != head:
        reason = f"database schema is at {revision or 'base'}, head is {head}; run `leoflow db upgrade`"
        return error_response(ApiError(503, reason, code="not_ready",
                                       details={"database": "ok", "schema": revision, "head": head},
                                       headers={"Retry-After": "5"}))
    return JsonResponse({"status": "ready", "schema": revision})


class WorkGauges:
    """Refreshes the work gauges and the per-DAG metrics (leoflow.metrics.dags) at most once per TTL."""

    def __init__(self) -> None:
        self._refreshed = float("-inf")
        self._lock = asyncio.Lock()

    async def refresh(self, request: Request) -> None:
        if time.monotonic() - self._refreshed < STATE_GAUGE_TTL:
            return
        async with self._lock:
            if time.monotonic() - self._refreshed < STATE_GAUGE_TTL:
                return
            self._refreshed = time.monotonic()
            limits = api_state(request).settings.notify
            try:
                async with asyncio.timeout(GAUGE_QUERY_TIMEOUT), api_state(request).db.connect() as conn:
                    task_counts = await api_queries.count_task_instances_by_state(conn)
                    run_counts = await api_queries.count_runs_by_state(conn)
                    run_stats = await dag_metrics_store.folded_run_stats(conn, limits.metrics_max_dags)
                    failures = await dag_metrics_store.folded_task_failures(conn, limits.metrics_max_dags,
                                                                            limits.metrics_max_tasks)
            except (DatabaseError, TimeoutError) as exc:  # stale gauges beat a failed scrape
                logger.warning("work gauges not refreshed", extra={"error": str(exc)[:200] or type(exc).__name__})
                return
            set_work_gauges(task_counts, run_counts)
            DAG_METRICS.update([RunStatsRow(r.dag_id, r.state, r.duration_sum, r.bins, r.last_ended_at)
                                for r in run_stats], failures)


async def metrics(request: Request) -> Response:
    """Prometheus text exposition of this process's metrics."""
    gauges: WorkGauges = request.app.state.work_gauges
    await gauges.refresh(request)
    return Response(generate_latest(REGISTRY), media_type=METRICS_CONTENT_TYPE)


async def openapi(request: Request) -> Response:
    """The OpenAPI 3.1 description of this API."""
    return JsonResponse(openapi_document())

"""Probes, metrics and the API description: ``/healthz``, ``/readyz``, ``/metrics``, OpenAPI.

- ``/healthz`` (liveness) answers from the event loop alone. It never touches the database or
  leadership: a database outage must make replicas *unready*, not get them restarted.
- ``/readyz`` (readiness) is 200 when the database answers within a few seconds, its schema is
  at this build's head or at a revision that declared this build compatible (ADR 0006), and the
  replica's elector refuses nothing (a hot standby, a transaction-mode pooler, a database of
  another cluster, pools that cannot connect); otherwise 503 with the reason. The probe needs no
  token, so when the database cannot be reached it says only ``database unavailable``: the
  driver's words name the host, the user and the database, and they go to the log instead.
  Followers are ready: every replica serves the API.
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
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.db import migrations
from leoflow.db.stores import dag_metrics
from leoflow.db.stores import pools as pool_store
from leoflow.db.stores.runs import reads as run_reads
from leoflow.db.stores.task_instances import reads as ti_reads
from leoflow.election.health import GATE_REFUSAL
from leoflow.errors import DatabaseError
from leoflow.metrics.dags import DAG_METRICS, RunStatsRow
from leoflow.metrics.http import STATE_GAUGE_TTL, set_work_gauges
from leoflow.metrics.pools import set_pool_gauges

logger = logging.getLogger(__name__)

#: Readiness must answer well inside a kubelet probe timeout (default 1 s is too tight for a
#: loaded database; charts set timeoutSeconds >= 5), so the check gives up after 4 s.
READY_CHECK_TIMEOUT = 4.0
#: A scrape should never wait long on the database; stale gauges are better than no scrape.
GAUGE_QUERY_TIMEOUT = 2.0
#: What an unauthenticated probe learns of a database it cannot reach (the log has the rest).
DATABASE_UNAVAILABLE = "database unavailable"
#: ``generate_latest`` renders the classic text format 0.0.4 (what promtool and every
#: Prometheus version parse).
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


OPERATIONS = Operations()


@OPERATIONS("GET", "/healthz", "Liveness", oas.json_answer("200", "Health"), auth="open")
async def healthz(request: Request) -> Response:
    """Liveness: the process and its event loop respond."""
    return JsonResponse({"status": "ok"})


@OPERATIONS("GET", "/readyz", "Readiness", oas.json_answer("200", "Ready"), auth="open", errors="503")
async def readyz(request: Request) -> Response:
    """Readiness: the database answers, the schema suits this build, and the elector refuses nothing."""
    state = api_state(request)
    try:
        async with asyncio.timeout(READY_CHECK_TIMEOUT), state.db.connect() as conn:
            schema = await migrations.schema_state(conn)
    except (DatabaseError, TimeoutError) as exc:
        reason = str(exc) if isinstance(exc, DatabaseError) else _no_answer(state.db.failures.last)
        logger.warning("not ready: %s", reason)
        return _not_ready(DATABASE_UNAVAILABLE, {"database": "unavailable"})
    problem = migrations.readiness_problem(schema)
    if problem is not None:
        return _not_ready(problem, {"database": "ok", "schema": schema.revision, "head": migrations.head_revision()})
    refused = state.election_health.problem if state.election_health is not None else None
    if refused is not None:
        if refused.startswith(GATE_REFUSAL):  # then the driver's words follow; the elector logged them
            refused = f"{GATE_REFUSAL}: {DATABASE_UNAVAILABLE}"
        return _not_ready(refused, {"database": "ok", "schema": schema.revision, "election": "refused"})
    return JsonResponse({"status": "ready", "schema": schema.revision,
                         "pooler": state.db.failures.behind_pooler})


def _no_answer(last_failure: str | None) -> str:
    if last_failure is not None:
        return f"cannot connect to the database: {last_failure}"
    return "database did not answer in time"


def _not_ready(reason: str, details: dict[str, object]) -> Response:
    return error_response(ApiError(503, reason, code="not_ready", details=details, headers={"Retry-After": "5"}))


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
            settings = api_state(request).settings
            limits = settings.notify
            try:
                async with asyncio.timeout(GAUGE_QUERY_TIMEOUT), api_state(request).db.connect() as conn:
                    task_counts = await ti_reads.count_task_instances_by_state(conn)
                    run_counts = await run_reads.count_runs_by_state(conn)
                    run_stats = await dag_metrics.folded_run_stats(conn, limits.metrics_max_dags)
                    failures = await dag_metrics.folded_task_failures(conn, limits.metrics_max_dags,
                                                                            limits.metrics_max_tasks)
                    pools = await pool_store.list_pools(conn, parallelism=settings.scheduler.parallelism)
            except (DatabaseError, TimeoutError) as exc:  # stale gauges beat a failed scrape
                logger.warning("work gauges not refreshed", extra={"error": str(exc)[:200] or type(exc).__name__})
                return
            set_work_gauges(task_counts, run_counts)
            set_pool_gauges(pools)
            DAG_METRICS.update([RunStatsRow(r.dag_id, r.state, r.duration_sum, r.bins, r.last_ended_at)
                                for r in run_stats], failures)


@OPERATIONS("GET", "/metrics", "Prometheus metrics", {"200": {"description": "Text exposition", **oas.TEXT}},
            auth="metrics", errors="401")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition of this process's metrics."""
    gauges: WorkGauges = request.app.state.work_gauges
    await gauges.refresh(request)
    return Response(generate_latest(REGISTRY), media_type=METRICS_CONTENT_TYPE)


@OPERATIONS("GET", "/api/v2/openapi.json", "OpenAPI document", {"200": {
    "description": "This document", "content": {oas.JSON: {"schema": {"type": "object"}}}}}, auth="open")
async def openapi(request: Request) -> Response:
    """The OpenAPI 3.1 description of this API."""
    return JsonResponse(request.app.state.openapi_document)

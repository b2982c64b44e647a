"""Prometheus metrics of the HTTP API (default registry).

Requests are labelled by route *template* (``/api/v2/dags/{dag_id}``), never by the concrete
path, so cardinality is bounded by the route table; requests that match no route share the
label ``<unmatched>``. The work gauges (``leoflow_task_instances``, ``leoflow_dag_runs``) are
refreshed from the database when ``/metrics`` is scraped, at most once per
:data:`STATE_GAUGE_TTL` seconds per replica; when the database is down the last values stay
(a scrape must never fail because the database did).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, Info

from leoflow import __version__

#: Seconds the work gauges are cached: scrapes every 15 s cost at most one query pair.
STATE_GAUGE_TTL = 5.0

UNMATCHED_ROUTE = "<unmatched>"

HTTP_REQUESTS = Counter(
    "leoflow_http_requests_total", "HTTP requests served, by method, route template and status.",
    ("method", "route", "status"))
HTTP_DURATION = Histogram(
    "leoflow_http_request_duration_seconds", "Time to serve an HTTP request, by method and route template.",
    ("method", "route"),
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
TASK_INSTANCES = Gauge(
    "leoflow_task_instances", "Unfinished task instances by state (refreshed on scrape).", ("state",))
DAG_RUNS = Gauge("leoflow_dag_runs", "Unfinished DAG runs by state (refreshed on scrape).", ("state",))
BUILD_INFO = Info("leoflow_build", "Leoflow build information.")
BUILD_INFO.info({"version": __version__})


#: Labelled children by label values: ``labels()`` costs a lock and a tuple build per call,
#: a few percent of the API's CPU at full load. Bounded like the labels themselves.
_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    key = (method, route, status)
    children = _children.get(key)
    if children is None:
        children = _children[key] = (HTTP_REQUESTS.labels(method, route, str(status)),
                                     HTTP_DURATION.labels(method, route))
    children[0].inc()
    children[1].observe(seconds)


def set_work_gauges(task_instances: dict[str, int], dag_runs: dict[str, int]) -> None:
    for state, count in task_instances.items():
        TASK_INSTANCES.labels(state).set(count)
    for state, count in dag_runs.items():
        DAG_RUNS.labels(state).set(count)

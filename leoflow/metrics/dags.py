"""Per-DAG metrics, exported by every replica from the database (refreshed on scrape).

- ``leoflow_dag_run_duration_seconds{dag_id, state}`` — histogram of finished runs' durations
  (end minus start; minus creation for a run cancelled before it started), by final state;
- ``leoflow_dag_last_success_timestamp_seconds{dag_id}`` — when the DAG's latest successful run
  ended (absent until it has one), so "DAG X has not succeeded in 26 h" is
  ``time() - max by (dag_id) (leoflow_dag_last_success_timestamp_seconds) > 26 * 3600``;
- ``leoflow_task_failures_total{dag_id, task_id}`` — failed tries (retried ones included).

The numbers come from tables the leader's outcome observer maintains (one increment per run
ending or failed try, :mod:`leoflow.notify.observer`), so every replica exports the *same*
values: aggregate across replicas with ``max``, not ``sum``. They survive leader changes and
restarts (counters only go down if the tables are reset). Cardinality is bounded as
:mod:`leoflow.model.dag_metrics` describes (``_other``).

The collector only holds the last snapshot; the API refreshes it when ``/metrics`` is scraped
(:class:`leoflow.api.routes.system.WorkGauges`), and stale values stay if the database is down.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from leoflow.model.dag_metrics import DURATION_BUCKETS, cumulative

RUN_DURATION = "leoflow_dag_run_duration_seconds"
LAST_SUCCESS = "leoflow_dag_last_success_timestamp_seconds"
TASK_FAILURES = "leoflow_task_failures"

_RUN_DURATION_HELP = "Duration of finished DAG runs, by DAG and final state (from the database)."
_LAST_SUCCESS_HELP = "End time (Unix seconds) of the DAG's latest successful run (from the database)."
_TASK_FAILURES_HELP = "Failed task tries, by DAG and task (from the database)."


@dataclass(frozen=True)
class RunStatsRow:
    dag_id: str
    state: str
    duration_sum: float
    bins: Sequence[int]
    last_ended_at: datetime | None


class DagMetrics:
    """A Prometheus collector serving the last snapshot of the per-DAG tables."""

    def __init__(self) -> None:
        self._runs: list[RunStatsRow] = []
        self._failures: list[tuple[str, str, int]] = []

    def update(self, runs: list[RunStatsRow], failures: list[tuple[str, str, int]]) -> None:
        self._runs, self._failures = runs, failures

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(RUN_DURATION, _RUN_DURATION_HELP, labels=("dag_id", "state"))
        yield GaugeMetricFamily(LAST_SUCCESS, _LAST_SUCCESS_HELP, labels=("dag_id",))
        yield CounterMetricFamily(TASK_FAILURES, _TASK_FAILURES_HELP, labels=("dag_id", "task_id"))

    def collect(self) -> Iterator[Metric]:
        runs, failures = self._runs, self._failures
        duration = HistogramMetricFamily(RUN_DURATION, _RUN_DURATION_HELP, labels=("dag_id", "state"))
        last = GaugeMetricFamily(LAST_SUCCESS, _LAST_SUCCESS_HELP, labels=("dag_id",))
        for row in runs:
            counts = cumulative(list(row.bins))
            buckets = [(f"{bound:g}", float(count)) for bound, count in zip(DURATION_BUCKETS, counts, strict=False)]
            buckets.append(("+Inf", float(counts[-1] if counts else 0)))
            duration.add_metric([row.dag_id, row.state], buckets, sum_value=row.duration_sum)
            if row.state == "success" and row.last_ended_at is not None:
                last.add_metric([row.dag_id], row.last_ended_at.timestamp())
        failed = CounterMetricFamily(TASK_FAILURES, _TASK_FAILURES_HELP, labels=("dag_id", "task_id"))
        for dag_id, task_id, count in failures:
            failed.add_metric([dag_id, task_id], float(count))
        yield duration
        yield last
        yield failed


DAG_METRICS = DagMetrics()
REGISTRY.register(DAG_METRICS)

"""Dataset metrics: events recorded and runs they triggered (prometheus_client default registry).

Counted after the transaction that wrote them commits (the leader's step, the API's request), so
a rolled-back step counts nothing. Names are part of the operator contract; do not rename.

Per DAG, the leader also counts ``leoflow_dag_dataset_events_total{dag_id}`` (events the DAG's
producing tasks recorded) and ``leoflow_dag_dataset_triggered_runs_total{dag_id}`` (its
dataset-triggered runs). They are the leader's own counters (they restart at zero on a new leader,
as counters may: use ``rate``/``increase``, summed over replicas). Cardinality: the first
``LEOFLOW_METRICS_MAX_DAGS`` DAGs the leader counts get their own series, the rest share
``dag_id="_other"`` (first come, since a counter cannot move a DAG's past counts elsewhere), so
each family has at most that many plus one series.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter

from leoflow.model.dag_metrics import OTHER

EVENTS = Counter("leoflow_dataset_events_total",
                 "Dataset events recorded, by source: a producing task's success (task) or an outside report (api)",
                 ["source"])
TRIGGERED_RUNS = Counter("leoflow_dataset_triggered_runs_total", "Runs the leader started from queued dataset events")

for _source in ("task", "api"):
    EVENTS.labels(source=_source)

DAG_EVENTS = Counter("leoflow_dag_dataset_events", "Dataset events a DAG's producing tasks recorded, by DAG "
                     "(the leader's count)", ["dag_id"])
DAG_TRIGGERED_RUNS = Counter("leoflow_dag_dataset_triggered_runs", "Dataset-triggered runs the leader started, "
                             "by DAG (the leader's count)", ["dag_id"])

#: The DAG ids with their own series (the rest are ``_other``).
_labelled: set[str] = set()


def _label(dag_id: str, max_dags: int) -> str:
    if dag_id in _labelled:
        return dag_id
    if len(_labelled) < max_dags:
        _labelled.add(dag_id)
        return dag_id
    return OTHER


def count_dags(events: Mapping[str, int], runs: Mapping[str, int], *, max_dags: int) -> None:
    """Count a committed step's events (by producing DAG) and dataset-triggered runs (by DAG)."""
    for dag_id, n in events.items():
        DAG_EVENTS.labels(dag_id=_label(dag_id, max_dags)).inc(n)
    for dag_id, n in runs.items():
        DAG_TRIGGERED_RUNS.labels(dag_id=_label(dag_id, max_dags)).inc(n)

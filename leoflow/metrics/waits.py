"""Task wait metrics: how many tasks wait (``wait_for``, ``depends_on_past``) and for how long, per DAG.

Set by the leader from one grouped read every :data:`~leoflow.scheduler.waits.GAUGE_INTERVAL`
seconds (not per step: 10,000 waiting tasks would make it the step's biggest read). A DAG whose
tasks stop waiting drops out of the gauges at the next refresh. Names are part of the operator
contract; do not rename.
"""

from __future__ import annotations

from prometheus_client import Gauge

PENDING = Gauge("leoflow_waits_pending", "Task instances waiting for their wait_for / depends_on_past conditions, "
                "by DAG (set by the leader)", ["dag_id"])
OLDEST = Gauge("leoflow_waits_oldest_seconds", "Seconds the longest-waiting task instance of the DAG has waited "
               "(set by the leader)", ["dag_id"])


#: The DAG ids the gauges have series for (prometheus_client keeps its own set private).
_shown: set[str] = set()


def publish(pending: dict[str, tuple[int, float]]) -> None:
    """Replace both gauges' series with ``pending`` (DAG id → (tasks waiting, oldest wait in seconds))."""
    for dag_id in _shown - pending.keys():
        PENDING.remove(dag_id)
        OLDEST.remove(dag_id)
    _shown.clear()
    _shown.update(pending)
    for dag_id, (count, oldest) in pending.items():
        PENDING.labels(dag_id=dag_id).set(count)
        OLDEST.labels(dag_id=dag_id).set(oldest)

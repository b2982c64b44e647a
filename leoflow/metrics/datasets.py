"""Dataset metrics: events recorded and runs they triggered (prometheus_client default registry).

Counted after the transaction that wrote them commits (the leader's step, the API's request), so
a rolled-back step counts nothing. Names are part of the operator contract; do not rename.
"""

from __future__ import annotations

from prometheus_client import Counter

EVENTS = Counter("leoflow_dataset_events_total",
                 "Dataset events recorded, by source: a producing task's success (task) or an outside report (api)",
                 ["source"])
TRIGGERED_RUNS = Counter("leoflow_dataset_triggered_runs_total", "Runs the leader started from queued dataset events")

for _source in ("task", "api"):
    EVENTS.labels(source=_source)

"""Election metrics (prometheus_client default registry). Followers export zeros.

Names are part of the operator contract (dashboards, alerts); do not rename.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LEADER = Gauge("leoflow_leader", "1 while this replica holds the election lock and acts as leader, else 0")
LEADER_TERM = Gauge("leoflow_leader_term", "Fencing term this replica leads under (0 when following)")
TRANSITIONS = Counter("leoflow_leadership_transitions_total",
                      "Leadership changes of this replica", ["event"])
KEEPALIVE_SECONDS = Histogram("leoflow_lock_keepalive_seconds",
                              "Duration of the leader's lock ownership check",
                              buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
KEEPALIVE_FAILURES = Counter("leoflow_lock_keepalive_failures_total",
                             "Keepalives that failed, timed out, or found the lock missing")

for _event in ("acquired", "lost", "released"):
    TRANSITIONS.labels(event=_event)
LEADER.set(0)
LEADER_TERM.set(0)


def set_leading(term: int | None) -> None:
    LEADER.set(1 if term is not None else 0)
    LEADER_TERM.set(term or 0)

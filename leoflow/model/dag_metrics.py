"""Per-DAG metrics as data: the run-duration histogram's bounds and how cardinality is bounded.

``leoflow_dag_run_duration_seconds``, ``leoflow_dag_last_success_timestamp_seconds`` and
``leoflow_task_failures_total`` carry a ``dag_id`` (and ``task_id``) label. Prometheus keeps one
series per label set, so an install with thousands of DAGs or tasks must not turn into
thousands of series per replica: the first ``LEOFLOW_METRICS_MAX_DAGS`` DAGs (by id, so the
choice is stable while DAGs come and go) and the first ``LEOFLOW_METRICS_MAX_TASKS`` (DAG, task)
pairs get their own series; the rest are folded into :data:`OTHER` (summed; the most recent
success for the timestamp). ``_other`` can never collide with a real id, which has no ``_``.
"""

from __future__ import annotations

#: Upper bounds (seconds) of the run-duration histogram: one second to one day covers a quick
#: chain and a nightly batch alike.
DURATION_BUCKETS: tuple[float, ...] = (
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0)

#: The label value that stands for every DAG / task beyond the limits.
OTHER = "_other"

#: Final run states the histogram is labelled with.
RUN_END_STATES = ("success", "failed", "cancelled")


def bin_index(seconds: float) -> int:
    """Index of the bin a duration falls in: bins[i] holds (bounds[i-1], bounds[i]]."""
    for i, bound in enumerate(DURATION_BUCKETS):
        if seconds <= bound:
            return i
    return len(DURATION_BUCKETS)


def cumulative(bins: list[int]) -> list[int]:
    """Prometheus' cumulative bucket counts (``le`` semantics) from per-bin counts."""
    total = 0
    out: list[int] = []
    for count in bins:
        total += count
        out.append(total)
    return out

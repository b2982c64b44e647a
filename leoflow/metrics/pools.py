"""Prometheus gauges of the pools (default registry), refreshed from the database on scrape.

What ``GET /api/v2/pools`` says of each pool, for dashboards and alerts: its slots, the slots
its queued and running tries hold, what is left, and the ready tasks waiting for a slot (a pool
whose ``leoflow_pool_waiting_tasks`` stays above 0 while ``leoflow_pool_open_slots`` is 0 is
starving: Airflow's ``pool.starving_tasks``). A pool that tasks name but that does not exist is
exported too, with 0 slots, so its waiting tasks are visible.

Refreshed with the work gauges (:class:`leoflow.api.routes.system.WorkGauges`: at most once per
``STATE_GAUGE_TTL`` per replica; a database failure keeps the last values). Every replica
exports the same values, read from the database: aggregate across replicas with ``max``, not
``sum``. Cardinality is bounded by the number of pools (``MAX_POOLS``); a deleted pool's series
go away at the next refresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Gauge

POOL_SLOTS = Gauge("leoflow_pool_slots", "Slots of each pool (the default pool's is LEOFLOW_PARALLELISM; "
                   "a pool that tasks name but that does not exist: 0). Refreshed on scrape.", ("pool",))
POOL_OCCUPIED_SLOTS = Gauge(
    "leoflow_pool_occupied_slots", "Slots of each pool held by task instances, by `state` (`queued`, `running`). "
    "Refreshed on scrape.", ("pool", "state"))
POOL_OPEN_SLOTS = Gauge("leoflow_pool_open_slots", "Slots of each pool left free (never below 0: a pool shrunk "
                        "below its use drains as tries end). Refreshed on scrape.", ("pool",))
POOL_WAITING_TASKS = Gauge(
    "leoflow_pool_waiting_tasks", "Ready task instances waiting for a slot of each pool (exact up to 100,000). "
    "Refreshed on scrape.", ("pool",))

_GAUGES = (POOL_SLOTS, POOL_OCCUPIED_SLOTS, POOL_OPEN_SLOTS, POOL_WAITING_TASKS)


def set_pool_gauges(pools: Iterable[Mapping[str, Any]]) -> None:
    """Replace every pool series with these pool documents' (``leoflow.db.stores.pools.pool_document``).

    Cleared first, in the same synchronous call, so a deleted pool disappears and no scrape can
    see a half-written set.
    """
    for gauge in _GAUGES:
        gauge.clear()
    for pool in pools:
        name = str(pool["name"])
        POOL_SLOTS.labels(name).set(pool["slots"])
        POOL_OCCUPIED_SLOTS.labels(name, "queued").set(pool["queued_slots"])
        POOL_OCCUPIED_SLOTS.labels(name, "running").set(pool["running_slots"])
        POOL_OPEN_SLOTS.labels(name).set(pool["open_slots"])
        POOL_WAITING_TASKS.labels(name).set(pool["waiting_tasks"])

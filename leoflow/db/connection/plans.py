"""Statements whose plan must not follow the statistics: index access paths only, for one statement.

Some of the leader's hot statements judge runs one by one at a minute boundary (which queued runs
may start). Each has one sensible plan — index probes bounded by a
``LIMIT`` or a primary key — but PostgreSQL picks plans from statistics, and statistics taken while
``dag_runs`` was nearly empty (a fresh install before autovacuum analyzes again: exactly its first
busy boundary) make a sequential scan per probe look cheapest. On 300 queued runs that was ~47,000
rows of work for the start read instead of ~14 per run returned.

:func:`plan_with_indexes_only` turns the other access paths off with ``set_config(..., true)``
before the statement, and the statement puts the caller's values back itself, from
:data:`RESTORED` in its ``FROM`` (its plan is made before it runs, so it was planned with them
off; the step's later statements get the planner's own choice again): one round trip more, not
two. ``true`` lasts until the transaction ends at most, which needs a transaction: the
scheduler's steps always are one. An index path is never made worse by it: only the
alternatives are priced out.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

#: The planner settings turned off: the scans and joins a stale estimate prefers over index probes.
_SETTINGS = ("enable_seqscan", "enable_sort", "enable_hashjoin", "enable_mergejoin")

_TURN_OFF = text("SELECT " + ", ".join(
    f"current_setting('{name}') AS {name}, set_config('{name}', 'off', true) AS {name}_set" for name in _SETTINGS))

#: A one-row ``FROM`` item that restores the settings :func:`plan_with_indexes_only` saved (its
#: parameters): put it on the preserved side of a ``LEFT JOIN`` so it runs even when nothing else
#: returns a row (``OFFSET 0`` keeps the planner from folding it away).
RESTORED = ("(SELECT " + ", ".join(f"set_config('{name}', :{name}, true)" for name in _SETTINGS)
            + " OFFSET 0) AS restored")


async def plan_with_indexes_only(conn: AsyncConnection) -> dict[str, str]:
    """Turn the other access paths off for the next statement, which must restore them with
    :data:`RESTORED` and these parameters (the caller's values)."""
    saved = (await conn.execute(_TURN_OFF)).one()
    return {name: str(getattr(saved, name)) for name in _SETTINGS}

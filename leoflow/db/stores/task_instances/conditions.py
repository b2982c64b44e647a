"""What the ``when:`` conditions of a step's ready task instances read, in one statement.

A condition (:mod:`leoflow.model.spec.expressions`) reads its run's ``conf``, ``run_id`` and
logical date, and the *current* outputs of the upstream task instances it names: those of try
``try_number`` while the instance is ``success`` (a cleared instance has none, whatever its
earlier tries wrote). Only ready task instances whose task has a ``when`` come here, so tasks
without one pay nothing; a step asks once for all of its candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays


@dataclass(slots=True)
class RunFacts:
    """One run as its conditions see it; ``outputs`` by task id (only the tasks asked for)."""

    run_id: str
    logical_date: datetime | None
    conf_json: str
    #: Bytes of the run's conf and of every output read (JSON text), for the activation limit.
    size: int = 0
    #: Current outputs of the upstream task instances asked for; a task that did not succeed
    #: (or is absent) is in ``states`` only.
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    #: The instances of each mapped upstream asked for, in index order: (state, outputs or None).
    #: An expanded-to-nothing task has an empty list. Its ``outputs`` entry is then every output
    #: name as the list of the instances' values (None where one did not succeed).
    instances: dict[str, list[tuple[str, dict[str, Any] | None]]] = field(default_factory=dict)
    #: The run's data interval (``run.data_interval_start/end``); None for a run stored before it had one.
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None


_READ = text("""
    SELECT r.id AS run_pk, r.run_id, r.logical_date, r.conf::text AS conf, NULL AS task_id, NULL AS state,
           NULL::jsonb AS outputs, octet_length(r.conf::text) AS size, -1 AS map_index, NULL::int AS map_count,
           r.data_interval_start, r.data_interval_end
    FROM dag_runs r WHERE r.id = ANY(CAST(:run_ids AS bigint[]))
    UNION ALL
    SELECT ti.run_pk, NULL, NULL, NULL, ti.task_id, ti.state, tt.outputs, coalesce(tt.outputs_bytes, 0),
           ti.map_index, ti.map_count, NULL::timestamptz, NULL::timestamptz
    FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[])) AS w(run_pk, task_id)
    JOIN task_instances ti ON ti.run_pk = w.run_pk AND ti.task_id = w.task_id
    LEFT JOIN task_tries tt ON ti.state = 'success' AND tt.task_instance_id = ti.id AND tt.try_number = ti.try_number
""")


async def condition_inputs(conn: AsyncConnection, runs: Iterable[int],
                           upstream: Sequence[tuple[int, str]]) -> dict[int, RunFacts]:
    """The facts of ``runs`` and the state and current outputs of each (run_pk, task_id) of ``upstream``."""
    run_ids = sorted(set(runs))
    if not run_ids:
        return {}
    wanted = sorted(set(upstream))
    rows = (await conn.execute(_READ, {
        "run_ids": arrays.ints(run_ids), "runs": arrays.ints(w[0] for w in wanted),
        "tasks": arrays.texts(w[1] for w in wanted)})).all()
    facts: dict[int, RunFacts] = {}
    for r in rows:
        if r.task_id is None:
            facts[int(r.run_pk)] = RunFacts(r.run_id, r.logical_date, r.conf or "{}", int(r.size or 0),
                                            data_interval_start=r.data_interval_start,
                                            data_interval_end=r.data_interval_end)
    for r in sorted(rows, key=lambda r: r.map_index):
        run = facts.get(int(r.run_pk))
        if r.task_id is None or run is None:
            continue
        outputs = r.outputs if isinstance(r.outputs, dict) else None
        if outputs is not None:
            run.size += int(r.size)
        if r.map_index >= 0 or r.map_count == 0:  # a mapped task: its instances, in index order
            instances = run.instances.setdefault(r.task_id, [])
            run.states[r.task_id] = "success"
            if r.map_index >= 0:
                instances.append((r.state, outputs))
            continue
        run.states[r.task_id] = r.state
        if outputs is not None:
            run.outputs[r.task_id] = outputs
    for run in facts.values():
        for task_id, instances in run.instances.items():
            names = sorted({name for _, out in instances if out for name in out})
            run.outputs[task_id] = {name: [out.get(name) if out and state == "success" else None
                                           for state, out in instances] for name in names}
    return facts

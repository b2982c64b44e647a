"""The scheduler's queueing statements: which ready tasks get the free slots (pools, priority, limits).

:func:`pick_ready` is the fairness decision of :mod:`leoflow.model.fairness` as one read:

1. free slots per pool: the ``default`` pool's ``LEOFLOW_PARALLELISM`` and every row of
   ``pools``, minus the task instances queued or running in it (``ix_task_instances_pool_slots``;
   rows without a pool, written by an older release, count against ``default``);
2. for each pool with free slots, its best ready tasks — pending with every upstream done, or up
   for retry and due — by ``priority DESC, id`` (``ix_task_instances_ready`` is exactly that
   order, so this reads as many index entries as the pool has free slots), skipping DAGs already
   at their ``max_active_tasks``;
3. a DAG below its limit takes at most what the limit leaves (its best tasks first).

The scheduler then checks each picked task's trigger rule (a writer that reset a task may have
left it ready although its rule now says ``skipped``) and :func:`queue_picked` moves the others
to ``queued`` (compare-and-set on state and try number, as every scheduler write) with their try
rows, returning what their launches need: two round trips per round, in the step's transaction.

Cost: proportional to the tasks queued or running (the slot counts) plus the tasks queued —
never to the waiting backlog, however large. A DAG at its limit with a large ready backlog of
higher priority than everything else is skipped row by row in the pool's index range (bounded
by that backlog); that is the one case where a round reads more than it queues.

Rows the previous release wrote have no pool (``NULL``, like ``kind: empty`` tasks, which take
no slot): :func:`unclassified_ready` finds them and :func:`classify` gives the containers their
pool and priority from the spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.models import SLOT_TASKS_SQL
from leoflow.db.scheduler_store import ReadyTask
from leoflow.model.fairness import DEFAULT_POOL

_READY_COLUMNS = """ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id, ti.upstream_successes,
                    ti.upstream_failures, ti.upstream_skips"""


async def unclassified_ready(conn: AsyncConnection, limit: int) -> list[ReadyTask]:
    """Ready task instances without a pool: ``kind: empty`` tasks and rows of an older release."""
    rows = await conn.execute(text(f"""
        SELECT * FROM (
            (SELECT {_READY_COLUMNS}
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.pool IS NULL AND ti.state = 'pending' AND ti.pending_upstreams = 0
             ORDER BY ti.priority DESC, ti.id LIMIT :limit)
            UNION ALL
            (SELECT {_READY_COLUMNS}
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.pool IS NULL AND ti.state = 'up_for_retry' AND ti.next_try_at <= now()
             ORDER BY ti.id LIMIT :limit)
        ) AS ready ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [ReadyTask(**r._mapping, classified=False) for r in rows]


async def classify(conn: AsyncConnection, tasks: Sequence[tuple[int, str, int]]) -> None:
    """Give pool-less task instances (id, pool, priority) their pool and priority from the spec."""
    if not tasks:
        return
    await conn.execute(text("""
        UPDATE task_instances ti SET pool = c.pool, priority = c.priority
        FROM unnest(CAST(:ids AS bigint[]), CAST(:pools AS text[]), CAST(:priorities AS int[]))
             AS c(id, pool, priority)
        WHERE ti.id = c.id AND ti.pool IS NULL
    """), {"ids": [t[0] for t in tasks], "pools": [t[1] for t in tasks], "priorities": [t[2] for t in tasks]})


@dataclass(slots=True)
class QueuedTask:
    """A try created by :func:`queue_picked`, with what its launch needs of its task and run."""

    task_instance_id: int
    task_try_id: int
    try_number: int
    run_pk: int
    task_id: str
    max_tries: int
    dag_id: str
    run_id: str
    version_id: int
    #: The run's ``conf`` as JSON text (decoded by the scheduler, per run) and logical date.
    conf_json: str
    logical_date: datetime | None


@dataclass(frozen=True)
class Picked:
    """The ready tasks that get the free slots of a round, best first."""

    tasks: list[ReadyTask]
    #: Ready tasks were left although their pool had a free slot (a DAG's ``max_active_tasks``
    #: held them back, or the round's ``limit`` was reached): another round may queue more.
    more: bool


_PICK = f"""
        SELECT {_READY_COLUMNS}, ti.priority, ti.pool
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.pool = free.name AND {{ready}}
          AND ti.id <> ALL(CAST(:excluded AS bigint[]))
          AND (CAST(:only AS bigint[]) IS NULL OR ti.id = ANY(CAST(:only AS bigint[])))
          AND NOT EXISTS (SELECT 1 FROM capped WHERE capped.dag_id = r.dag_id AND capped.n <= 0)
        ORDER BY ti.priority DESC, ti.id LIMIT free.n"""

_PICK_READY = f"""
    WITH pool AS (
        SELECT name, slots FROM pools UNION ALL SELECT :default_pool, :parallelism
    ), used AS (
        SELECT coalesce(pool, :default_pool) AS name, count(*) AS n
        FROM task_instances WHERE state IN {SLOT_TASKS_SQL} GROUP BY 1
    ), free AS (
        SELECT pool.name, least(greatest(pool.slots - coalesce(used.n, 0), 0), :limit) AS n
        FROM pool LEFT JOIN used ON used.name = pool.name
    ), limited AS (  -- DAGs with a max_active_tasks (usually none: then nothing below is counted)
        SELECT dag_id, max_active_tasks FROM dags WHERE max_active_tasks IS NOT NULL
    ), active AS (
        SELECT r.dag_id, count(*) AS n
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.state IN {SLOT_TASKS_SQL} AND EXISTS (SELECT 1 FROM limited) GROUP BY r.dag_id
    ), capped AS (
        SELECT limited.dag_id, limited.max_active_tasks - coalesce(active.n, 0) AS n
        FROM limited LEFT JOIN active ON active.dag_id = limited.dag_id
    ), picked AS (
        SELECT c.* FROM free CROSS JOIN LATERAL (
            ({_PICK.format(ready="ti.state = 'pending' AND ti.pending_upstreams = 0")})
            UNION ALL
            ({_PICK.format(ready="ti.state = 'up_for_retry' AND ti.next_try_at <= now()")})
        ) AS c
        WHERE free.n > 0
    ), ranked AS (
        SELECT p.*, row_number() OVER (PARTITION BY p.pool ORDER BY p.priority DESC, p.id) AS in_pool,
               row_number() OVER (PARTITION BY p.dag_id ORDER BY p.priority DESC, p.id) AS in_dag,
               capped.n AS dag_left, free.n AS pool_left
        FROM picked p JOIN free ON free.name = p.pool LEFT JOIN capped ON capped.dag_id = p.dag_id
    ), chosen AS (
        SELECT * FROM ranked WHERE in_pool <= pool_left AND (dag_left IS NULL OR in_dag <= dag_left)
    ), summary AS (
        SELECT coalesce(bool_or(in_pool <= pool_left AND NOT (dag_left IS NULL OR in_dag <= dag_left)), false)
               OR (SELECT count(*) FROM chosen) >= :limit AS more
        FROM ranked
    )
    SELECT summary.more, chosen.* FROM summary LEFT JOIN chosen ON true
    ORDER BY chosen.priority DESC, chosen.id
"""


_FIELDS = ("id", "run_pk", "task_id", "state", "try_number", "max_tries", "dag_id", "run_id", "version_id",
           "upstream_successes", "upstream_failures", "upstream_skips")
_READY_WIDTH = 1 + len(_FIELDS)


async def pick_ready(conn: AsyncConnection, *, parallelism: int, limit: int, excluded: Sequence[int] = (),
                     only: Sequence[int] | None = None) -> Picked:
    """The best ready tasks of every pool with free slots (see the module docstring); writes nothing.

    ``limit`` bounds the tasks picked (the step's row budget); ``excluded`` are task instances the
    scheduler quarantined this term; ``only`` restricts the round to these task instances (the
    scheduler's isolation of a failing step, which bisects over them). The caller checks each
    one's trigger rule and queues the others with :func:`queue_picked` in the same transaction.
    """
    rows = (await conn.execute(text(_PICK_READY), {
        "default_pool": DEFAULT_POOL, "parallelism": parallelism, "limit": limit,
        "excluded": list(excluded), "only": None if only is None else list(only)})).all()
    # Positional: the first columns after ``more`` are _READY_COLUMNS, in ReadyTask's field order.
    tasks = [ReadyTask(*r[1:_READY_WIDTH]) for r in rows if r.id is not None]
    return Picked(tasks=tasks, more=bool(rows[0].more) if rows else False)


async def queue_picked(conn: AsyncConnection, tasks: Sequence[ReadyTask], now: datetime,
                       term: int) -> list[QueuedTask]:
    """CAS pending/up_for_retry → queued, bump the try number and create the try row; one round trip
    that also returns what each launch needs of its run (``conf`` as text, ``logical_date``).

    Slots are not counted again: :func:`pick_ready` counted them in this transaction, and only
    the leader's fenced step queues.
    """
    if not tasks:
        return []
    rows = await conn.execute(text("""
        WITH c AS (
            SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[]), CAST(:tries AS int[]))
                AS c(id, state, try_number)
        ), q AS (
            UPDATE task_instances ti
            SET state = 'queued', try_number = ti.try_number + 1, queued_at = :now, started_at = NULL,
                ended_at = NULL, timeout_at = NULL, next_try_at = NULL, reason = NULL, updated_at = :now,
                term = :term
            FROM c
            WHERE ti.id = c.id AND ti.state = c.state AND ti.try_number = c.try_number
              AND (ti.state = 'up_for_retry' OR ti.pending_upstreams = 0)
            RETURNING ti.id, ti.try_number
        ), t AS (
            INSERT INTO task_tries (task_instance_id, try_number, state, term, queued_at)
            SELECT id, try_number, 'queued', :term, :now FROM q
            RETURNING id, task_instance_id, try_number
        )
        -- Not ``t JOIN q``: the planner cannot estimate a CTE's rows (it assumes one), so it joined
        -- the two by a nested loop, quadratic in the batch (500 ms for 1,568 tries). The statement's
        -- snapshot still shows each task instance's old row, and run_pk, task_id and max_tries are
        -- not what the update changes: one primary-key probe per try instead.
        SELECT t.task_instance_id, t.id AS task_try_id, t.try_number, ti.run_pk, ti.task_id, ti.max_tries, r.dag_id,
               r.run_id, r.dag_version_id AS version_id, r.conf::text AS conf, r.logical_date
        FROM t JOIN task_instances ti ON ti.id = t.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
    """), {"ids": arrays.ints(t.id for t in tasks), "states": arrays.texts(t.state for t in tasks),
           "tries": arrays.ints(t.try_number for t in tasks),
           "now": now, "term": term})
    # Positional, in QueuedTask's field order (the SELECT list above): a step builds hundreds.
    return [QueuedTask(*r) for r in rows]

"""The scheduler's queueing statements: which ready tasks get the free slots (pools, priority, limits).

:func:`pick_ready` is the fairness decision of :mod:`leoflow.model.spec.fairness` as one read:

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

**One write** (issue 21): when an upstream's success completes a task's counters and its pool
has room, :func:`count_and_queue` counts and queues it in the same update, with its try's id
(the row is its first writer's: ADR 0013) — instead of a counter update, a pick and a second
update of the same row. It takes a pool only when :func:`pick_ready` would queue every such task
at once anyway: the pool's free slots cover them all, no ready task (pending with every upstream
done, a due retry, a row still without a pool) waits in it, their DAGs have no
``max_active_tasks``, and there are at most ``limit`` of them. Otherwise it only counts, and the
tasks wait for the round as before; so fairness is unchanged, and a wide fan-out under a full
pool costs what it did.

Rows the previous release wrote have no pool (``NULL``, like ``kind: empty`` tasks, which take
no slot): :func:`unclassified_ready` finds them and :func:`classify` gives the containers their
pool and priority from the spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays, queued_tries
from leoflow.db.fragments import SLOT_TASKS_SQL
from leoflow.db.stores.task_instances.downstream import PENDING, TALLY, Counted, counted_rows
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.spec.fairness import DEFAULT_POOL

_READY_COLUMNS = """ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id, ti.upstream_successes,
                    ti.upstream_failures, ti.upstream_skips, ti.map_index, ti.map_count"""


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
    #: What the run's body decided (``dag_runs.body_state``/``body_reason``): set while its exit tasks run.
    body_state: str | None = None
    body_reason: str | None = None
    #: The instance of a mapped task (-1: unmapped): part of its try's key and its item.
    map_index: int = -1
    #: A dataset-triggered run's ``triggering_events`` as JSON text (LEOFLOW_TRIGGERING_EVENTS); None otherwise.
    triggering_events: str | None = None
    #: The run's data interval (LEOFLOW_DATA_INTERVAL_START/END); None on runs written before it was stored.
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None


@dataclass(frozen=True)
class Picked:
    """The ready tasks that get the free slots of a round, best first."""

    tasks: list[ReadyTask]
    #: Ready tasks were left although their pool had a free slot (a DAG's ``max_active_tasks``
    #: held them back, or the round's ``limit`` was reached): another round may queue more.
    more: bool


_PICK = f"""
        SELECT {_READY_COLUMNS}, ti.priority, ti.pool, ti.max_parallel
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.pool = free.name AND {{ready}}
          AND ti.id <> ALL(CAST(:excluded AS bigint[]))
          AND (CAST(:only AS bigint[]) IS NULL OR ti.id = ANY(CAST(:only AS bigint[])))
          AND NOT EXISTS (SELECT 1 FROM capped WHERE capped.dag_id = r.dag_id AND capped.n <= 0)
          AND NOT EXISTS (SELECT 1 FROM map_capped m WHERE m.run_pk = ti.run_pk AND m.task_id = ti.task_id
                          AND m.n <= 0)
        ORDER BY ti.priority DESC, ti.id LIMIT free.n"""


def slots_in_use(pool: str, slots: str) -> str:
    """SQL for the slots ``pool`` (an SQL expression) has in use, counted up to its ``slots``
    (past those it has no room anyway).

    Each count is an index scan of one range of ``ix_task_instances_pool_slots``. A queued or
    running row version stays in that index after its task moved on, until a vacuum (autovacuum
    looks once a minute, and only past 20 % dead rows). An index scan visits such an entry's tuple
    once and marks it dead; a bitmap scan, or a scan of the whole index filtered by pool, returns
    it again at every count: by the end of ``bench/scheduler.py`` the one write's count read
    164,000 entries for 8 live ones, and the write took 80 ms instead of 50. So the range is one
    pool (no ``coalesce``), and the LIMIT keeps the planner on the index (a bitmap cannot stop
    early). Rows without a pool, an older release's, hold a slot of the default pool: their range.
    """
    return f"""(
        (SELECT count(*) FROM (SELECT 1 FROM task_instances u WHERE u.state IN {SLOT_TASKS_SQL}
                               AND u.pool = {pool} LIMIT greatest({slots}, 0)) u)
        + (SELECT count(*) FROM (SELECT 1 FROM task_instances u WHERE u.state IN {SLOT_TASKS_SQL}
                                 AND u.pool IS NULL AND {pool} = :default_pool LIMIT greatest({slots}, 0)) u))"""


_PICK_READY = f"""
    WITH pool AS (
        SELECT name, slots FROM pools UNION ALL SELECT :default_pool, :parallelism
    ), waiting AS MATERIALIZED (  -- pools with a ready task: only theirs are worth counting slots for
        -- (after a one write, usually none: the count would read every queued and running row)
        SELECT pool.name, pool.slots FROM pool
        WHERE EXISTS (SELECT 1 FROM task_instances w
                      WHERE w.pool = pool.name AND w.state = 'pending' AND w.pending_upstreams = 0)
           OR EXISTS (SELECT 1 FROM task_instances w
                      WHERE w.pool = pool.name AND w.state = 'up_for_retry' AND w.next_try_at <= now())
    ), free AS (
        SELECT waiting.name,
               least(greatest(waiting.slots - {slots_in_use('waiting.name', 'waiting.slots')}, 0), :limit) AS n
        FROM waiting
    ), limited AS (  -- DAGs with a max_active_tasks (usually none: then nothing below is counted)
        SELECT dag_id, max_active_tasks FROM dags WHERE max_active_tasks IS NOT NULL
    ), active AS (
        SELECT r.dag_id, count(*) AS n
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.state IN {SLOT_TASKS_SQL} AND EXISTS (SELECT 1 FROM limited) GROUP BY r.dag_id
    ), capped AS (
        SELECT limited.dag_id, limited.max_active_tasks - coalesce(active.n, 0) AS n
        FROM limited LEFT JOIN active ON active.dag_id = limited.dag_id
    ), map_capped AS (  -- mapped tasks with a max_parallel: what each leaves (ix_task_instances_map_slots)
        SELECT run_pk, task_id, max(max_parallel) - count(*) AS n FROM task_instances
        WHERE max_parallel IS NOT NULL AND state IN {SLOT_TASKS_SQL} GROUP BY run_pk, task_id
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
               row_number() OVER (PARTITION BY p.run_pk, p.task_id ORDER BY p.priority DESC, p.id) AS in_map,
               capped.n AS dag_left, free.n AS pool_left, coalesce(m.n, p.max_parallel) AS map_left
        FROM picked p JOIN free ON free.name = p.pool LEFT JOIN capped ON capped.dag_id = p.dag_id
        LEFT JOIN map_capped m ON m.run_pk = p.run_pk AND m.task_id = p.task_id
    ), chosen AS (
        SELECT * FROM ranked WHERE in_pool <= pool_left AND (dag_left IS NULL OR in_dag <= dag_left)
                               AND (map_left IS NULL OR in_map <= map_left)
    ), summary AS (
        SELECT coalesce(bool_or(in_pool <= pool_left AND NOT ((dag_left IS NULL OR in_dag <= dag_left)
                                                           AND (map_left IS NULL OR in_map <= map_left))), false)
               OR (SELECT count(*) FROM chosen) >= :limit AS more
        FROM ranked
    )
    SELECT summary.more, chosen.* FROM summary LEFT JOIN chosen ON true
    ORDER BY chosen.priority DESC, chosen.id
"""


_FIELDS = ("id", "run_pk", "task_id", "state", "try_number", "max_tries", "dag_id", "run_id", "version_id",
           "upstream_successes", "upstream_failures", "upstream_skips")
_READY_WIDTH = 1 + len(_FIELDS)


def _picked(r: Any) -> ReadyTask:
    task = ReadyTask(*r[1:_READY_WIDTH])
    task.map_index, task.map_count = r.map_index, r.map_count
    return task


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
    tasks = [_picked(r) for r in rows if r.id is not None]
    return Picked(tasks=tasks, more=bool(rows[0].more) if rows else False)


_QUEUE_PICKED = f"""
    WITH c AS (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[]), CAST(:tries AS int[]))
            AS c(id, state, try_number)
    ), q AS (
        UPDATE task_instances ti
        SET state = 'queued', try_number = ti.try_number + 1, queued_at = :now, started_at = NULL,
            ended_at = NULL, timeout_at = NULL, next_try_at = NULL, reason = NULL, updated_at = :now,
            term = :term, queued_try_id = nextval({queued_tries.TRY_ID_SEQUENCE})
        FROM c
        WHERE ti.id = c.id AND ti.state = c.state AND ti.try_number = c.try_number
          AND (ti.state = 'up_for_retry' OR ti.pending_upstreams = 0)
        RETURNING ti.id, ti.try_number, ti.queued_try_id
    )
    -- Joined to the table, not to another CTE: the planner cannot estimate a CTE's rows (it
    -- assumes one), so joining two ran as a nested loop, quadratic in the batch (500 ms for 1,568
    -- tries). The statement's snapshot still shows each task instance's old row, and run_pk,
    -- task_id and max_tries are not what the update changes: one primary-key probe per try.
    SELECT q.id, q.queued_try_id AS task_try_id, q.try_number, ti.run_pk, ti.task_id, ti.max_tries, r.dag_id,
           r.run_id, r.dag_version_id AS version_id, r.conf::text AS conf, r.logical_date, r.body_state, r.body_reason,
           ti.map_index, r.triggering_events::text, r.data_interval_start, r.data_interval_end
    FROM q JOIN task_instances ti ON ti.id = q.id JOIN dag_runs r ON r.id = ti.run_pk
"""
#: Built once: ``text()`` finds a statement's bind parameters with a regular expression on every
#: call (0.9 ms for a burst's write).
_QUEUE_PICKED_SQL = text(_QUEUE_PICKED)


async def queue_picked(conn: AsyncConnection, tasks: Sequence[ReadyTask], now: datetime,
                       term: int) -> list[QueuedTask]:
    """CAS pending/up_for_retry → queued, bump the try number and draw the try's id (its row is its
    first writer's, ADR 0013); one round trip that also returns what each launch needs of its run
    (``conf`` as text, ``logical_date``).

    Slots are not counted again: :func:`pick_ready` counted them in this transaction, and only
    the leader's fenced step queues.
    """
    if not tasks:
        return []
    rows = await conn.execute(_QUEUE_PICKED_SQL, {
        "ids": arrays.ints(t.id for t in tasks), "states": arrays.texts(t.state for t in tasks),
        "tries": arrays.ints(t.try_number for t in tasks), "now": now, "term": term})
    # Positional, in QueuedTask's field order (the SELECT list above): a step builds hundreds.
    return [QueuedTask(*r) for r in rows]


@dataclass(frozen=True)
class QueueRoom:
    """What :func:`count_and_queue` needs to apply :func:`pick_ready`'s rules."""

    #: The ``default`` pool's slots (``LEOFLOW_PARALLELISM``).
    parallelism: int
    #: Tasks one pool may take in one statement (the scheduler's row budget for a step).
    limit: int
    #: Task instances the scheduler quarantined this term: never queued here.
    excluded: Sequence[int] = ()
    #: Slots kept free in every pool for concurrent steps of the same tick (ADR 0012): what they
    #: may queue (at most the distinct downstream of their successes) is not visible to this
    #: statement's snapshot.
    reserved: int = 0


@dataclass(slots=True)
class CountedAndQueued:
    """What :func:`count_and_queue` did: task instances only counted, and those it also queued."""

    counted: list[Counted]
    queued: list[QueuedTask]


#: The outcomes per task instance, as ``d(run_pk, task_id, n, s, f, k, eligible)``.
_OUTCOMES = f"""
    SELECT x.run_pk, x.task_id, {TALLY}, bool_and(x.eligible) AS eligible
    FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[]), CAST(:outcomes AS text[]),
                CAST(:eligible AS boolean[])) AS x(run_pk, task_id, outcome, eligible)
    GROUP BY x.run_pk, x.task_id"""

#: A counted row (``ti``, as the statement's snapshot shows it) that the outcomes ``d`` make ready
#: to run now.
_READY_NOW = """(d.eligible AND d.s = d.n AND ti.pending_upstreams = d.n AND ti.upstream_failures = 0
    AND ti.upstream_skips = 0 AND ti.pool IS NOT NULL AND ti.id <> ALL(CAST(:excluded AS bigint[]))
    AND ti.run_pk <> ALL(ARRAY(SELECT id FROM limited)))"""

#: The row the update reached is the one ``c`` judged (a writer outside the leader, e.g. a cancel,
#: may have changed it since; then it is only counted, and the round decides it).
_QUEUE_NOW = "(c.q AND ti.ctid = c.tid)"

# Each counted row is read once (``c``, one probe of the unique (run_pk, task_id) index per task),
# judged once (``ready``), and updated through its primary key. The pool decision is made once,
# in MATERIALIZED CTEs, and read by each row as a constant array. The try ids are drawn in the
# update (``queued_try_id``), so the statement returns one row per task instance and the tries
# were inserted from it when step-1 code wrote their rows (ADR 0013). tests/scheduler/test_plan_work.py
# holds the plan linear.
_COUNT_AND_QUEUE = f"""
    WITH limited AS MATERIALIZED (  -- runs of DAGs with a max_active_tasks: theirs take the round
        SELECT r.id FROM dag_runs r JOIN dags g ON g.dag_id = r.dag_id
        WHERE r.id = ANY(CAST(:runs AS bigint[])) AND g.max_active_tasks IS NOT NULL
    ), c AS MATERIALIZED (
        SELECT ti.id, ti.ctid AS tid, ti.pool, d.n, d.s, d.f, d.k, {_READY_NOW} AS ready
        FROM ({_OUTCOMES}) d JOIN task_instances ti ON ti.run_pk = d.run_pk AND ti.task_id = d.task_id
        WHERE {PENDING} AND ti.pending_upstreams > 0
    ), wanted AS MATERIALIZED (
        SELECT c.pool, count(*) AS n FROM c WHERE c.ready GROUP BY c.pool
    ), room AS MATERIALIZED (  -- pools whose free slots take all of them, with nothing ready waiting
        SELECT wanted.pool FROM wanted
        JOIN (SELECT name, slots FROM pools UNION ALL SELECT :default_pool, :parallelism) p ON p.name = wanted.pool
        WHERE wanted.n <= :limit
          AND p.slots - :reserved - {slots_in_use('wanted.pool', 'p.slots')} >= wanted.n
          -- OFFSET 0: probed once per wanted pool in ix_task_instances_ready (as an anti join, the
          -- planner read every active row of ix_task_instances_run_active instead: 3 ms a burst)
          AND NOT EXISTS (SELECT 1 FROM task_instances w
                          WHERE w.pool = wanted.pool AND w.state = 'pending' AND w.pending_upstreams = 0 OFFSET 0)
          AND NOT EXISTS (SELECT 1 FROM task_instances w
                          WHERE w.pool IS NULL AND w.state = 'pending' AND w.pending_upstreams = 0 OFFSET 0)
          AND NOT EXISTS (SELECT 1 FROM task_instances w
                          WHERE w.state = 'up_for_retry' AND w.next_try_at <= now()
                            AND coalesce(w.pool, :default_pool) = wanted.pool OFFSET 0)
    ), tries AS MATERIALIZED (
        SELECT pg_get_serial_sequence('task_tries', 'id')::regclass AS seq
    ), u AS (
        UPDATE task_instances ti
        SET pending_upstreams = ti.pending_upstreams - c.n, upstream_successes = ti.upstream_successes + c.s,
            upstream_failures = ti.upstream_failures + c.f, upstream_skips = ti.upstream_skips + c.k,
            updated_at = :now,
            state = CASE WHEN {_QUEUE_NOW} THEN 'queued' ELSE ti.state END,
            try_number = ti.try_number + CASE WHEN {_QUEUE_NOW} THEN 1 ELSE 0 END,
            queued_at = CASE WHEN {_QUEUE_NOW} THEN :now ELSE ti.queued_at END,
            started_at = CASE WHEN {_QUEUE_NOW} THEN NULL ELSE ti.started_at END,
            ended_at = CASE WHEN {_QUEUE_NOW} THEN NULL ELSE ti.ended_at END,
            timeout_at = CASE WHEN {_QUEUE_NOW} THEN NULL ELSE ti.timeout_at END,
            next_try_at = CASE WHEN {_QUEUE_NOW} THEN NULL ELSE ti.next_try_at END,
            reason = CASE WHEN {_QUEUE_NOW} THEN NULL ELSE ti.reason END,
            term = CASE WHEN {_QUEUE_NOW} THEN :term ELSE ti.term END,
            queued_try_id = CASE WHEN {_QUEUE_NOW} THEN nextval((SELECT seq FROM tries)) ELSE ti.queued_try_id END
        FROM (SELECT c.*, c.ready AND c.pool = ANY(ARRAY(SELECT pool FROM room)) AS q FROM c) c
        WHERE ti.id = c.id AND {PENDING} AND ti.pending_upstreams > 0
        RETURNING ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.pending_upstreams,
                  ti.upstream_successes, ti.upstream_failures, ti.upstream_skips,
                  CASE WHEN ti.state = 'queued' THEN ti.queued_try_id END AS try_id
    )
    -- What the launches need of a run comes once per run (a row without a task instance id), not
    -- with each of its hundreds of tasks: half the columns to send and parse.
    SELECT id, run_pk, task_id, state, try_number, max_tries, pending_upstreams, upstream_successes,
           upstream_failures, upstream_skips, try_id, NULL, NULL, NULL::bigint, NULL, NULL::timestamptz, NULL, NULL,
           NULL, NULL::timestamptz, NULL::timestamptz
    FROM u
    UNION ALL
    SELECT NULL, r.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, r.dag_id, r.run_id, r.dag_version_id,
           r.conf::text, r.logical_date, r.body_state, r.body_reason, r.triggering_events::text,
           r.data_interval_start, r.data_interval_end
    FROM dag_runs r WHERE r.id = ANY(CAST(:runs AS bigint[]))
"""

#: ``try_id`` is NULL for a row only counted. The tries it queues get no row (ADR 0013).
_COUNT_AND_QUEUE_SQL = text(_COUNT_AND_QUEUE)


async def count_and_queue(conn: AsyncConnection, outcomes: Sequence[tuple[int, str, str]], eligible: Sequence[bool],
                          now: datetime, term: int, room: QueueRoom) -> CountedAndQueued:
    """Count each (run_pk, task_id, outcome) as :func:`~leoflow.db.stores.task_instances.downstream.count_outcomes`
    does, and queue the tasks it makes ready when their pool has room (the module docstring).

    ``eligible[i]``: the scheduler's word that ``outcomes[i]``'s task runs once every upstream
    has succeeded (a container task whose rule says so,
    :data:`~leoflow.model.spec.trigger_rules.RUN_WHEN_ALL_SUCCEED`); the statement checks the rest —
    every upstream done and succeeded, the pool's room, the DAG's limit, the quarantine.
    """
    if not outcomes:
        return CountedAndQueued([], [])
    rows = (await conn.execute(_COUNT_AND_QUEUE_SQL, {
        "runs": arrays.ints(o[0] for o in outcomes), "tasks": arrays.texts(o[1] for o in outcomes),
        "outcomes": arrays.texts(o[2] for o in outcomes), "eligible": arrays.bools(eligible),
        "excluded": arrays.ints(room.excluded), "default_pool": DEFAULT_POOL, "parallelism": room.parallelism,
        "limit": room.limit, "reserved": room.reserved, "now": now, "term": term})).all()
    runs = {r[1]: r[11:] for r in rows if r[0] is None}
    tasks = [r for r in rows if r[0] is not None]
    counted = counted_rows((*r[:10], *runs[r[1]][:3]) for r in tasks if r[10] is None)
    queued: list[QueuedTask] = []
    for r in tasks:
        if r[10] is not None:  # positional, in QueuedTask's field order: a step builds hundreds
            (dag_id, run_id, version_id, conf, logical_date, body_state, body_reason, triggering, interval_start,
             interval_end) = runs[r[1]]
            queued.append(QueuedTask(r[0], r[10], r[4], r[1], r[2], r[5], dag_id, run_id, version_id, conf,
                                     logical_date, body_state, body_reason, -1, triggering, interval_start,
                                     interval_end))
    return CountedAndQueued(counted, queued)

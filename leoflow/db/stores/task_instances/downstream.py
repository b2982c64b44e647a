"""What a task instance's final state does downstream: the statements the scheduler runs on it.

Called by the scheduler inside its fenced transactions (see
:mod:`leoflow.db.stores.task_instances.transitions` for the rules every write follows:
compare-and-set, batched, bounded):

- a task's final state is counted on its direct downstream (``pending_upstreams`` decremented,
  one of ``upstream_successes`` / ``upstream_failures`` / ``upstream_skips`` incremented) and
  the counted rows are returned, so the scheduler decides their trigger rules
  (:mod:`leoflow.model.spec.trigger_rules`) and queues the ready ones in the same transaction
  without a scan;
- a final failure makes the descendants that need it to succeed ``upstream_failed`` at once
  (one statement for the whole closure); a rule that decides ``upstream_failed`` or
  ``skipped`` ends its task instance the same way;
- task instances the scheduler could not handle (:mod:`leoflow.scheduler.containment`) are
  failed durably with their reason, so no later leader treats them as work again.

How the run ends once its task instances are final is :mod:`leoflow.db.stores.runs.endings`';
flagging tries ``cancelling`` and marking them killed is :mod:`leoflow.db.stores.tries`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.fragments import ACTIVE_TASKS_SQL
from leoflow.db.queued_tries import cancel_live_tries_sql
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.spec.trigger_rules import REASONS, UpstreamCounts


@dataclass(frozen=True)
class FailedTask:
    """A task instance failed by :func:`fail_task_instances` (its descendants still to be doomed)."""

    ti_id: int
    run_pk: int
    task_id: str
    version_id: int


# --------------------------------------------------------------------------- downstream of a final state

#: What every statement that counts upstream outcomes returns of the task instances it touched.
_COUNTED = """
    RETURNING ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.pending_upstreams,
              ti.upstream_successes, ti.upstream_failures, ti.upstream_skips,
              r.dag_id, r.run_id, r.dag_version_id AS version_id
"""

#: ``state = 'pending'`` written so that no partial index can serve it. PostgreSQL has no hints:
#: with ``state = 'pending'`` and ``run_pk = …`` it may probe ``ix_task_instances_run_active`` by
#: run_pk alone and filter every active task of the run, for each (run_pk, task_id) looked up —
#: work of keys x run width (1,568 keys x 100 tasks per step under ``bench/scheduler.py``,
#: quadratic in a wide fan-out; tests/scheduler/test_plan_work.py). Written as an expression, the
#: check keeps its compare-and-set meaning and leaves the unique (run_pk, task_id) index, one probe
#: per key, as the index to use.
PENDING = "(ti.state || '') = 'pending'"

#: Adds a ``d(run_pk, task_id, n, s, f, k)`` of outcomes to the counters of pending task
#: instances still waiting for an upstream (a task released early no longer counts).
_COUNT = f"""
    UPDATE task_instances ti SET pending_upstreams = ti.pending_upstreams - d.n,
           upstream_successes = ti.upstream_successes + d.s, upstream_failures = ti.upstream_failures + d.f,
           upstream_skips = ti.upstream_skips + d.k, updated_at = :now
    FROM d, dag_runs r
    WHERE ti.run_pk = d.run_pk AND ti.task_id = d.task_id AND {PENDING} AND ti.pending_upstreams > 0
      AND r.id = ti.run_pk
"""

#: Outcome columns of ``d`` from rows of ``x(run_pk, task_id, outcome)``.
TALLY = """
    count(*) AS n, count(*) FILTER (WHERE x.outcome = 'success') AS s,
    count(*) FILTER (WHERE x.outcome IN ('failed', 'upstream_failed')) AS f,
    count(*) FILTER (WHERE x.outcome = 'skipped') AS k
"""


@dataclass(slots=True)
class Counted:
    """A pending task instance whose upstream counters an outcome just changed (decide its rule)."""

    task: ReadyTask
    counts: UpstreamCounts


def counted_rows(rows: Iterable[Sequence[Any]]) -> list[Counted]:
    """Rows of :data:`_COUNTED`, in its column order, as :class:`Counted`. Unpacked by position from
    fetched tuples: a step builds hundreds, and by-name access to each column of a result row
    cost more than the rest of deciding the task (30 µs a row under bench/scheduler.py)."""
    out: list[Counted] = []
    for ti_id, run_pk, task_id, state, try_number, max_tries, pending, s, f, k, dag_id, run_id, version_id in rows:
        task = ReadyTask(ti_id, run_pk, task_id, state, try_number, max_tries, dag_id, run_id, version_id, s, f, k)
        out.append(Counted(task, UpstreamCounts(pending, s, f, k)))
    return out


async def count_outcomes(conn: AsyncConnection, outcomes: Sequence[tuple[int, str, str]],
                         now: datetime) -> list[Counted]:
    """Each (run_pk, task_id, outcome): one direct upstream of that task ended with ``outcome``
    (success, failed, upstream_failed or skipped). Returns the task instances counted."""
    if not outcomes:
        return []
    rows = await conn.execute(text(f"""
        WITH d AS (
            SELECT x.run_pk, x.task_id, {TALLY}
            FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[]), CAST(:outcomes AS text[]))
                 AS x(run_pk, task_id, outcome)
            GROUP BY x.run_pk, x.task_id
        )
        {_COUNT}
        {_COUNTED}
    """), {"runs": arrays.ints(o[0] for o in outcomes), "tasks": arrays.texts(o[1] for o in outcomes),
           "outcomes": arrays.texts(o[2] for o in outcomes), "now": now})
    return counted_rows(rows.all())


@dataclass(frozen=True)
class EmptySuccess:
    """What :func:`succeed_empty_tasks` did: the empty tasks it succeeded, the downstream it counted."""

    succeeded: list[tuple[int, int]]  # (ti id, run_pk)
    counted: list[Counted]


async def succeed_empty_tasks(conn: AsyncConnection, ids: Sequence[int], downstream: Sequence[tuple[int, int, str]],
                              now: datetime, term: int) -> EmptySuccess:
    """CAS pending → success for ``kind: empty`` tasks and count the success downstream, in one statement.

    ``downstream``: (upstream ti id, run_pk, downstream task id) for every edge out of ``ids``;
    only the edges of tasks that actually succeeded are counted (a run cancelled meanwhile
    counts nothing).
    """
    if not ids:
        return EmptySuccess([], [])
    rows = await conn.execute(text(f"""
        WITH s AS (
            UPDATE task_instances SET state = 'success', queued_at = :now, started_at = :now, ended_at = :now,
                   updated_at = :now, term = :term
            WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'pending' AND pending_upstreams = 0
            RETURNING id, run_pk
        ), x AS (
            SELECT x.run_pk, x.task_id, 'success' AS outcome
            FROM unnest(CAST(:ups AS bigint[]), CAST(:runs AS bigint[]), CAST(:tasks AS text[]))
                 AS x(up_id, run_pk, task_id)
            JOIN s ON s.id = x.up_id
        ), d AS (
            SELECT x.run_pk, x.task_id, {TALLY} FROM x GROUP BY x.run_pk, x.task_id
        ), counted AS (
            {_COUNT}
            {_COUNTED}
        )
        SELECT 's' AS kind, s.id, s.run_pk, NULL AS task_id, NULL AS state, 0 AS try_number, 0 AS max_tries,
               0 AS pending_upstreams, 0 AS upstream_successes, 0 AS upstream_failures, 0 AS upstream_skips,
               NULL AS dag_id, NULL AS run_id, 0::bigint AS version_id FROM s
        UNION ALL
        SELECT 'c', id, run_pk, task_id, state, try_number, max_tries, pending_upstreams, upstream_successes,
               upstream_failures, upstream_skips, dag_id, run_id, version_id FROM counted
    """), {"ids": arrays.ints(ids), "ups": arrays.ints(d[0] for d in downstream),
           "runs": arrays.ints(d[1] for d in downstream), "tasks": arrays.texts(d[2] for d in downstream),
           "now": now, "term": term})
    succeeded: list[tuple[int, int]] = []
    counted: list[Any] = []
    for r in rows.all():
        if r[0] == "s":
            succeeded.append((int(r.id), int(r.run_pk)))
        else:
            counted.append(r[1:])  # the kind, then _COUNTED's columns
    return EmptySuccess(succeeded, counted_rows(counted))


@dataclass(frozen=True)
class Decided:
    """A pending task instance a trigger rule ended without running it."""

    run_pk: int
    task_id: str
    state: str


async def mark_upstream_failed(conn: AsyncConnection, pairs: Sequence[tuple[int, str]], now: datetime,
                               term: int) -> list[Decided]:
    """pending → upstream_failed for each (run_pk, task_id): the descendants a failure dooms at once."""
    if not pairs:
        return []
    rows = await conn.execute(text(f"""
        UPDATE task_instances ti SET state = 'upstream_failed', ended_at = :now, updated_at = :now, term = :term,
               reason = '{REASONS["upstream_failed"]}'
        FROM (SELECT DISTINCT * FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[])) AS x(run_pk, task_id)) d
        WHERE ti.run_pk = d.run_pk AND ti.task_id = d.task_id AND {PENDING}
        RETURNING ti.run_pk, ti.task_id, ti.state
    """), {"runs": arrays.ints(p[0] for p in pairs), "tasks": arrays.texts(p[1] for p in pairs), "now": now,
           "term": term})
    return [Decided(int(r.run_pk), r.task_id, r.state) for r in rows]


async def decide_pending(conn: AsyncConnection, decisions: Sequence[tuple[int, str]], now: datetime,
                         term: int, reasons: Mapping[int, str] | None = None) -> list[Decided]:
    """Pending task instances (id, ``upstream_failed`` | ``skipped`` | ``failed``) ended unrun: by their
    trigger rule, or by their ``when`` (``reasons`` by id; a trigger rule's reason otherwise)."""
    if not decisions:
        return []
    given = reasons or {}
    rows = await conn.execute(text("""
        UPDATE task_instances ti SET state = c.state, ended_at = :now, updated_at = :now, term = :term,
               reason = coalesce(c.reason, CASE c.state WHEN 'skipped' THEN :skipped ELSE :failed END)
        FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[]), CAST(:reasons AS text[])) AS c(id, state, reason)
        WHERE ti.id = c.id AND ti.state = 'pending'
        RETURNING ti.run_pk, ti.task_id, ti.state
    """), {"ids": [d[0] for d in decisions], "states": [d[1] for d in decisions],
           "reasons": [given.get(d[0]) for d in decisions], "now": now, "term": term,
           "skipped": REASONS["skipped"], "failed": REASONS["upstream_failed"]})
    return [Decided(int(r.run_pk), r.task_id, r.state) for r in rows]


async def release_early(conn: AsyncConnection, ids: Sequence[int], now: datetime) -> set[int]:
    """Pending task instances whose rule lets them run before every upstream ended
    (``one_success``, ``one_failed``): ``pending_upstreams`` = 0 makes them ready. Returns those."""
    if not ids:
        return set()
    rows = await conn.execute(text("""
        UPDATE task_instances SET pending_upstreams = 0, updated_at = :now
        WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'pending'
        RETURNING id
    """), {"ids": list(ids), "now": now})
    return {int(r.id) for r in rows}



# --------------------------------------------------------------------------- task instances the scheduler failed

async def fail_task_instances(conn: AsyncConnection, failures: Sequence[tuple[int, str]], now: datetime,
                              term: int) -> list[FailedTask]:
    """Unfinished task instances (id, reason) → ``failed`` for good (no retry: the same data would fail
    the same way); their live tries are flagged ``cancelling`` so the executor kills them."""
    if not failures:
        return []
    rows = await conn.execute(text(f"""
        WITH c AS (
            SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:reasons AS text[])) AS c(id, reason)
        ), failed AS (
            UPDATE task_instances ti SET state = 'failed', reason = c.reason, ended_at = :now, updated_at = :now,
                   timeout_at = NULL, next_try_at = NULL, term = :term
            FROM c WHERE ti.id = c.id AND ti.state IN {ACTIVE_TASKS_SQL}
            RETURNING ti.id, ti.run_pk, ti.task_id, c.reason
        ), {cancel_live_tries_sql("failed", "x.reason")}
        SELECT f.id, f.run_pk, f.task_id, r.dag_version_id FROM failed f JOIN dag_runs r ON r.id = f.run_pk
    """), {"ids": [f[0] for f in failures], "reasons": [f[1] for f in failures], "now": now, "term": term})
    return [FailedTask(int(r.id), int(r.run_pk), r.task_id, int(r.dag_version_id)) for r in rows]

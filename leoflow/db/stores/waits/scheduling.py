"""The leader's statements for task waits: park a task, find the waits due for a check, judge them, wake them.

A task whose trigger rule says run and that has conditions is **parked**: one ``task_waits`` row per
condition and the task instance ``waiting``, in one statement (:func:`park`), so it leaves the
ready index and no queueing read sees it again. Each row carries ``check_at``, the next moment it
is worth judging: now when it is written or when what it waits on changes (:func:`wake`: a run of
the DAG it names ended, an event of its dataset, an approval decided), its own moment for
``not_before``, its timeout, and otherwise :data:`RECHECK_SECONDS` later — a safety net, not the
way waits are met. :func:`judge_due` reads the rows whose check is due (one range of
``ix_task_waits_due``, none while nothing changes) and judges them all in one statement, on the
database's clock. The step then moves whole task instances: every condition met → ``pending`` and
ready (:func:`release`), one failed or timed out → ended with the reason.

Exactly once: every write is a compare-and-set on ``state = 'waiting'`` in the leader's fenced
transaction, so a stale leader writes nothing and a replayed step finds nothing left to decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.spec.waits.conditions import Wait

#: Seconds between two checks of a wait nothing woke: a net under the wake-ups (an event recorded by
#: a replica while no leader ran, a run ended by hand). Five minutes keeps 10,000 waiting tasks at
#: about 33 rows a second to judge when nothing changes.
RECHECK_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class ToPark:
    """A ready task instance to hold, with its task's conditions."""

    ti_id: int
    try_number: int
    dag_id: str
    waits: tuple[Wait, ...]


async def wait_states(conn: AsyncConnection, ti_ids: Sequence[int]) -> dict[int, tuple[bool, int]]:
    """For task instances with wait rows: (every row met, the try number they were written for)."""
    if not ti_ids:
        return {}
    rows = await conn.execute(text("""
        SELECT task_instance_id AS id, bool_and(state = 'met') AS met, max(try_number) AS try_number
        FROM task_waits WHERE task_instance_id = ANY(CAST(:ids AS bigint[])) GROUP BY task_instance_id
    """), {"ids": list(ti_ids)})
    return {int(r.id): (bool(r.met), int(r.try_number)) for r in rows}


async def park(conn: AsyncConnection, parked: Sequence[ToPark], now: datetime, term: int) -> list[int]:
    """Hold ``parked`` in ``waiting`` with fresh wait rows (older ones replaced); returns the ids held.

    Targets are computed from the run on the database: a ``dag`` wait's logical date and a
    ``not_before`` moment from the run's logical date (its creation when it has none), a
    ``dataset`` wait counts events after the run's start.
    """
    if not parked:
        return []
    cols: dict[str, list[object]] = {k: [] for k in ("ti", "pos", "dag", "kind", "target", "offset", "states",
                                                       "soft", "timeout", "try")}
    for p in parked:
        for i, w in enumerate(p.waits):
            target = p.dag_id if w.kind == "past" else w.target  # past: woken when a run of its DAG ends
            for key, value in (("ti", p.ti_id), ("pos", i), ("dag", p.dag_id), ("kind", w.kind),
                               ("target", target), ("offset", w.offset_seconds), ("states", ",".join(w.states)),
                               ("soft", w.soft_fail), ("timeout", w.timeout_seconds), ("try", p.try_number)):
                cols[key].append(value)
    rows = await conn.execute(text("""
        WITH held AS (
            UPDATE task_instances SET state = 'waiting', updated_at = :now, term = :term, reason = NULL
            WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'pending'
            RETURNING id, run_pk
        ), gone AS (
            DELETE FROM task_waits w USING held WHERE w.task_instance_id = held.id
        )
        INSERT INTO task_waits (task_instance_id, position, dag_id, kind, target, target_date, states, since,
                                soft_fail, timeout_at, check_at, try_number, created_at)
        SELECT c.ti, c.pos, c.dag, c.kind, c.target,
               CASE WHEN c.kind IN ('dag', 'time')
                    THEN coalesce(r.logical_date, r.created_at) + make_interval(secs => c.off) END,
               CASE WHEN c.kind = 'dag' THEN string_to_array(c.states, ',') END,
               -- the run's start as the leader stamped it, but never after the database's now: a leader
               -- whose wall clock ran ahead stamped a start in the future, and every event the other
               -- replicas recorded meanwhile (on their clocks) looked older than it, so the wait never ended
               least(coalesce(r.started_at, r.created_at), now()),
               c.soft, now() + make_interval(secs => c.timeout), now(), c.try, now()
        FROM unnest(CAST(:ti AS bigint[]), CAST(:pos AS int[]), CAST(:dag AS text[]), CAST(:kind AS text[]),
                    CAST(:target AS text[]), CAST(:off AS float8[]), CAST(:states AS text[]),
                    CAST(:soft AS boolean[]), CAST(:timeout AS float8[]), CAST(:try AS int[]))
             AS c(ti, pos, dag, kind, target, off, states, soft, timeout, try)
        JOIN held ON held.id = c.ti JOIN dag_runs r ON r.id = held.run_pk
        RETURNING task_instance_id
    """), {"ids": [p.ti_id for p in parked], "now": now, "term": term, "ti": cols["ti"], "pos": cols["pos"],
           "dag": cols["dag"], "kind": cols["kind"], "target": cols["target"], "off": cols["offset"],
           "states": cols["states"], "soft": cols["soft"], "timeout": cols["timeout"], "try": cols["try"]})
    return sorted({int(r.task_instance_id) for r in rows})


@dataclass(frozen=True, slots=True)
class Judged:
    """One task instance's due conditions, judged: met, still waiting, or ended (and why)."""

    ti_id: int
    #: Every condition of the task instance is met now.
    met: bool
    #: None while it waits; else the reason it ends, and whether that is a skip (``soft_fail``).
    failure: str | None = None
    skip: bool = False


#: Why a due row fails, on the database's clock; NULL: it does not (yet).
_FAILURE = """CASE
    WHEN w.kind = 'dag' AND NOT EXISTS (SELECT 1 FROM dags d WHERE d.dag_id = w.target AND NOT d.deleted)
        THEN 'DAG ' || w.target || ' does not exist (deleted after this DAG was applied)'
    WHEN w.kind = 'approval' AND w.decision = 'reject'
        THEN left('rejected by ' || coalesce(w.decided_by, 'someone')
                  || coalesce(': ' || nullif(w.comment, ''), ''), 500)
    WHEN w.timeout_at <= now() THEN 'timed out after ' || round(extract(epoch FROM w.timeout_at - w.created_at))
                                    || 's waiting for ' || w.kind || coalesce(' ' || nullif(w.target, ''), '')
END"""

#: Whether a due row is met now.
_MET = """CASE w.kind
    WHEN 'dag' THEN EXISTS (SELECT 1 FROM dag_runs o WHERE o.dag_id = w.target AND o.logical_date = w.target_date
                            AND o.state = ANY(w.states))
    WHEN 'dataset' THEN coalesce((SELECT e.created_at > w.since FROM dataset_events e WHERE e.uri = w.target
                                  ORDER BY e.id DESC LIMIT 1), false)
    WHEN 'time' THEN w.target_date <= now()
    WHEN 'approval' THEN w.decision = 'approve'
    WHEN 'past' THEN NOT EXISTS (
        SELECT 1 FROM task_instances pt
        WHERE pt.run_pk = (SELECT p.id FROM dag_runs r JOIN dag_runs p ON p.dag_id = r.dag_id
                           AND p.logical_date < r.logical_date AND p.id <> r.id
                           WHERE r.id = ti.run_pk ORDER BY p.logical_date DESC LIMIT 1)
          AND pt.task_id = ti.task_id AND pt.state NOT IN ('success', 'skipped'))
    ELSE false
END"""


async def due_task_instances(conn: AsyncConnection, limit: int) -> list[int]:
    """Task instances with a wait row whose check is due (one range of ``ix_task_waits_due``)."""
    rows = await conn.execute(text("""
        SELECT DISTINCT task_instance_id FROM (
            SELECT task_instance_id FROM task_waits WHERE state = 'waiting' AND check_at <= now()
            ORDER BY check_at LIMIT :limit) due
    """), {"limit": limit})
    return sorted(int(r.task_instance_id) for r in rows)


async def judge(conn: AsyncConnection, ti_ids: Sequence[int]) -> list[Judged]:
    """Judge every waiting row of ``ti_ids``, write what each is, and return each task instance's
    verdict. Rows of task instances no longer ``waiting`` (a cancelled run, a mark) are closed
    without a verdict."""
    if not ti_ids:
        return []
    rows = await conn.execute(text(f"""
        WITH due AS (
            SELECT w.task_instance_id, w.position FROM task_waits w
            WHERE w.state = 'waiting' AND w.task_instance_id = ANY(CAST(:ids AS bigint[]))
            ORDER BY w.task_instance_id, w.position FOR UPDATE
        ), judged AS (
            SELECT w.task_instance_id, w.position, ti.state AS ti_state, w.soft_fail,
                   CASE WHEN ti.state <> 'waiting' THEN NULL ELSE {_FAILURE} END AS failure,
                   ti.state = 'waiting' AND {_MET} AS met,
                   w.kind, w.target_date, w.timeout_at
            FROM due JOIN task_waits w USING (task_instance_id, position)
            JOIN task_instances ti ON ti.id = w.task_instance_id
        ), written AS (
            UPDATE task_waits w SET
                state = CASE WHEN j.ti_state <> 'waiting' THEN 'closed' WHEN j.failure IS NOT NULL THEN 'failed'
                             WHEN j.met THEN 'met' ELSE 'waiting' END,
                reason = j.failure,
                decided_at = CASE WHEN j.met OR j.failure IS NOT NULL THEN now() ELSE w.decided_at END,
                check_at = CASE WHEN j.kind = 'time' AND j.target_date > now() THEN least(j.target_date, w.timeout_at)
                                ELSE least(now() + make_interval(secs => :recheck), w.timeout_at) END
            FROM judged j WHERE w.task_instance_id = j.task_instance_id AND w.position = j.position
            RETURNING w.task_instance_id
        )
        SELECT j.task_instance_id AS id, bool_or(j.ti_state <> 'waiting') AS closed,
               min(j.failure) AS failure, bool_and(j.soft_fail OR j.failure IS NULL) AS soft,
               bool_and(j.met) AS due_met,
               NOT EXISTS (SELECT 1 FROM task_waits o WHERE o.task_instance_id = j.task_instance_id
                           AND o.state <> 'met' AND NOT EXISTS (
                               SELECT 1 FROM judged k WHERE k.task_instance_id = o.task_instance_id
                               AND k.position = o.position)) AS others_met
        FROM judged j GROUP BY j.task_instance_id
    """), {"recheck": RECHECK_SECONDS, "ids": list(ti_ids)})
    out: list[Judged] = []
    for r in rows:
        if r.closed:
            continue
        if r.failure is not None:
            skip = bool(r.soft) and r.failure.startswith("timed out")
            out.append(Judged(int(r.id), False, r.failure, skip))
        else:
            out.append(Judged(int(r.id), bool(r.due_met) and bool(r.others_met)))
    return out


_READY = """ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, r.dag_id, r.run_id,
            r.dag_version_id AS version_id, ti.upstream_successes, ti.upstream_failures, ti.upstream_skips,
            ti.map_index, ti.map_count, ti.pool IS NOT NULL AS classified"""


async def release(conn: AsyncConnection, ti_ids: Sequence[int], now: datetime, term: int) -> list[ReadyTask]:
    """Waiting task instances back to ``pending`` (ready: their upstreams were done when they were
    parked); returns their rows. The step queues them, or ends them unrun with a reason."""
    if not ti_ids:
        return []
    rows = await conn.execute(text(f"""
        WITH back AS (
            UPDATE task_instances SET state = 'pending', updated_at = :now, term = :term
            WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'waiting' RETURNING *
        )
        SELECT {_READY} FROM back ti JOIN dag_runs r ON r.id = ti.run_pk ORDER BY ti.id
    """), {"ids": list(ti_ids), "now": now, "term": term})
    return [ReadyTask(**r._mapping) for r in rows]


async def wake(conn: AsyncConnection, kind: str, targets: Sequence[str]) -> int:
    """Waits of ``kind`` on ``targets`` are checked in the next periodic step (what they wait on changed)."""
    if not targets:
        return 0
    result = await conn.execute(text("""
        UPDATE task_waits SET check_at = now()
        WHERE state = 'waiting' AND kind = :kind AND target = ANY(CAST(:targets AS text[])) AND check_at > now()
    """), {"kind": kind, "targets": sorted(set(targets))})
    return int(result.rowcount or 0)


async def wake_changes(conn: AsyncConnection, event_id: int | None, ended_dags: Sequence[str]) -> tuple[int, int]:
    """Wake the waits on what changed: ``dag`` and ``past`` waits on ``ended_dags`` (DAGs with runs that
    ended, as the leader saw them commit), dataset waits on URIs with events after ``event_id`` (one
    range of the events' key, empty while nothing happens). ``event_id`` None (a new term): wake every
    waiting row, since the previous leader's wake-ups were lost with it. Returns (the newest event
    id, the waits woken)."""
    if event_id is None:
        newest = (await conn.execute(text("SELECT coalesce(max(id), 0) FROM dataset_events"))).scalar_one()
        everything = await conn.execute(text(
            "UPDATE task_waits SET check_at = now() WHERE state = 'waiting' AND check_at > now()"))
        return int(newest), int(everything.rowcount or 0)
    events = (await conn.execute(text("""
        SELECT max(id) AS newest, array_agg(DISTINCT uri) AS uris
        FROM (SELECT id, uri FROM dataset_events WHERE id > :after ORDER BY id LIMIT 10000) e
    """), {"after": event_id})).one()
    woken: int = 0
    if events.newest is not None:
        woken += await wake(conn, "dataset", list(events.uris))
    if ended_dags:
        woken += await wake(conn, "dag", ended_dags) + await wake(conn, "past", ended_dags)
    return int(events.newest or event_id), woken


async def watching(conn: AsyncConnection) -> bool:
    """Does any task wait? (Runs that end are then worth remembering; one probe of ``ix_task_waits_due``.)"""
    return bool((await conn.execute(text(
        "SELECT EXISTS (SELECT 1 FROM task_waits WHERE state = 'waiting')"))).scalar_one())


async def pending_by_dag(conn: AsyncConnection) -> dict[str, tuple[int, float]]:
    """Per DAG: task instances waiting and the oldest wait in seconds (the leader's gauges)."""
    rows = await conn.execute(text("""
        SELECT dag_id, count(DISTINCT task_instance_id) AS n, extract(epoch FROM now() - min(created_at)) AS oldest
        FROM task_waits WHERE state = 'waiting' GROUP BY dag_id
    """))
    return {r.dag_id: (int(r.n), float(r.oldest)) for r in rows}

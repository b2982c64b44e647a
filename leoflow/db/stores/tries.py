"""Tries as the executors record them: claims, executor refs, GC marks (``task_tries``).

Executors never change task *states* (the scheduler applies their reports with a CAS). They do
record facts about the outside world on ``task_tries``:

- ``claimed_at``/``claimed_by``/``executor_ref``: this try was handed to a pod or a process.
  Written under the leader's fencing term (:func:`claim_try` checks the term first), so an
  ex-leader can neither claim nor, since claiming precedes creating, launch anything.
  ``claimed_by`` is ``"<cluster>/<node_id>"``: two clusters sharing one database recognise
  their own tries by that prefix and never touch each other's.
- ``logs_shipped_at``: the try's output is safe in the database (:mod:`leoflow.db.stores.task_logs`).
- ``resource_deleted_at``: the pod was garbage-collected (fenced: GC is a leader service).
- ``cancelling``: the leader flags a live try for its executor to kill (:func:`request_kill`,
  :func:`tries_to_kill`) and marks it ``cancelled`` once the executor confirms it gone
  (:func:`mark_tries_killed`; :mod:`leoflow.scheduler.kills`).

Every function takes an ``AsyncConnection`` inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.fencing import check_term_async
from leoflow.db.fragments import LIVE_TRIES_SQL
from leoflow.db.queued_tries import implicit_try_sql
from leoflow.model.tries import TryKey, try_key


def claimant(cluster: str, node_id: str) -> str:
    """The ``claimed_by`` value of a node of ``cluster``."""
    return f"{cluster}/{node_id}"


def claimant_prefix(cluster: str) -> str:
    return f"{cluster}/"


@dataclass(frozen=True)
class TryRecord:
    """A task try as the executor sees it."""

    task_try_id: int
    key: TryKey
    state: str
    executor_ref: str | None
    claimed_by: str | None
    claimed_at: datetime | None
    ended_at: datetime | None
    term: int
    started_at: datetime | None = None

    @property
    def seen_running(self) -> bool:
        """Evidence that the try's pod/process existed: a leader recorded it running (or over)."""
        return was_seen_running(self.state, self.started_at is not None)


def was_seen_running(state: str, started: bool) -> bool:
    """A try that a leader recorded as started, or in any state past ``queued``, really ran."""
    return started or state not in ("queued", "cancelling")


TRY_COLUMNS = """
    tt.id AS task_try_id, dr.dag_id, dr.run_id, ti.task_id, tt.try_number, tt.state,
    tt.executor_ref, tt.claimed_by, tt.claimed_at, tt.ended_at, tt.term, tt.started_at, ti.map_index,
    ti.id AS task_instance_id
"""
TRY_FROM = """
    FROM task_tries tt
    JOIN task_instances ti ON ti.id = tt.task_instance_id
    JOIN dag_runs dr ON dr.id = ti.run_pk
"""


def try_record(row: object) -> TryRecord:
    m = row._mapping  # type: ignore[attr-defined]
    return TryRecord(task_try_id=m["task_try_id"],
                     key=try_key(m["dag_id"], m["run_id"], m["task_id"], m["try_number"], m["map_index"],
                                 m["task_instance_id"]),
                     state=m["state"], executor_ref=m["executor_ref"], claimed_by=m["claimed_by"],
                     claimed_at=m["claimed_at"], ended_at=m["ended_at"], term=m["term"],
                     started_at=m["started_at"])


def _implicit_rows(conflict: str) -> str:
    """A claim writes the row of a queued try that has none yet (ADR 0013, :mod:`leoflow.db.queued_tries`).

    For each launch of the statement's CTE ``input`` (``id``, ``ref``, ``dag_id``, ``run_id``,
    ``task_id``, ``try_number``), found through the launch's key, and only while the task instance
    is still queued for this very try (a try cancelled before its claim has its row already,
    written by the cancel). A row another writer inserted meanwhile is met by ``conflict``, the
    ``DO UPDATE`` that claims it as the statement claims an existing row.
    """
    return f"""
        INSERT INTO task_tries AS tt (id, task_instance_id, try_number, state, term, queued_at, claimed_at,
                                      claimed_by, executor_ref)
        SELECT input.id, ti.id, ti.try_number, 'queued', ti.term, coalesce(ti.queued_at, now()), clock_timestamp(),
               :by, input.ref
        FROM input JOIN dag_runs r ON r.dag_id = input.dag_id AND r.run_id = input.run_id
        JOIN task_instances ti ON ti.run_pk = r.id AND ti.task_id = input.task_id AND ti.map_index = input.map_index
        WHERE ti.try_number = input.try_number AND ti.queued_try_id = input.id AND {implicit_try_sql('ti')}
        ON CONFLICT (task_instance_id, try_number) DO UPDATE {conflict}"""


_CLAIM = text(f"""
    WITH input AS (
        SELECT CAST(:id AS bigint) AS id, CAST(:ref AS text) AS ref, CAST(:dag AS text) AS dag_id,
               CAST(:run AS text) AS run_id, CAST(:task AS text) AS task_id, CAST(:try AS int) AS try_number,
               CAST(:map AS int) AS map_index
    ), implicit AS ({_implicit_rows(
        "SET claimed_at = clock_timestamp(), claimed_by = excluded.claimed_by, executor_ref = excluded.executor_ref"
        " WHERE tt.claimed_at IS NULL")}
        RETURNING tt.id
    ), claimed AS (
        UPDATE task_tries SET claimed_at = clock_timestamp(), claimed_by = :by, executor_ref = :ref
        WHERE id = :id AND claimed_at IS NULL
        RETURNING id
    )
    SELECT id FROM implicit UNION ALL SELECT id FROM claimed
""")


async def claim_try(conn: AsyncConnection, *, cluster: str, term: int, task_try_id: int, key: TryKey,
                    executor_ref: str, node_id: str) -> bool:
    """Fenced: claim an unclaimed try (``task_try_id``, ``key``: the launch's). False if it was
    already claimed (or does not exist, or its task instance is no longer queued for it).

    Raises :class:`~leoflow.errors.FencedOut` when ``term`` is not the newest.
    """
    await check_term_async(conn, cluster, term)
    row = (await conn.execute(_CLAIM, {"by": claimant(cluster, node_id), "ref": executor_ref,
                                       "id": task_try_id, "dag": key.dag_id, "run": key.run_id,
                                       "task": key.task_id, "try": key.try_number,
                                       "map": key.map_index})).first()
    return row is not None


@dataclass(frozen=True)
class LaunchClaim:
    """What the database knew of a try when its launch was recorded."""

    #: An earlier executor (this leader's or an earlier one's) had already claimed it.
    was_claimed: bool
    #: The try's state before this launch (``cancelling`` when the run was cancelled meanwhile).
    state: str
    #: Evidence that its pod existed: a leader recorded the try running (``started_at``).
    seen_running: bool


_RECORD_REFS = text(f"""
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:refs AS text[]), CAST(:dags AS text[]),
                             CAST(:runs AS text[]), CAST(:tasks AS text[]), CAST(:tries AS int[]),
                             CAST(:maps AS int[]))
                      AS i(id, ref, dag_id, run_id, task_id, try_number, map_index)
    ), implicit AS ({_implicit_rows(
        "SET executor_ref = excluded.executor_ref, claimed_by = excluded.claimed_by,"
        " claimed_at = coalesce(tt.claimed_at, excluded.claimed_at)")}
        RETURNING tt.id, false AS was_claimed, tt.state, tt.started_at IS NOT NULL AS started
    ), before AS (
        SELECT tt.id, tt.claimed_at, tt.state, tt.started_at FROM task_tries tt JOIN input ON input.id = tt.id
        ORDER BY tt.id FOR UPDATE OF tt
    ), recorded AS (
        UPDATE task_tries tt
        SET executor_ref = input.ref, claimed_by = :by, claimed_at = coalesce(tt.claimed_at, clock_timestamp())
        FROM input JOIN before ON before.id = input.id
        WHERE tt.id = input.id
        RETURNING tt.id, before.claimed_at IS NOT NULL AS was_claimed, before.state,
                  before.started_at IS NOT NULL AS started
    )
    SELECT * FROM recorded UNION ALL SELECT * FROM implicit
""")


async def record_launches(conn: AsyncConnection, *, cluster: str, term: int, node_id: str,
                          launches: Sequence[tuple[int, str, TryKey]]) -> dict[int, LaunchClaim]:
    """Fenced: note the pods about to be created: ``(task_try_id, executor_ref, key)`` → claim by id
    (writing the row of a queued try that has none yet, found by its key: ADR 0013).

    Ids that do not exist (nor wait, queued, for their row) are absent from the result. One
    transaction for the whole batch, so a leader launching thousands of pods pays one fence check
    per batch, not per pod.
    """
    await check_term_async(conn, cluster, term)
    if not launches:
        return {}
    rows = await conn.execute(_RECORD_REFS, {
        "ids": [i for i, _, _ in launches], "refs": [r for _, r, _ in launches],
        "dags": [k.dag_id for _, _, k in launches], "runs": [k.run_id for _, _, k in launches],
        "tasks": [k.task_id for _, _, k in launches], "tries": [k.try_number for _, _, k in launches],
        "maps": [k.map_index for _, _, k in launches], "by": claimant(cluster, node_id)})
    return {row[0]: LaunchClaim(was_claimed=bool(row[1]), state=str(row[2]),
                                seen_running=was_seen_running(str(row[2]), bool(row[3])))
            for row in rows}


_UNFINISHED_CLAIMS = text(f"""
    SELECT {TRY_COLUMNS} {TRY_FROM}
    WHERE tt.claimed_at IS NOT NULL AND tt.ended_at IS NULL AND tt.state IN {LIVE_TRIES_SQL}
      AND left(tt.claimed_by, length(:prefix)) = :prefix
    ORDER BY tt.id
""")


async def unfinished_claims(conn: AsyncConnection, cluster: str) -> list[TryRecord]:
    """Tries of ``cluster`` handed to an executor whose end has not been recorded yet."""
    rows = await conn.execute(_UNFINISHED_CLAIMS, {"prefix": claimant_prefix(cluster)})
    return [try_record(r) for r in rows]


_TRY_BY_ID = text(f"SELECT {TRY_COLUMNS} {TRY_FROM} WHERE tt.id = :id")


async def get_try(conn: AsyncConnection, task_try_id: int) -> TryRecord | None:
    row = (await conn.execute(_TRY_BY_ID, {"id": task_try_id})).first()
    return try_record(row) if row is not None else None


_TRIES_BY_KEY = text(f"""
    SELECT {TRY_COLUMNS}
    FROM unnest(CAST(:dags AS text[]), CAST(:runs AS text[]), CAST(:tasks AS text[]), CAST(:tries AS int[]),
                CAST(:maps AS int[]))
         AS k(dag_id, run_id, task_id, try_number, map_index)
    JOIN dag_runs dr ON dr.dag_id = k.dag_id AND dr.run_id = k.run_id
    JOIN task_instances ti ON ti.run_pk = dr.id AND ti.task_id = k.task_id AND ti.map_index = k.map_index
    JOIN task_tries tt ON tt.task_instance_id = ti.id AND tt.try_number = k.try_number
""")


async def tries_by_key(conn: AsyncConnection, keys: Sequence[TryKey]) -> dict[TryKey, TryRecord]:
    """The tries with these keys (missing keys are simply absent from the result)."""
    if not keys:
        return {}
    rows = await conn.execute(_TRIES_BY_KEY, {
        "dags": [k.dag_id for k in keys], "runs": [k.run_id for k in keys],
        "tasks": [k.task_id for k in keys], "tries": [k.try_number for k in keys],
        "maps": [k.map_index for k in keys]})
    records = [try_record(r) for r in rows]
    return {r.key: r for r in records}


_GC_CANDIDATES = text(f"""
    SELECT {TRY_COLUMNS} {TRY_FROM}
    WHERE tt.logs_shipped_at IS NOT NULL AND tt.resource_deleted_at IS NULL
      AND tt.executor_ref IS NOT NULL AND tt.ended_at < now() - make_interval(secs => :retention)
      AND left(tt.claimed_by, length(:prefix)) = :prefix
    ORDER BY tt.ended_at
    LIMIT :limit
""")


async def gc_candidates(conn: AsyncConnection, cluster: str, *, retention: float, limit: int) -> list[TryRecord]:
    """Finished tries of ``cluster`` with settled logs, ended over ``retention`` s ago (database clock)."""
    rows = await conn.execute(_GC_CANDIDATES, {"prefix": claimant_prefix(cluster), "retention": retention,
                                               "limit": limit})
    return [try_record(r) for r in rows]


_MARK_DELETED = text("""
    UPDATE task_tries SET resource_deleted_at = clock_timestamp()
    WHERE id IN :ids AND resource_deleted_at IS NULL
""").bindparams(bindparam("ids", expanding=True))


async def mark_resources_deleted(conn: AsyncConnection, *, cluster: str, term: int,
                                 task_try_ids: Sequence[int]) -> None:
    """Fenced: record that these tries' pods were garbage-collected."""
    await check_term_async(conn, cluster, term)
    if task_try_ids:
        await conn.execute(_MARK_DELETED, {"ids": list(task_try_ids)})


@dataclass(frozen=True)
class QueuedLaunch:
    """A try queued in the database, to be (re)submitted to the executor."""

    task_try_id: int
    task_instance_id: int
    key: TryKey
    version_id: int
    run_pk: int
    conf_json: str
    logical_date: datetime | None
    body_state: str | None = None
    body_reason: str | None = None
    #: A dataset-triggered run's ``triggering_events`` as JSON text; None otherwise.
    triggering_events: str | None = None
    #: The run's data interval; None on runs written before it was stored.
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None


async def queued_tries_after(conn: AsyncConnection, after_id: int, limit: int) -> list[QueuedLaunch]:
    """Queued tries of queued task instances, keyset-paged by task instance id (resubmitted after
    failover) — with their rows, or without when the rows are not written yet (ADR 0013)."""
    rows = await conn.execute(text("""
        SELECT coalesce(tt.id, ti.queued_try_id) AS id, ti.id AS task_instance_id, ti.try_number, ti.task_id,
               r.dag_id, r.run_id, r.dag_version_id, r.id AS run_pk, r.conf::text AS conf, r.logical_date,
               r.body_state, r.body_reason, ti.map_index, r.triggering_events::text AS triggering_events,
               r.data_interval_start, r.data_interval_end
        FROM task_instances ti
        LEFT JOIN task_tries tt ON tt.task_instance_id = ti.id AND tt.try_number = ti.try_number
        JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.state = 'queued' AND ti.id > :after AND coalesce(tt.state, 'queued') = 'queued'
          AND coalesce(tt.id, ti.queued_try_id) IS NOT NULL
        ORDER BY ti.id LIMIT :limit
    """), {"after": after_id, "limit": limit})
    return [QueuedLaunch(int(r.id), int(r.task_instance_id),
                         try_key(r.dag_id, r.run_id, r.task_id, int(r.try_number), r.map_index,
                                 int(r.task_instance_id)),
                         int(r.dag_version_id), int(r.run_pk), str(r.conf), r.logical_date, r.body_state,
                         r.body_reason, r.triggering_events, r.data_interval_start, r.data_interval_end)
            for r in rows]


# --------------------------------------------------------------------------- killing tries

@dataclass(frozen=True)
class TryToKill:
    task_try_id: int
    key: TryKey


async def request_kill(conn: AsyncConnection, tries: Sequence[tuple[int, int]], reason: str) -> None:
    """Flag live tries (ti_id, try_number) ``cancelling``: the leader asks the executor to kill them."""
    if not tries:
        return
    await conn.execute(text("""
        UPDATE task_tries tt SET state = 'cancelling', reason = coalesce(tt.reason, :reason)
        FROM unnest(CAST(:ids AS bigint[]), CAST(:tries AS int[])) AS c(ti_id, try_number)
        WHERE tt.task_instance_id = c.ti_id AND tt.try_number = c.try_number AND tt.state IN ('queued', 'running')
    """), {"ids": [t[0] for t in tries], "tries": [t[1] for t in tries], "reason": reason})


async def tries_to_kill(conn: AsyncConnection, limit: int) -> list[TryToKill]:
    rows = await conn.execute(text("""
        SELECT tt.id, r.dag_id, r.run_id, ti.task_id, tt.try_number, ti.map_index, ti.id AS ti_id
        FROM task_tries tt
        JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk
        WHERE tt.state = 'cancelling'
        ORDER BY tt.id LIMIT :limit
    """), {"limit": limit})
    return [TryToKill(int(r.id), try_key(r.dag_id, r.run_id, r.task_id, int(r.try_number), r.map_index, int(r.ti_id)))
            for r in rows]


async def mark_tries_killed(conn: AsyncConnection, task_try_ids: Sequence[int], now: datetime) -> None:
    await conn.execute(text("""
        UPDATE task_tries SET state = 'cancelled', ended_at = coalesce(ended_at, :now)
        WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'cancelling'
    """), {"ids": list(task_try_ids), "now": now})


# --------------------------------------------------------------------------- what templates read

@dataclass(frozen=True)
class UpstreamTry:
    """A referenced upstream task instance at launch: its state, and its current outputs while ``success``."""

    state: str
    outputs: dict[str, object] | None
    #: A mapped task: its instances in index order (state, outputs), [] when it expanded to nothing;
    #: ``state`` is then ``success`` and ``outputs`` each output name as the list of their values
    #: (None where an instance did not succeed), what ``{{ tasks.T.outputs.K }}`` reads downstream.
    instances: tuple[tuple[str, dict[str, object] | None], ...] | None = None


async def upstream_outputs(conn: AsyncConnection,
                           wanted: Sequence[tuple[int, str]]) -> dict[tuple[int, str], UpstreamTry]:
    """The state and current outputs of task instances (run_pk, task_id), in one read.

    *Current* outputs are those of try ``try_number`` while the instance is ``success`` (ADR 0014):
    a cleared instance has none, whatever its earlier tries wrote.
    """
    if not wanted:
        return {}
    rows = await conn.execute(text("""
        SELECT ti.run_pk, ti.task_id, ti.state, tt.outputs, ti.map_index, ti.map_count
        FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[])) AS w(run_pk, task_id)
        JOIN task_instances ti ON ti.run_pk = w.run_pk AND ti.task_id = w.task_id
        LEFT JOIN task_tries tt ON ti.state = 'success' AND tt.task_instance_id = ti.id
                                AND tt.try_number = ti.try_number
        ORDER BY ti.map_index
    """), {"runs": [w[0] for w in wanted], "tasks": [w[1] for w in wanted]})
    found: dict[tuple[int, str], UpstreamTry] = {}
    mapped: dict[tuple[int, str], list[tuple[str, dict[str, object] | None]]] = {}
    for r in rows:
        key = (int(r.run_pk), str(r.task_id))
        outputs = r.outputs if isinstance(r.outputs, dict) else None
        if r.map_index >= 0 or r.map_count == 0:
            instances = mapped.setdefault(key, [])
            if r.map_index >= 0:
                instances.append((str(r.state), outputs))
        else:
            found[key] = UpstreamTry(str(r.state), outputs)
    for key, instances in mapped.items():
        found[key] = mapped_upstream(instances)
    return found


def mapped_upstream(instances: Sequence[tuple[str, dict[str, object] | None]]) -> UpstreamTry:
    """A mapped task as its downstream reads it: every output as the list of its instances' values."""
    names = sorted({name for _, out in instances if out for name in out})
    outputs: dict[str, object] = {name: [out.get(name) if out is not None and state == "success" else None
                                         for state, out in instances] for name in names}
    return UpstreamTry("success", outputs, tuple(instances))


async def failed_tasks(conn: AsyncConnection, run_pks: Iterable[int]) -> dict[int, list[str]]:
    """The tasks of each run that failed themselves (``failed``; a mapped task's instances as ``T[i]``),
    by task id then index: what ``{{ run.failed_tasks }}`` renders in exit tasks. One read for all."""
    runs = sorted(set(run_pks))
    if not runs:
        return {}
    rows = await conn.execute(text("""
        SELECT run_pk, task_id, map_index FROM task_instances
        WHERE run_pk = ANY(CAST(:runs AS bigint[])) AND state = 'failed'
        ORDER BY run_pk, task_id, map_index
    """), {"runs": runs})
    found: dict[int, list[str]] = {}
    for r in rows:
        found.setdefault(int(r.run_pk), []).append(r.task_id if r.map_index < 0 else f"{r.task_id}[{r.map_index}]")
    return found

"""Stored DAGs: the ``dags`` table — applied, paused, deleted, synced, looked up.

Every function takes a connection inside a transaction the caller owns, and raises
:class:`~leoflow.errors.NotFound` / :class:`~leoflow.errors.Conflict` /
:class:`~leoflow.errors.ValidationFailed` for bad requests; nothing here is fenced, because an
API replica holds no leadership term. The leader's scheduler only ever moves states forward
with compare-and-set, so a user's write that lands between two scheduler steps makes the
scheduler's next CAS a no-op instead of a conflict. ``set_paused`` and ``apply_dag`` send
``NOTIFY leoflow_wakeup`` (:mod:`leoflow.db.connection.wakeup`) so the leader acts at once.

Semantics worth knowing:

- ``apply_dag``: an identical spec (same canonical hash) is a no-op; a changed one creates
  version N+1 and becomes current, runs keep the version they started with. Either way, a
  schedule the leader had stopped (``dags.schedule_error``, a contained scheduler error) is
  re-planned and the error cleared: applying is how a user asks for another try. ``paused`` in the
  spec is honoured when the DAG is created (or re-created after a delete), never on update.
- ``delete_dag`` is a soft delete (``dags.deleted``): the DAG disappears from scheduling and
  triggering, its active runs are cancelled (:func:`leoflow.db.stores.runs.lifecycle.cancel_runs`: their
  live tries are marked ``cancelling`` for the leader to kill — a hard delete would lose that
  instruction), and its history stays readable. Its runs take no more commands: cancel, clear
  and mark answer 404, and a command recorded just before the delete is refused by the leader
  (:func:`dag_state`), so nothing re-opens them. Re-applying the DAG brings it back as a new
  version; API listings should filter ``deleted``.
- ``sync_dags`` applies a set of DAGs as one all-or-nothing operation, inside one transaction
  the caller owns. It locks and reads the DAG rows the sync may touch, and
  :func:`leoflow.model.files.dag_sync.plan_sync` decides what to create, change, adopt, refuse and
  prune (the rules are that module's docstring); the applies are one :func:`apply_dags` (set-based:
  a fixed number of statements for 10,000 DAGs as for one) and each prune a :func:`delete_dag`.
  Syncs are serialised by a transaction-level advisory lock (:data:`SYNC_LOCK`), so a leader's
  sync and a CLI sync never interleave (and cannot deadlock on each other's rows). A dry run
  computes the same plan and writes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import Clock
from leoflow.db import arrays
from leoflow.db.connection.api_pool import reading_cursor
from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.db.fragments import ACTIVE_RUNS_SQL
from leoflow.db.stores.datasets import references as dataset_references
from leoflow.db.stores.runs.lifecycle import cancel_runs
from leoflow.db.stores.waits.references import check_waited_dags
from leoflow.db.tables import Dag, DagVersion
from leoflow.errors import DagOwnershipConflict, NotFound
from leoflow.model.files.dag_files import LocatedDag
from leoflow.model.files.dag_sync import DagChange, StoredDag, SyncOptions, SyncPlan, plan_sync
from leoflow.model.spec.dag import DagSpec
from leoflow.model.spec.params import default_conf
from leoflow.model.spec.timetable import first_scheduled_run


@dataclass(frozen=True)
class ApplyResult:
    dag_id: str
    version: int
    changed: bool


async def apply_dag(conn: AsyncConnection, spec: DagSpec, *, clock: Clock) -> ApplyResult:
    """Create or update a DAG from a validated spec; identical specs change nothing."""
    return (await apply_dags(conn, [spec], clock=clock))[spec.dag_id]


_INSERT_MANY = text("""
    INSERT INTO dags (dag_id, paused, schedule, next_run_at, max_active_tasks, created_at, updated_at)
    SELECT n.dag_id, n.paused, n.schedule, n.next_run_at, n.max_active_tasks, :now, :now
    FROM unnest(CAST(:ids AS text[]), CAST(:paused AS boolean[]), CAST(:schedules AS text[]),
                CAST(:firsts AS timestamptz[]), CAST(:max_tasks AS int[]))
         AS n(dag_id, paused, schedule, next_run_at, max_active_tasks)
    ORDER BY n.dag_id
    ON CONFLICT (dag_id) DO NOTHING
    RETURNING dag_id
""")
_STORED_MANY = text("""
    SELECT d.dag_id, d.deleted, d.schedule_error, v.version, v.spec_hash, v.spec
    FROM dags d LEFT JOIN dag_versions v ON v.id = d.current_version_id
    WHERE d.dag_id = ANY(CAST(:ids AS text[])) ORDER BY d.dag_id FOR UPDATE OF d
""")
_RETRY_SCHEDULES = text("""
    UPDATE dags d SET next_run_at = u.next_run_at, schedule_error = NULL, updated_at = :now
    FROM unnest(CAST(:ids AS text[]), CAST(:firsts AS timestamptz[])) AS u(dag_id, next_run_at)
    WHERE d.dag_id = u.dag_id
""")
_NEXT_VERSIONS = text("""
    SELECT dag_id, max(version) + 1 AS version FROM dag_versions
    WHERE dag_id = ANY(CAST(:ids AS text[])) GROUP BY dag_id
""")
_INSERT_VERSIONS = text("""
    INSERT INTO dag_versions (dag_id, version, spec, spec_hash, default_conf, created_at)
    SELECT n.dag_id, n.version, CAST(n.spec AS jsonb), n.hash, CAST(n.conf AS jsonb), :now
    FROM unnest(CAST(:ids AS text[]), CAST(:versions AS int[]), CAST(:specs AS text[]), CAST(:hashes AS text[]),
                CAST(:confs AS text[])) AS n(dag_id, version, spec, hash, conf)
    RETURNING dag_id, id
""")
#: A changed DAG's row: its new version current, re-planned when its schedule changed (a slot
#: waiting for datasets, ``combine: and``, belongs to the schedule it was planned by), ``paused``
#: from the spec only when it comes back from a delete (the right-hand side reads the old row).
_UPDATE_CHANGED = text("""
    UPDATE dags d SET current_version_id = u.vid, schedule = u.schedule, max_active_tasks = u.max_active_tasks,
        deleted = false, updated_at = :now,
        next_run_at = CASE WHEN u.replan THEN u.next_run_at ELSE d.next_run_at END,
        schedule_error = CASE WHEN u.replan THEN NULL ELSE d.schedule_error END,
        pending_slot_at = CASE WHEN u.replan THEN NULL ELSE d.pending_slot_at END,
        pending_slot_start = CASE WHEN u.replan THEN NULL ELSE d.pending_slot_start END,
        paused = CASE WHEN d.deleted THEN u.paused ELSE d.paused END
    FROM unnest(CAST(:ids AS text[]), CAST(:vids AS bigint[]), CAST(:schedules AS text[]), CAST(:max_tasks AS int[]),
                CAST(:replan AS boolean[]), CAST(:firsts AS timestamptz[]), CAST(:paused AS boolean[]))
         AS u(dag_id, vid, schedule, max_active_tasks, replan, next_run_at, paused)
    WHERE d.dag_id = u.dag_id
""")
#: A changed DAG that neither produces nor consumes datasets: its old references and queued
#: events go (what :func:`~leoflow.db.stores.datasets.references.replace_references` does for it).
_DROP_REFERENCES = text("""
    WITH gone AS (DELETE FROM dataset_references WHERE dag_id = ANY(CAST(:ids AS text[])))
    DELETE FROM dataset_queue WHERE dag_id = ANY(CAST(:ids AS text[]))
""")


def _has_references(spec: DagSpec) -> bool:
    return spec.dataset_schedule is not None or any(t.produces for t in (*spec.tasks, *spec.on_exit))


async def apply_dags(conn: AsyncConnection, specs: Sequence[DagSpec], *, clock: Clock) -> dict[str, ApplyResult]:
    """:func:`apply_dag` for each of ``specs`` (distinct DAG ids), set-based: a fixed number of
    statements whatever their number (plus one per changed DAG that produces or consumes datasets,
    and the ``wait_for`` checks of those that wait for DAGs), and one wake-up for the leader. A
    10,000-file sync was ~80,000 statements one DAG at a time: longer than the request's deadline.

    A ``wait_for`` may name a DAG of the same set: the set's rows exist when the waits are checked.
    """
    if not specs:
        return {}
    now = clock.now()
    # Planned once per distinct schedule: a fleet shares a few crons, and planning one (croniter)
    # was the largest part of a 10,000-DAG sync's CPU. These four fields and ``now`` decide it.
    planned: dict[tuple[object, ...], datetime | None] = {}
    firsts: dict[str, datetime | None] = {}
    for spec in specs:
        key = (spec.schedule, spec.timezone, spec.start_date, spec.end_date)
        if key not in planned:
            planned[key] = first_scheduled_run(spec, now)
        firsts[spec.dag_id] = planned[key]
    ids = [s.dag_id for s in specs]
    created = set((await conn.execute(_INSERT_MANY, {
        "ids": arrays.texts(ids), "paused": arrays.bools(s.paused for s in specs),
        "schedules": arrays.texts(s.schedule for s in specs), "firsts": arrays.timestamps(firsts.values()),
        "max_tasks": arrays.optional_ints(s.max_active_tasks for s in specs), "now": now})).scalars())
    for spec in specs:
        await check_waited_dags(conn, spec)  # a wait_for naming no live DAG: 422 naming the field
    stored = {r["dag_id"]: r for r in (await conn.execute(_STORED_MANY, {"ids": arrays.texts(ids)})).mappings()}
    results: dict[str, ApplyResult] = {}
    retry: list[str] = []
    changed: list[tuple[DagSpec, str, bool]] = []
    for spec in specs:
        dag, digest = stored[spec.dag_id], spec.spec_hash()
        fresh = spec.dag_id in created
        if not fresh and not dag["deleted"] and dag["spec_hash"] == digest:
            if dag["schedule_error"] is not None:  # applying it again asks the leader to retry the schedule
                retry.append(spec.dag_id)
            results[spec.dag_id] = ApplyResult(spec.dag_id, int(dag["version"]), changed=False)
            continue
        replan = (fresh or dag["deleted"] or dag["spec"] is None or dag["schedule_error"] is not None
                  or _schedule_changed(dag["spec"], spec))
        changed.append((spec, digest, replan))
    if retry:
        await conn.execute(_RETRY_SCHEDULES, {"ids": arrays.texts(retry), "now": now,
                                              "firsts": arrays.timestamps(firsts[d] for d in retry)})
    if changed:
        await _store_versions(conn, changed, firsts, created, now, results)
    if retry or changed:
        await notify_wakeup(conn, (changed[0][0].dag_id if changed else retry[0]))  # one wake-up for the set
    return results


async def _store_versions(conn: AsyncConnection, changed: list[tuple[DagSpec, str, bool]],
                          firsts: dict[str, datetime | None], created: set[str], now: datetime,
                          results: dict[str, ApplyResult]) -> None:
    """The new versions of ``changed`` (spec, hash, re-plan), current; their dataset references."""
    specs = [c[0] for c in changed]
    ids = [s.dag_id for s in specs]
    known = {r.dag_id: int(r.version) for r in await conn.execute(_NEXT_VERSIONS, {"ids": arrays.texts(ids)})}
    versions = [known.get(d, 1) for d in ids]
    vids = {r.dag_id: int(r.id) for r in await conn.execute(_INSERT_VERSIONS, {
        "ids": arrays.texts(ids), "versions": arrays.ints(versions), "now": now,
        "specs": arrays.texts(json.dumps(s.to_canonical()) for s in specs),
        "hashes": arrays.texts(c[1] for c in changed),
        "confs": arrays.texts(json.dumps(default_conf(s.params)) for s in specs)})}
    await conn.execute(_UPDATE_CHANGED, {
        "ids": arrays.texts(ids), "vids": arrays.ints(vids[d] for d in ids), "now": now,
        "schedules": arrays.texts(s.schedule for s in specs),
        "max_tasks": arrays.optional_ints(s.max_active_tasks for s in specs),
        "replan": arrays.bools(c[2] for c in changed), "firsts": arrays.timestamps(firsts[d] for d in ids),
        "paused": arrays.bools(s.paused for s in specs)})
    with_references = [s for s in specs if _has_references(s)]
    for spec in with_references:
        await dataset_references.replace_references(conn, spec)
    # A DAG created just now has no references or queued events to drop.
    dropped = [s.dag_id for s in specs if not _has_references(s) and s.dag_id not in created]
    if dropped:
        await conn.execute(_DROP_REFERENCES, {"ids": arrays.texts(dropped)})
    for dag_id, version in zip(ids, versions, strict=True):
        results[dag_id] = ApplyResult(dag_id, version, changed=True)


def _schedule_changed(stored: dict[str, Any], spec: DagSpec) -> bool:
    canonical = spec.to_canonical()
    return any(stored.get(k) != canonical.get(k) for k in ("schedule", "timezone", "catchup", "start_date", "end_date"))


async def set_paused(conn: AsyncConnection, dag_id: str, paused: bool) -> None:
    """Pause (no new scheduled runs; running runs finish) or unpause a DAG."""
    found = (await conn.execute(text(
        "UPDATE dags SET paused = :paused, updated_at = now() WHERE dag_id = :dag_id AND NOT deleted "
        "RETURNING dag_id"), {"dag_id": dag_id, "paused": paused})).first()
    if found is None:
        raise NotFound(f"DAG {dag_id!r} not found")
    await notify_wakeup(conn, dag_id)


async def delete_dag(conn: AsyncConnection, dag_id: str) -> None:
    """Soft-delete a DAG and cancel its active runs (see the module docstring)."""
    found = (await conn.execute(text(
        "UPDATE dags SET deleted = true, next_run_at = NULL, updated_at = now() "
        "WHERE dag_id = :dag_id AND NOT deleted RETURNING dag_id"), {"dag_id": dag_id})).first()
    if found is None:
        raise NotFound(f"DAG {dag_id!r} not found")
    run_pks = list((await conn.execute(text(
        f"SELECT id FROM dag_runs WHERE dag_id = :dag_id AND state IN {ACTIVE_RUNS_SQL} ORDER BY id FOR UPDATE"),
        {"dag_id": dag_id})).scalars())
    await cancel_runs(conn, run_pks, reason="DAG deleted")
    await dataset_references.drop_references(conn, dag_id)
    await notify_wakeup(conn, dag_id)


#: What :func:`dag_state` finds: the DAG exists, it was deleted (or never existed), or another
#: transaction is writing its row right now (a delete, perhaps) and the caller should look again later.
DagState = Literal["live", "deleted", "busy"]


async def dag_state(conn: AsyncConnection, dag_id: str, *, share_lock: bool = False) -> DagState:
    """Whether the DAG ``dag_id`` is live or deleted.

    With ``share_lock`` (the leader applying an operator's command to one of its runs), the row is
    share-locked so no delete commits between this read and the caller's commit, but without
    waiting (``SKIP LOCKED``): the caller already holds the run's row lock, and :func:`delete_dag`
    takes the DAG's row first and the runs' after, so waiting here could deadlock. A row being
    written is answered ``busy``.
    """
    lock = " FOR SHARE SKIP LOCKED" if share_lock else ""
    query = text(f"SELECT deleted FROM dags WHERE dag_id = :dag_id{lock}")
    row = (await conn.execute(query, {"dag_id": dag_id})).first()
    if row is None and share_lock:
        exists = (await conn.execute(text("SELECT 1 FROM dags WHERE dag_id = :dag_id"), {"dag_id": dag_id})).first()
        return "busy" if exists is not None else "deleted"
    return "live" if row is not None and not row.deleted else "deleted"

#: Whether a DAG exists and is not deleted, written once for both kinds of connection.
_DAG_EXISTS = "SELECT EXISTS (SELECT 1 FROM dags WHERE dag_id = {} AND NOT deleted)"
_DAG_EXISTS_SQL = text(_DAG_EXISTS.format(":dag_id"))
_DAG_EXISTS_RAW = _DAG_EXISTS.format("%s")


async def dag_exists(conn: AsyncConnection | psycopg.AsyncConnection[Any], dag_id: str) -> bool:
    """Whether the DAG ``dag_id`` exists and is not deleted: the API's 404 of an empty answer.

    On a store connection, or on a raw one of the API pool (the hot run read holds no other).
    """
    if isinstance(conn, psycopg.AsyncConnection):
        cursor = await reading_cursor(conn).execute(_DAG_EXISTS_RAW, (dag_id,))
        row = await cursor.fetchone()
        return bool(row and row[0])
    return bool((await conn.execute(_DAG_EXISTS_SQL, {"dag_id": dag_id})).scalar())


#: ``pg_advisory_xact_lock`` key of DAG syncs: ASCII 'LEOF', 'SYNC' (the migrations use 'LEOF', 'MIGR').
SYNC_LOCK = (0x4C454F46, 0x53594E43)

_LOCK = text("SELECT pg_advisory_xact_lock(:a, :b)")
_EXISTING = text("""
    SELECT d.dag_id, d.deleted, d.source, v.version, v.spec_hash
    FROM dags d LEFT JOIN dag_versions v ON v.id = d.current_version_id
    WHERE d.dag_id = ANY(:ids)
       OR (NOT d.deleted AND (d.source = :source OR (CAST(:unlabeled AS boolean) AND d.source IS NULL)))
    ORDER BY d.dag_id
    FOR UPDATE OF d
""")
_LABEL = text("""
    UPDATE dags SET source = :source, updated_at = now()
    WHERE dag_id = ANY(:ids) AND source IS DISTINCT FROM :source
""")


async def sync_dags(conn: AsyncConnection, dags: Sequence[LocatedDag], options: SyncOptions, *,
                    clock: Clock) -> SyncPlan:
    """Plan and (unless ``options.dry_run``) apply the sync of ``dags``; see the module docstring.

    Raises DagOwnershipConflict, listing every DAG of the set that another source owns, before
    writing anything.
    """
    await conn.execute(_LOCK, {"a": SYNC_LOCK[0], "b": SYNC_LOCK[1]})
    result = await conn.execute(_EXISTING, {"ids": sorted(d.spec.dag_id for d in dags), "source": options.source,
                                            "unlabeled": options.prune_unlabeled})
    stored = {r.dag_id: StoredDag(r.dag_id, r.deleted, r.source, r.version, r.spec_hash) for r in result}
    decision = plan_sync(dags, stored, options)
    if decision.conflicts:
        raise DagOwnershipConflict(f"{len(decision.conflicts)} DAG(s) belong to another sync source; "
                                   "nothing was applied", list(decision.conflicts))
    changes: list[DagChange] = []
    applied: dict[str, ApplyResult] = {}
    if not options.dry_run:
        applied = await apply_dags(conn, [p.dag.spec for p in decision.applies if p.action != "unchanged"], clock=clock)
    for planned in decision.applies:
        dag, version = planned.dag, planned.version
        if dag.spec.dag_id in applied:
            version = applied[dag.spec.dag_id].version
        changes.append(DagChange(dag.spec.dag_id, planned.action, dag.file, dag.document, version, planned.adopted))
    if not options.dry_run and decision.applies:
        await conn.execute(_LABEL, {"source": options.source, "ids": [p.dag.spec.dag_id for p in decision.applies]})
    for dag_id in decision.deletions:
        if not options.dry_run:
            await delete_dag(conn, dag_id)
        changes.append(DagChange(dag_id, "deleted"))
    return SyncPlan(options, tuple(changes), decision.missing)


async def stop_schedules(conn: AsyncConnection, failures: Sequence[tuple[str, str]], now: datetime) -> None:
    """DAGs (dag_id, reason) whose schedule the scheduler cannot evaluate: no more scheduled runs
    until the DAG is applied again (``apply_dag`` re-plans and clears ``schedule_error``)."""
    if not failures:
        return
    await conn.execute(text("""
        UPDATE dags d SET next_run_at = NULL, schedule_error = c.reason, updated_at = :now
        FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[])) AS c(dag_id, reason)
        WHERE d.dag_id = c.dag_id
    """), {"ids": [f[0] for f in failures], "reasons": [f[1] for f in failures], "now": now})


# --------------------------------------------------------------------------- as the HTTP API shows them

_dags = Dag.__table__
_versions = DagVersion.__table__
_DAG_COLUMNS = (_dags.c.dag_id, _dags.c.paused, _dags.c.schedule, _versions.c.version, _dags.c.next_run_at,
                _dags.c.source, _dags.c.schedule_error, _dags.c.created_at, _dags.c.updated_at)


#: Live DAGs one filtered list request examines at most, in id order, before it answers with
#: what it found and a cursor where it stopped. A filter that keeps few DAGs (``paused``, a
#: failed last run, a prefix under a collation that interleaves ``-``) would otherwise walk the
#: whole table for one page: 100,000 DAGs took tens of milliseconds a page. 2,000 rows of the
#: primary key plus one index probe of ``dag_runs`` each stay within a few milliseconds.
LIST_SCAN_BUDGET = 2_000


@dataclass(frozen=True)
class DagListFilter:
    """What ``GET /api/v2/dags`` keeps: paused or not, an id prefix, the last run's state.

    ``last_run_state`` is a run state or ``"none"`` (a DAG that never ran); the last run is the
    one created last (the highest ``dag_runs.id``), whatever its type.
    """

    paused: bool | None = None
    prefix: str | None = None
    last_run_state: str | None = None

    @property
    def empty(self) -> bool:
        return self.paused is None and self.prefix is None and self.last_run_state is None


@dataclass(frozen=True)
class DagListPage:
    """Up to ``limit + 1`` matching DAGs and, when the scan budget ran out first, the id it ended at."""

    rows: list[dict[str, Any]]
    scanned_to: str | None


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching ids that start with ``prefix``: ``%``, ``_`` and ``\\`` are data."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


#: The characters of a DAG id (``leoflow.model.limits.NAME_RE``): a prefix with any other matches nothing.
_ID_CHARS = re.compile(r"[a-z0-9-]+")
#: The order of the id characters, for :func:`prefix_end`.
_ID_ORDER = "-0123456789abcdefghijklmnopqrstuvwxyz"
#: Whether the database orders ids character by character, '-' < digits < letters, as C and ICU's
#: root collation do; glibc's en_US ignores '-' at first ('ab' < 'a-b'), so there ids that share a
#: prefix are interleaved with ids that do not, and a prefix is no range.
_ORDERS_IDS_BYTEWISE = text("SELECT 'a-b' < 'ab' AND 'a-' < 'a0' AND 'a9' < 'aa' AND 'a' < 'a-'")


def prefix_end(prefix: str) -> str | None:
    """The least id after every id starting with ``prefix`` (ordered as ``_ORDERS_IDS_BYTEWISE``
    checks), or None when no id is (``zz``)."""
    stem = prefix.rstrip("z")
    if not stem:
        return None
    return stem[:-1] + _ID_ORDER[_ID_ORDER.index(stem[-1]) + 1]


#: The schedule a DAG shows: as its current version's spec says it (a cron, ``{datasets: …}``, any
#: other form the spec takes), not the ``dags.schedule`` column, which holds only what the cron
#: planner reads and is null for a DAG that runs on datasets.
_SHOWN_SCHEDULE = "coalesce(v.spec->'schedule', to_jsonb(s.schedule))"


def shown_schedule(spec: object, planned: str | None) -> object:
    """:data:`_SHOWN_SCHEDULE` for a row read in Python: the spec's schedule, else the planned cron."""
    if isinstance(spec, dict) and "schedule" in spec:
        return spec["schedule"]
    return planned


def _list_sql(flt: DagListFilter, *, bounded: bool) -> str:
    # ``dag_id >= %(prefix)s`` lets the scan start where the prefix's ids start: a string sorts after
    # its own prefixes under C and under the libc/ICU collations. ``dag_id < %(end)s`` stops it where
    # they end, when the order allows (``bounded``); otherwise the LIKE decides and the scan
    # budget bounds the walk.
    start = " AND dag_id >= %(prefix)s" if flt.prefix is not None else ""
    if bounded:
        start += " AND dag_id < %(end)s"
    keep = ["true"]
    if flt.paused is not None:
        keep.append("s.paused = %(paused)s")
    if flt.prefix is not None:
        keep.append("s.dag_id LIKE %(pattern)s ESCAPE '\\'")
    if flt.last_run_state == "none":
        keep.append("r.state IS NULL")
    elif flt.last_run_state is not None:
        keep.append("r.state = %(state)s")
    # The window is not materialised: the page's LIMIT stops the walk as soon as enough DAGs
    # matched (a dense filter reads about ``limit`` rows, not the whole budget).
    return f"""
        SELECT s.dag_id, s.paused, {_SHOWN_SCHEDULE} AS schedule, v.version, s.next_run_at, s.source, s.schedule_error,
               s.created_at, s.updated_at, r.run_id AS last_run_id, r.state AS last_run_state
        FROM ({_window_sql(start)}) s
        LEFT JOIN LATERAL (SELECT run_id, state FROM dag_runs WHERE dag_runs.dag_id = s.dag_id
                           ORDER BY id DESC LIMIT 1) r ON true
        LEFT JOIN dag_versions v ON v.id = s.current_version_id
        WHERE {" AND ".join(keep)}
        ORDER BY s.dag_id LIMIT %(limit)s
    """


def _window_sql(start: str) -> str:
    """The live DAGs one request may examine: up to ``%(scan)s`` after ``%(after)s``, in id order."""
    return ("SELECT dag_id, paused, schedule, current_version_id, next_run_at, source, schedule_error, "
            f"created_at, updated_at FROM dags WHERE NOT deleted AND dag_id > %(after)s{start} "
            "ORDER BY dag_id LIMIT %(scan)s")


def _window_end_sql(flt: DagListFilter, *, bounded: bool) -> str:
    """How many DAGs the window held and its last id: where a short page's next page starts."""
    start = ((" AND dag_id >= %(prefix)s" if flt.prefix is not None else "")
             + (" AND dag_id < %(end)s" if bounded else ""))
    return f"SELECT count(*) AS scanned, max(dag_id) AS scanned_to FROM ({_window_sql(start)}) w"


def _iso(column: str) -> str:
    """A timestamp as Python's ``isoformat()`` writes it in UTC (what the Python-rendered routes
    show): six fraction digits, or none on a whole second. PostgreSQL's own JSON drops trailing
    zeros (``.23975``), which Python before 3.11 cannot parse."""
    return (f"to_char({column} AT TIME ZONE 'UTC', CASE WHEN date_trunc('second', {column}) = {column} "
            """THEN 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"' ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"' END)""")


#: One DAG of the list as the API shows it: the fields of the ``Dag`` schema.
_DAG_JSON = f"""json_build_object(
    'dag_id', p.dag_id, 'paused', p.paused, 'schedule', p.schedule, 'version', p.version,
    'next_run_at', {_iso("p.next_run_at")}, 'source', p.source, 'schedule_error', p.schedule_error,
    'created_at', {_iso("p.created_at")}, 'updated_at', {_iso("p.updated_at")}, 'last_run_id', p.last_run_id,
    'last_run_state', p.last_run_state)"""


def _document_sql(flt: DagListFilter, *, bounded: bool) -> str:
    """The page rendered by PostgreSQL: the first ``%(page)s`` matches as a JSON array, how many
    matched (``%(page)s + 1`` means there is more) and the page's last id (the next cursor's)."""
    return f"""
        SELECT coalesce(json_agg({_DAG_JSON} ORDER BY p.dag_id) FILTER (WHERE p.n <= %(page)s), '[]')::text,
               count(*), max(p.dag_id) FILTER (WHERE p.n <= %(page)s)
        FROM (SELECT l.*, row_number() OVER (ORDER BY l.dag_id) AS n FROM ({_list_sql(flt, bounded=bounded)}) l) p
    """


@dataclass(frozen=True)
class DagListDocument:
    """A page of the DAG list as JSON text (``items``), and where the next page starts, if anywhere:
    after the page's last DAG when more matched, else where the scan budget ran out (``next_after``)."""

    items: str
    next_after: str | None


#: Per database (host, port, name): whether it orders ids bytewise (:data:`_ORDERS_IDS_BYTEWISE`).
#: A database's collation does not change under a running replica, and asking it on every prefix
#: request was one more round trip of the hottest list.
_BYTEWISE: dict[tuple[str, int, str], bool] = {}


async def _orders_ids_bytewise(conn: psycopg.AsyncConnection[Any]) -> bool:
    key = (conn.info.host, conn.info.port, conn.info.dbname)
    known = _BYTEWISE.get(key)
    if known is None:
        cursor = await reading_cursor(conn).execute(str(_ORDERS_IDS_BYTEWISE))
        row = await cursor.fetchone()
        known = _BYTEWISE[key] = bool(row and row[0])
    return known


async def list_dags(conn: psycopg.AsyncConnection[Any], *, after: str | None, limit: int,
                    where: DagListFilter | None = None) -> DagListDocument:
    """Live (not deleted) DAGs ordered by id after ``after`` that ``where`` keeps, up to ``limit``,
    rendered by PostgreSQL on a raw connection of the API pool (as the hot run read is: no row
    objects, no datetime conversion, no ``json.dumps`` in the replica).

    Unfiltered, that is one range of the primary key. Filtered, at most ``LIST_SCAN_BUDGET`` DAGs
    are examined (each with one probe of ``ix_dag_runs_dag_id_id`` for its last run); when that
    budget ends before ``limit + 1`` matched, ``next_after`` says where, and the caller's next
    page starts there — a page may then hold fewer than ``limit`` items, even none.
    """
    where = where or DagListFilter()
    scan = limit + 1 if where.empty else max(LIST_SCAN_BUDGET, limit + 1)
    params: dict[str, Any] = {"after": after or "", "scan": scan, "limit": limit + 1, "page": limit}
    if where.paused is not None:
        params["paused"] = where.paused
    end = None
    if where.prefix is not None:
        if not _ID_CHARS.fullmatch(where.prefix):
            return DagListDocument("[]", None)  # no id holds '%', '_', capitals, ...
        params.update(prefix=where.prefix, pattern=like_prefix(where.prefix))
        end = prefix_end(where.prefix)
        if end is not None and await _orders_ids_bytewise(conn):
            params["end"] = end
        else:
            end = None
    if where.last_run_state not in (None, "none"):
        params["state"] = where.last_run_state
    bounded = end is not None
    cursor = reading_cursor(conn)
    await cursor.execute(_document_sql(where, bounded=bounded), params)
    row = await cursor.fetchone()
    assert row is not None  # an aggregate answers one row
    items, found, last_id = str(row[0]), int(row[1]), row[2]
    if found > limit:
        return DagListDocument(items, last_id)
    if where.empty:
        return DagListDocument(items, None)
    await cursor.execute(_window_end_sql(where, bounded=bounded), params)
    window = await cursor.fetchone()
    assert window is not None
    return DagListDocument(items, window[1] if window[0] >= scan else None)


async def get_dag(conn: AsyncConnection, dag_id: str) -> dict[str, Any] | None:
    """One live DAG with the spec of its current version."""
    query = (select(*_DAG_COLUMNS, _versions.c.spec, _dags.c.pending_slot_at, _dags.c.pending_slot_start)
             .select_from(_dags.outerjoin(_versions, _versions.c.id == _dags.c.current_version_id))
             .where(_dags.c.dag_id == dag_id, _dags.c.deleted.is_(False)))
    row = (await conn.execute(query)).first()
    if row is None:
        return None
    dag = dict(row._mapping)
    dag["schedule"] = shown_schedule(dag["spec"], dag["schedule"])
    # combine: and — the cron slot waiting for the DAG's datasets (the dashboard's "why not started").
    slot_at, slot_start = dag.pop("pending_slot_at"), dag.pop("pending_slot_start")
    dag["pending_slot"] = None if slot_at is None else {"logical_date": slot_at, "data_interval_start": slot_start}
    return dag


async def named_teams(conn: AsyncConnection, dag_ids: Sequence[str]) -> dict[str, str | None]:
    """``{dag_id: team}`` for each stored DAG of ``dag_ids``: the team its current version's spec
    names (``team:``; None: none, its DAG-id prefix decides). The API's authorization asks this for
    a route's DAG or a list's page and caches the answers (:class:`leoflow.api.access.DagOwners`)."""
    if not dag_ids:
        return {}
    rows = await conn.execute(text("""
        SELECT d.dag_id, v.spec->>'team' AS team
        FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
        WHERE d.dag_id = ANY(CAST(:ids AS text[]))
    """), {"ids": list(dag_ids)})
    return {r.dag_id: r.team for r in rows}


async def live_runs(conn: AsyncConnection, dag_id: str, *, limit: int = 10) -> list[str]:
    """Run ids of ``dag_id`` (at most ``limit``, oldest first) with a task queued, running or being
    cancelled: the tries that have, or may get, a pod. Moving the DAG to another team (another
    namespace) is refused while there are any (:func:`leoflow.api.access.refuse_live_move`)."""
    rows = await conn.execute(text("""
        SELECT r.run_id FROM dag_runs r
        WHERE r.dag_id = :d AND EXISTS (
            SELECT 1 FROM task_instances ti
            WHERE ti.run_pk = r.id AND ti.state IN ('queued', 'running', 'cancelling'))
        ORDER BY r.id LIMIT :n
    """), {"d": dag_id, "n": limit})
    return [r.run_id for r in rows]

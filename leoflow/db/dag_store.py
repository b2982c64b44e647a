"""DAG and run writes made on behalf of users (the HTTP API, on any replica).

Every function takes an ``AsyncConnection`` inside a transaction the caller owns, and raises
:class:`~leoflow.errors.NotFound` / :class:`~leoflow.errors.Conflict` /
:class:`~leoflow.errors.ValidationFailed` for bad requests; nothing here is fenced, because an
API replica holds no leadership term. The leader's scheduler only ever moves states forward
with compare-and-set, so a user's write that lands between two scheduler steps makes the
scheduler's next CAS a no-op instead of a conflict.

Wake-up channel: ``trigger_run``, ``cancel_run``, ``set_paused`` and ``apply_dag`` send
``NOTIFY leoflow_wakeup`` (:mod:`leoflow.db.connection.wakeup`) so the leader acts at once.

Semantics worth knowing:

- ``apply_dag``: an identical spec (same canonical hash) is a no-op; a changed one creates
  version N+1 and becomes current, runs keep the version they started with. Either way, a
  schedule the leader had stopped (``dags.schedule_error``, a contained scheduler error) is
  re-planned and the error cleared: applying is how a user asks for another try. ``paused`` in the
  spec is honoured when the DAG is created (or re-created after a delete), never on update.
- ``delete_dag`` is a soft delete (``dags.deleted``): the DAG disappears from scheduling and
  triggering, its active runs are cancelled (their live tries are marked ``cancelling`` for the
  leader to kill — a hard delete would lose that instruction), and its history stays readable.
  Its runs take no more commands: cancel, clear and mark answer 404, and a command recorded just
  before the delete is refused by the leader (:func:`dag_state`), so nothing re-opens them.
  Re-applying the DAG brings it back as a new version; API listings should filter ``deleted``.
- Runs start ``queued``; their task instances are created by the leader when the run starts
  (``max_active_runs`` permitting), so a queued run has no task instances yet.
- Manual runs of a paused DAG are allowed and run: pausing stops *scheduled* runs only.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import Clock
from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.db.fragments import ACTIVE_RUNS_SQL, ACTIVE_TASKS_SQL
from leoflow.db.queued_tries import cancel_implicit_sql
from leoflow.errors import Conflict, NotFound
from leoflow.model.params import default_conf
from leoflow.model.run_ids import manual_run_id
from leoflow.model.run_request import check_conf, check_run_id
from leoflow.model.spec import DagSpec
from leoflow.model.timetable import first_scheduled_run


@dataclass(frozen=True)
class ApplyResult:
    dag_id: str
    version: int
    changed: bool


async def apply_dag(conn: AsyncConnection, spec: DagSpec, *, clock: Clock) -> ApplyResult:
    """Create or update a DAG from a validated spec; identical specs change nothing."""
    now = clock.now()
    digest = spec.spec_hash()
    created = (await conn.execute(text("""
        INSERT INTO dags (dag_id, paused, schedule, next_run_at, max_active_tasks, created_at, updated_at)
        VALUES (:dag_id, :paused, :schedule, :next_run_at, :max_active_tasks, :now, :now)
        ON CONFLICT (dag_id) DO NOTHING
        RETURNING dag_id
    """), {"dag_id": spec.dag_id, "paused": spec.paused, "schedule": spec.schedule,
           "next_run_at": first_scheduled_run(spec, now), "max_active_tasks": spec.max_active_tasks,
           "now": now})).first() is not None
    dag = (await conn.execute(text("""
        SELECT d.deleted, d.schedule_error, v.version, v.spec_hash, v.spec
        FROM dags d LEFT JOIN dag_versions v ON v.id = d.current_version_id
        WHERE d.dag_id = :dag_id FOR UPDATE OF d
    """), {"dag_id": spec.dag_id})).mappings().one()
    if not created and not dag["deleted"] and dag["spec_hash"] == digest:
        if dag["schedule_error"] is not None:  # applying it again asks the leader to retry the schedule
            await conn.execute(text(
                "UPDATE dags SET next_run_at = :next_run_at, schedule_error = NULL, updated_at = :now "
                "WHERE dag_id = :dag_id"), {"dag_id": spec.dag_id, "next_run_at": first_scheduled_run(spec, now),
                                            "now": now})
            await notify_wakeup(conn, spec.dag_id)
        return ApplyResult(spec.dag_id, int(dag["version"]), changed=False)

    version = int((await conn.execute(text(
        "SELECT coalesce(max(version), 0) + 1 FROM dag_versions WHERE dag_id = :dag_id"),
        {"dag_id": spec.dag_id})).scalar_one())
    version_id = (await conn.execute(text("""
        INSERT INTO dag_versions (dag_id, version, spec, spec_hash, default_conf, created_at)
        VALUES (:dag_id, :version, CAST(:spec AS jsonb), :hash, CAST(:default_conf AS jsonb), :now) RETURNING id
    """), {"dag_id": spec.dag_id, "version": version, "spec": json.dumps(spec.to_canonical()),
           "hash": digest, "default_conf": json.dumps(default_conf(spec.params)), "now": now})).scalar_one()

    replan = (created or dag["deleted"] or dag["spec"] is None or dag["schedule_error"] is not None
              or _schedule_changed(dag["spec"], spec))
    params: dict[str, Any] = {"dag_id": spec.dag_id, "vid": version_id, "schedule": spec.schedule, "now": now,
                              "max_active_tasks": spec.max_active_tasks}
    sets = ("current_version_id = :vid, schedule = :schedule, max_active_tasks = :max_active_tasks, "
            "deleted = false, updated_at = :now")
    if replan:
        sets += ", next_run_at = :next_run_at, schedule_error = NULL"
        params["next_run_at"] = first_scheduled_run(spec, now)
    if dag["deleted"]:
        sets += ", paused = :paused"
        params["paused"] = spec.paused
    await conn.execute(text(f"UPDATE dags SET {sets} WHERE dag_id = :dag_id"), params)
    await notify_wakeup(conn, spec.dag_id)
    return ApplyResult(spec.dag_id, version, changed=True)


def _schedule_changed(stored: dict[str, Any], spec: DagSpec) -> bool:
    canonical = spec.to_canonical()
    return any(stored.get(k) != canonical[k] for k in ("schedule", "timezone", "catchup", "start_date"))


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


async def trigger_run(conn: AsyncConnection, dag_id: str, *, run_id: str | None, conf: dict[str, Any],
                      clock: Clock, run_timeout_seconds: float | None = None) -> str:
    """Queue a manual run; returns its run id. Conflict if ``run_id`` exists, NotFound if no DAG.

    ``run_timeout_seconds`` (already validated) overrides the DAG's run deadline for this run.
    """
    if run_id is not None:
        check_run_id(run_id)
    conf_json = json.dumps(check_conf(conf))
    dag = (await conn.execute(text(
        "SELECT current_version_id FROM dags WHERE dag_id = :dag_id AND NOT deleted"),
        {"dag_id": dag_id})).first()
    if dag is None or dag[0] is None:
        raise NotFound(f"DAG {dag_id!r} not found")
    now = clock.now().astimezone(UTC)
    wanted = run_id or manual_run_id(now)
    for _ in range(3):
        inserted = (await conn.execute(text("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                                  created_at, updated_at, run_timeout_seconds)
            VALUES (:dag_id, :run_id, :vid, 'manual', :now, 'queued', CAST(:conf AS jsonb), :now, :now, :timeout)
            ON CONFLICT (dag_id, run_id) DO NOTHING RETURNING run_id
        """), {"dag_id": dag_id, "run_id": wanted, "vid": dag[0], "now": now, "conf": conf_json,
               "timeout": run_timeout_seconds})).first()
        if inserted is not None:
            await notify_wakeup(conn, dag_id)
            return wanted
        if run_id is not None:
            raise Conflict(f"run {run_id!r} of DAG {dag_id!r} already exists")
        # Two generated ids in the same microsecond: add a random suffix and try again.
        wanted = f"{manual_run_id(now)}_{secrets.token_hex(3)}"
    raise Conflict(f"could not allocate a unique run id for DAG {dag_id!r}")


async def cancel_run(conn: AsyncConnection, dag_id: str, run_id: str) -> None:
    """Cancel a queued or running run and its unfinished tasks; Conflict if it already ended,
    NotFound if it or its DAG does not exist (a deleted DAG's runs take no commands)."""
    row = (await conn.execute(text(
        "SELECT r.id, r.state FROM dag_runs r JOIN dags d ON d.dag_id = r.dag_id AND NOT d.deleted "
        "WHERE r.dag_id = :dag_id AND r.run_id = :run_id FOR UPDATE OF r"),
        {"dag_id": dag_id, "run_id": run_id})).first()
    if row is None:
        if await dag_state(conn, dag_id) != "live":
            raise NotFound(f"DAG {dag_id!r} not found")
        raise NotFound(f"run {run_id!r} of DAG {dag_id!r} not found")
    if row.state not in ("queued", "running"):
        raise Conflict(f"run {run_id!r} of DAG {dag_id!r} already ended ({row.state})")
    await cancel_runs(conn, [row.id])
    await notify_wakeup(conn, dag_id)


async def cancel_runs(conn: AsyncConnection, run_pks: list[int], *, reason: str = "run cancelled") -> None:
    """Cancel runs, their unfinished task instances, and flag their live tries for the executor."""
    if not run_pks:
        return
    await conn.execute(text(f"""
        UPDATE dag_runs SET state = 'cancelled', ended_at = now(), updated_at = now(), reason = :reason
        WHERE id = ANY(:ids) AND state IN {ACTIVE_RUNS_SQL}
    """), {"ids": run_pks, "reason": reason})
    await conn.execute(text(f"""
        WITH cancelled AS (
            UPDATE task_instances SET state = 'cancelled', ended_at = now(), updated_at = now(),
                   reason = :reason, next_try_at = NULL, timeout_at = NULL
            WHERE run_pk = ANY(:ids) AND state IN {ACTIVE_TASKS_SQL}
            RETURNING id
        ), implicit AS ({cancel_implicit_sql("cancelled", ":reason")})
        UPDATE task_tries tt SET state = 'cancelling', reason = :reason
        FROM cancelled c
        WHERE tt.task_instance_id = c.id AND tt.state IN ('queued', 'running')
    """), {"ids": run_pks, "reason": reason})

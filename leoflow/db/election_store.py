"""Every SQL statement of the election: lock connection, fencing terms, membership, status.

Two halves:

- **Lock connection** (synchronous psycopg, autocommit, one dedicated session per replica): the
  session setup, the safety probes, the advisory lock itself, the ownership keepalive and the
  acquire/release transactions that start and end a fencing term. These run in the elector's
  thread, never in the asyncio loop.
- **Cluster views** (SQLAlchemy ``AsyncConnection``): who leads according to the database's
  truth, membership heartbeats, the event log.

Failure semantics: functions raise the driver's exceptions unchanged (``psycopg.Error`` /
``sqlalchemy.exc.DBAPIError``); the caller (elector, membership loop) decides whether that
means "step down", "retry" or "report". Nothing here retries on its own.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.model.lock_key import election_lock_key, pg_locks_ids

LOCK_APP_PREFIX = "leoflow-lock:"

# --------------------------------------------------------------------------- lock connection

_HOLDS_KEY = """
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = %s::oid AND objid = %s::oid AND objsubid = 2
   AND granted AND pid = pg_backend_pid()
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def configure_session(conn: psycopg.Connection[Any], *, lock_timeout_ms: int, keepalive_idle: int,
                      keepalive_interval: int, keepalive_count: int, user_timeout_ms: int) -> None:
    """Server-side dead-client detection for the lock session (see ADR 0002 for the inequality).

    ``lock_timeout`` bounds each blocking ``pg_advisory_lock`` wait of a follower (the poll
    interval); ``statement_timeout`` is off because that wait is deliberate.
    """
    for name, value in (("tcp_keepalives_idle", keepalive_idle),
                        ("tcp_keepalives_interval", keepalive_interval),
                        ("tcp_keepalives_count", keepalive_count),
                        ("tcp_user_timeout", user_timeout_ms),
                        ("idle_session_timeout", 0),
                        ("idle_in_transaction_session_timeout", 0),
                        ("statement_timeout", 0),
                        ("lock_timeout", lock_timeout_ms)):
        conn.execute(f"SET {name} = {int(value)}")


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def in_recovery(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


def probe_backend_pid_in_transaction(conn: psycopg.Connection[Any]) -> int:
    """The backend pid seen by a *second* client while it holds a transaction open.

    Used to detect transaction pooling: through such a pooler the idle lock session's backend is
    handed to the next client, so both report the same pid.
    """
    with conn.transaction():
        return backend_pid(conn)


def try_lock(conn: psycopg.Connection[Any], cluster: str) -> bool:
    """``pg_try_advisory_lock``: never waits."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", election_lock_key(cluster)).fetchone()
    return bool(row and row[0])


def wait_lock(conn: psycopg.Connection[Any], cluster: str) -> bool:
    """Block in ``pg_advisory_lock`` for at most the session's ``lock_timeout``; True once granted.

    A waiting follower is queued by the server's lock manager, so it is granted the lock the
    moment the holder's session ends — no polling needed for the fast path.
    """
    try:
        conn.execute("SELECT pg_advisory_lock(%s, %s)", election_lock_key(cluster))
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def holds_lock(conn: psycopg.Connection[Any], cluster: str) -> bool:
    """Ownership keepalive: does *this backend pid* hold the cluster's key right now?"""
    row = conn.execute(_HOLDS_KEY, pg_locks_ids(cluster)).fetchone()
    return bool(row and row[0] >= 1)


def unlock(conn: psycopg.Connection[Any], cluster: str) -> bool:
    row = conn.execute("SELECT pg_advisory_unlock(%s, %s)", election_lock_key(cluster)).fetchone()
    return bool(row and row[0])


def start_term(conn: psycopg.Connection[Any], cluster: str, node_id: str, details: dict[str, Any],
               *, lock_timeout: float) -> int:
    """Record a new fencing term for the lock holder; returns it. One transaction.

    The ``FOR UPDATE`` on the cluster's ``cluster_leadership`` row comes first: it waits for every
    fenced write transaction of older terms (they hold the row ``FOR SHARE``) so that each of them
    is ordered before the new term, and raises ``LockNotAvailable`` after ``lock_timeout``.
    """
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}")
        conn.execute("SELECT term FROM cluster_leadership WHERE cluster = %s FOR UPDATE", (cluster,))
        # Terms that never recorded their end (crash, partition) end now, at the latest; the
        # replica that held one overwrites this with the moment it stopped, once it reconnects.
        conn.execute("UPDATE leader_terms SET ended_at = clock_timestamp(), end_reason = 'superseded'"
                     " WHERE cluster = %s AND ended_at IS NULL", (cluster,))
        row = conn.execute(
            "INSERT INTO leader_terms (cluster, node_id, backend_pid) VALUES (%s, %s, pg_backend_pid())"
            " RETURNING term", (cluster, node_id)).fetchone()
        assert row is not None
        term = int(row[0])
        updated = conn.execute(
            "UPDATE cluster_leadership SET term = %s, node_id = %s, since = clock_timestamp()"
            " WHERE cluster = %s", (term, node_id, cluster)).rowcount
        if not updated:
            conn.execute("INSERT INTO cluster_leadership (cluster, term, node_id, since)"
                         " VALUES (%s, %s, %s, clock_timestamp())", (cluster, term, node_id))
        _insert_event(conn, cluster, "leader_elected", node_id, term, details)
    return term


def blocking_fenced_writers(conn: psycopg.Connection[Any], older_than: float) -> list[int]:
    """Sessions holding a row lock on ``cluster_leadership`` in a transaction open > ``older_than`` s.

    Only fenced write transactions take that lock; one stuck that long belongs to an older term
    whose process is frozen (SIGSTOP, hung host) and would otherwise block the new term forever.
    """
    rows = conn.execute(
        "SELECT DISTINCT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'relation' AND l.relation = 'cluster_leadership'::regclass"
        "   AND l.mode = 'RowShareLock' AND l.granted AND l.pid <> pg_backend_pid()"
        "   AND a.xact_start < clock_timestamp() - make_interval(secs => %s)", (older_than,)).fetchall()
    return [int(r[0]) for r in rows]


def stale_holder(conn: psycopg.Connection[Any], cluster: str, silent_for: float) -> int | None:
    """The pid of a lock holder whose session ran no statement for ``silent_for`` seconds.

    A healthy leader runs its keepalive every ``LEOFLOW_KEEPALIVE_INTERVAL``; one silent for
    longer than twice its lease has already fenced itself (ADR 0002), but its TCP session may
    look alive to the server (a frozen process, a middlebox that keeps the socket open).
    """
    row = conn.execute(
        "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND l.objid = %s::oid"
        "   AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid()"
        "   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "   AND coalesce(a.state_change, a.backend_start) < clock_timestamp() - make_interval(secs => %s)"
        "   AND coalesce(a.query_start, a.backend_start) < clock_timestamp() - make_interval(secs => %s)",
        (*pg_locks_ids(cluster), silent_for, silent_for)).fetchone()
    return int(row[0]) if row else None


def terminate_backend(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
    return bool(row and row[0])


def end_term(conn: psycopg.Connection[Any], cluster: str, node_id: str, term: int, kind: str,
             reason: str, *, stopped_at: datetime | None) -> None:
    """Close ``term`` in the history and log ``leader_released``/``leader_lost``. One transaction.

    ``stopped_at`` is when the replica stopped acting, if that was earlier than now (a loss
    recorded after reconnecting); it replaces the ``superseded`` guess a successor wrote.
    """
    with conn.transaction():
        conn.execute("UPDATE leader_terms SET ended_at = coalesce(%s, clock_timestamp()), end_reason = %s"
                     " WHERE term = %s AND (ended_at IS NULL OR end_reason = 'superseded')",
                     (stopped_at, reason, term))
        details: dict[str, Any] = {"reason": reason}
        if stopped_at is not None:
            details["stopped_at"] = stopped_at.isoformat()
        _insert_event(conn, cluster, kind, node_id, term, details, ts=stopped_at)


def record_event(conn: psycopg.Connection[Any], cluster: str, kind: str, node_id: str | None,
                 term: int | None, details: dict[str, Any]) -> None:
    _insert_event(conn, cluster, kind, node_id, term, details)


def _insert_event(conn: psycopg.Connection[Any], cluster: str, kind: str, node_id: str | None,
                  term: int | None, details: dict[str, Any], *, ts: datetime | None = None) -> None:
    conn.execute("INSERT INTO cluster_events (cluster, ts, kind, node_id, term, details)"
                 " VALUES (%s, coalesce(%s, clock_timestamp()), %s, %s, %s, %s::jsonb)",
                 (cluster, ts, kind, node_id, term, json.dumps(details)))


# --------------------------------------------------------------------------- cluster views (async)

_LEADER = text("""
SELECT t.node_id, t.term, t.acquired_at AS since, n.api_url
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
  JOIN cluster_leadership cl ON cl.cluster = :cluster
  JOIN leader_terms t ON t.term = cl.term AND t.backend_pid = l.pid
  LEFT JOIN cluster_nodes n ON n.cluster = :cluster AND n.node_id = t.node_id
 WHERE l.locktype = 'advisory' AND l.classid = CAST(:classid AS oid) AND l.objid = CAST(:objid AS oid)
   AND l.objsubid = 2 AND l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND a.application_name LIKE 'leoflow-lock:%'
""")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def current_leader(conn: AsyncConnection, cluster: str) -> dict[str, Any] | None:
    """The granted lock holder joined with the newest term recorded by that very backend."""
    classid, objid = pg_locks_ids(cluster)
    row = (await conn.execute(_LEADER, {"cluster": cluster, "classid": classid, "objid": objid})).first()
    if row is None:
        return None
    return {"node_id": row.node_id, "term": int(row.term), "since": _iso(row.since), "api_url": row.api_url}


async def list_nodes(conn: AsyncConnection, cluster: str) -> list[dict[str, Any]]:
    rows = (await conn.execute(text(
        "SELECT node_id, api_url, version, started_at, last_seen, is_leader, state FROM cluster_nodes"
        " WHERE cluster = :cluster ORDER BY node_id"), {"cluster": cluster})).all()
    return [{"node_id": r.node_id, "api_url": r.api_url, "version": r.version,
             "started_at": _iso(r.started_at), "last_seen": _iso(r.last_seen),
             "is_leader": bool(r.is_leader), "state": r.state} for r in rows]


async def list_events(conn: AsyncConnection, cluster: str, limit: int,
                      before_id: int | None) -> list[dict[str, Any]]:
    rows = (await conn.execute(text(
        "SELECT id, ts, kind, node_id, term, details FROM cluster_events WHERE cluster = :cluster"
        " AND (CAST(:before AS bigint) IS NULL OR id < CAST(:before AS bigint))"
        " ORDER BY id DESC LIMIT :limit"), {"cluster": cluster, "before": before_id, "limit": limit})).all()
    return [{"id": int(r.id), "ts": _iso(r.ts), "kind": r.kind, "node_id": r.node_id,
             "term": int(r.term) if r.term is not None else None, "details": r.details or {}} for r in rows]


async def heartbeat(conn: AsyncConnection, cluster: str, node_id: str, *, api_url: str, version: str,
                    is_leader: bool) -> bool:
    """Upsert this replica's membership row; True when it (re)joined (new row or was down)."""
    previous = (await conn.execute(text(
        "SELECT state FROM cluster_nodes WHERE cluster = :cluster AND node_id = :node FOR UPDATE"),
        {"cluster": cluster, "node": node_id})).scalar()
    params = {"cluster": cluster, "node": node_id, "url": api_url, "version": version, "leader": is_leader}
    if previous is None:
        await conn.execute(text(
            "INSERT INTO cluster_nodes (cluster, node_id, api_url, version, started_at, last_seen,"
            " is_leader, state) VALUES (:cluster, :node, :url, :version, now(), now(), :leader, 'up')"
            " ON CONFLICT (cluster, node_id) DO UPDATE SET last_seen = now(), is_leader = :leader,"
            " state = 'up', api_url = :url, version = :version"), params)
    else:
        await conn.execute(text(
            "UPDATE cluster_nodes SET last_seen = now(), is_leader = :leader, state = 'up', api_url = :url,"
            " version = :version WHERE cluster = :cluster AND node_id = :node"), params)
    joined = previous is None or previous == "down"
    if joined:
        await _event_async(conn, cluster, "node_joined", node_id, None, {"api_url": api_url, "version": version})
    return joined


async def restart_membership(conn: AsyncConnection, cluster: str, node_id: str) -> None:
    """A process (re)starting under a node id: new ``started_at``."""
    await conn.execute(text("UPDATE cluster_nodes SET started_at = now() WHERE cluster = :cluster"
                            " AND node_id = :node"), {"cluster": cluster, "node": node_id})


async def mark_down(conn: AsyncConnection, cluster: str, silent_for: float) -> list[str]:
    """Mark replicas unseen for ``silent_for`` seconds down and log ``node_left`` for each."""
    rows = (await conn.execute(text(
        "UPDATE cluster_nodes SET state = 'down', is_leader = false WHERE cluster = :cluster"
        " AND state = 'up' AND last_seen < now() - make_interval(secs => :secs) RETURNING node_id"),
        {"cluster": cluster, "secs": silent_for})).all()
    left = [r.node_id for r in rows]
    for node in left:
        await _event_async(conn, cluster, "node_left", node, None, {"reason": "heartbeat timeout"})
    return left


async def leave(conn: AsyncConnection, cluster: str, node_id: str) -> None:
    """Graceful exit: mark this replica down at once."""
    rows = (await conn.execute(text(
        "UPDATE cluster_nodes SET state = 'down', is_leader = false WHERE cluster = :cluster"
        " AND node_id = :node AND state = 'up' RETURNING node_id"), {"cluster": cluster, "node": node_id})).all()
    if rows:
        await _event_async(conn, cluster, "node_left", node_id, None, {"reason": "shutdown"})


async def record_event_async(conn: AsyncConnection, cluster: str, kind: str, node_id: str | None,
                             term: int | None, details: dict[str, Any]) -> None:
    await _event_async(conn, cluster, kind, node_id, term, details)


async def _event_async(conn: AsyncConnection, cluster: str, kind: str, node_id: str | None,
                       term: int | None, details: dict[str, Any]) -> None:
    await conn.execute(text(
        "INSERT INTO cluster_events (cluster, kind, node_id, term, details)"
        " VALUES (:cluster, :kind, :node, :term, CAST(:details AS jsonb))"),
        {"cluster": cluster, "kind": kind, "node": node_id, "term": term, "details": json.dumps(details)})

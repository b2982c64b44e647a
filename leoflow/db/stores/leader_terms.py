"""Leadership terms: the election's lock session, its advisory lock, and the terms it starts and ends.

The lock session is synchronous psycopg, autocommit, one dedicated session per replica
(:mod:`leoflow.db.connection.lock_connection`): the session setup, the safety probes, the
advisory lock itself, the ownership keepalive and the acquire/release transactions that start and
end a fencing term (``cluster_leadership``, ``leader_terms``). These run in the elector's thread,
never in the asyncio loop. :func:`current_leader` is the cluster's view of the same truth, for
the API.

Failure semantics: functions raise the driver's exceptions unchanged (``psycopg.Error`` /
``sqlalchemy.exc.DBAPIError``); the caller (elector, lock connection) decides whether that means
"step down", "retry" or "report". Nothing here retries on its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.stores import cluster_events
from leoflow.model.lock_key import election_lock_key, pg_locks_ids

LOCK_APP_PREFIX = "leoflow-lock:"

#: The session-level setting every lock session writes once, right after connecting, with a
#: value of its own: the proof, in each lock statement, that it runs on *this session's* backend.
SESSION_TOKEN = "leoflow.lock_session"

_HOLDS_KEY = """
SELECT count(*), current_setting('leoflow.lock_session', true) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = %s::oid AND objid = %s::oid AND objsubid = 2
   AND granted AND pid = pg_backend_pid()
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

_HELD_HERE = """
EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid AND objid = %s::oid
          AND objsubid = 2 AND granted AND pid = pg_backend_pid())
"""


class ForeignBackend(Exception):
    """A lock statement ran on a backend that is not this session's own (see :func:`configure_session`)."""


def configure_session(conn: psycopg.Connection[Any], *, token: str, lock_timeout_ms: int, keepalive_idle: int,
                      keepalive_interval: int, keepalive_count: int, user_timeout_ms: int) -> None:
    """Server-side dead-client detection for the lock session (see ADR 0002 for the inequality),
    and the session's token. One statement, so all of it lands on one backend.

    ``lock_timeout`` bounds each blocking ``pg_advisory_lock`` wait of a follower (the poll
    interval); ``statement_timeout`` is off because that wait is deliberate.

    The token (:data:`SESSION_TOKEN`) is checked by every lock statement in the same statement
    (:func:`wait_lock`, :func:`holds_lock`, :func:`start_term`, :func:`unlock`): a transaction-mode
    pooler that hands the session another backend — one without the token, or one carrying another
    session's — is caught at that very statement, before the lock can be taken or trusted there.
    A backend that already carries a token belongs to another session (a pooler that does not
    reset backends between clients): :class:`ForeignBackend` at once.
    """
    row = conn.execute(
        "SELECT previous, set_config('leoflow.lock_session', %s, false),"
        " set_config('tcp_keepalives_idle', %s, false), set_config('tcp_keepalives_interval', %s, false),"
        " set_config('tcp_keepalives_count', %s, false), set_config('tcp_user_timeout', %s, false),"
        " set_config('idle_session_timeout', '0', false),"
        " set_config('idle_in_transaction_session_timeout', '0', false),"
        " set_config('statement_timeout', '0', false), set_config('lock_timeout', %s, false)"
        " FROM (SELECT current_setting('leoflow.lock_session', true) AS previous OFFSET 0) AS before",
        (token, str(int(keepalive_idle)), str(int(keepalive_interval)), str(int(keepalive_count)),
         str(int(user_timeout_ms)), str(int(lock_timeout_ms)))).fetchone()
    if row is not None and row[0]:
        raise ForeignBackend("the backend already carries another lock session's state")


def _own(token: str, found: object) -> None:
    if found != token:
        raise ForeignBackend("a lock statement ran on a backend other than this session's own")


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def in_recovery(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


def timeline(conn: psycopg.Connection[Any]) -> int | None:
    """The server's current WAL timeline (the first 8 hex digits of the WAL file name), if readable.

    A promotion starts a new timeline. Managed services that hide WAL functions answer None and
    terms there carry no timeline (ADR 0003).
    """
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int").fetchone()
    except psycopg.errors.DatabaseError:  # not the connection's failure: the function is unavailable here
        return None
    return int(row[0]) if row and row[0] is not None else None


def session_identity(conn: psycopg.Connection[Any]) -> tuple[int, str | None]:
    """The backend pid a statement of this session ran on, and the token that backend carries."""
    row = conn.execute("SELECT pg_backend_pid(), current_setting('leoflow.lock_session', true)").fetchone()
    assert row is not None
    return int(row[0]), row[1]


def wait_lock(conn: psycopg.Connection[Any], cluster: str, token: str) -> bool:
    """Block in ``pg_advisory_lock`` for at most the session's ``lock_timeout``; True once granted.

    A waiting follower is queued by the server's lock manager, so it is granted the lock the
    moment the holder's session ends — no polling needed for the fast path. The lock is only
    requested on this session's own backend, and never on one that holds it already (session
    locks stack: a backend of another session would grant it at once) — else
    :class:`ForeignBackend`.
    """
    try:
        row = conn.execute(
            f"SELECT CASE WHEN current_setting('leoflow.lock_session', true) = %s AND NOT {_HELD_HERE}"
            " THEN pg_advisory_lock(%s, %s)::text || 'granted' ELSE 'foreign' END",
            (token, *pg_locks_ids(cluster), *election_lock_key(cluster))).fetchone()
    except psycopg.errors.LockNotAvailable:
        return False
    if row is None or row[0] != "granted":
        raise ForeignBackend("the lock was asked for on a backend other than this session's own")
    return True


def holds_lock(conn: psycopg.Connection[Any], cluster: str, token: str) -> bool:
    """Ownership keepalive: does *this backend pid*, this session's own, hold the cluster's key now?"""
    row = conn.execute(_HOLDS_KEY, pg_locks_ids(cluster)).fetchone()
    assert row is not None
    _own(token, row[1])
    return bool(row[0] >= 1)


def unlock(conn: psycopg.Connection[Any], cluster: str, token: str) -> bool:
    """Release the lock — only on this session's own backend (never another session's lock)."""
    row = conn.execute("SELECT CASE WHEN current_setting('leoflow.lock_session', true) = %s"
                       " THEN pg_advisory_unlock(%s, %s) END", (token, *election_lock_key(cluster))).fetchone()
    if row is None or row[0] is None:
        raise ForeignBackend("the unlock ran on a backend other than this session's own")
    return bool(row[0])


#: Terms are ``timeline * TERMS_PER_TIMELINE + n``: integer order is the order of the pairs
#: (timeline, n), as long as one timeline issues fewer terms than this (a leader change every
#: second for 30 years). See ADR 0003.
TERMS_PER_TIMELINE = 1_000_000_000


def start_term(conn: psycopg.Connection[Any], cluster: str, node_id: str, details: dict[str, Any],
               *, lock_timeout: float, token: str, timeline: int | None) -> int:
    """Record a new fencing term for the lock holder; returns it. One transaction.

    The ``FOR UPDATE`` on the cluster's ``cluster_leadership`` row comes first: it waits for every
    fenced write transaction of older terms (they hold the row ``FOR SHARE``) so that each of them
    is ordered before the new term, and raises ``LockNotAvailable`` after ``lock_timeout``.

    The number is at least ``timeline * TERMS_PER_TIMELINE + 1``: after an asynchronous standby is
    promoted (a new timeline), the terms the old primary issued but never replicated are all
    below every term of the new timeline, so no number is ever issued twice (ADR 0003).
    """
    floor = (timeline or 0) * TERMS_PER_TIMELINE + 1
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}")
        row = conn.execute("SELECT current_setting('leoflow.lock_session', true)").fetchone()
        _own(token, row[0] if row else None)
        conn.execute("SELECT term FROM cluster_leadership WHERE cluster = %s FOR UPDATE", (cluster,))
        # Terms that never recorded their end (crash, partition) end now, at the latest; the
        # replica that held one overwrites this with the moment it stopped, once it reconnects.
        conn.execute("UPDATE leader_terms SET ended_at = clock_timestamp(), end_reason = 'superseded'"
                     " WHERE cluster = %s AND ended_at IS NULL", (cluster,))
        row = conn.execute(
            "WITH next AS (SELECT nextval(pg_get_serial_sequence('leader_terms', 'term')) AS n)"
            " INSERT INTO leader_terms (term, cluster, node_id, backend_pid, timeline)"
            " SELECT greatest(next.n, %s), %s, %s, pg_backend_pid(), %s FROM next RETURNING term",
            (floor, cluster, node_id, timeline)).fetchone()
        assert row is not None
        term = int(row[0])
        conn.execute("SELECT setval(pg_get_serial_sequence('leader_terms', 'term'), %s)", (term,))
        updated = conn.execute(
            "UPDATE cluster_leadership SET term = %s, node_id = %s, since = clock_timestamp(), timeline = %s"
            " WHERE cluster = %s", (term, node_id, timeline, cluster)).rowcount
        if not updated:
            conn.execute("INSERT INTO cluster_leadership (cluster, term, node_id, since, timeline)"
                         " VALUES (%s, %s, %s, clock_timestamp(), %s)", (cluster, term, node_id, timeline))
        cluster_events.record_event(conn, cluster, "leader_elected", node_id, term, {**details, "timeline": timeline})
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
        cluster_events.record_event(conn, cluster, kind, node_id, term, details, ts=stopped_at)


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


async def current_leader(conn: AsyncConnection, cluster: str) -> dict[str, Any] | None:
    """``{"node_id", "term", "since", "api_url"}`` of the live leader, or None when nobody leads.

    The leader is the session that holds the cluster's advisory lock (``pg_locks``, ``granted =
    true``; followers blocked in ``pg_advisory_lock`` show ``granted = false`` and are ignored) whose
    ``application_name`` is ``leoflow-lock:<node_id>``, joined with the newest fencing term *recorded
    by that same backend pid*. Between the moment a new holder is granted the lock and the moment it
    commits its term there is no leader (``None``): the API answers 503. Any replica can ask, leader
    or not, because the truth lives in PostgreSQL, never in memory.
    """
    classid, objid = pg_locks_ids(cluster)
    row = (await conn.execute(_LEADER, {"cluster": cluster, "classid": classid, "objid": objid})).first()
    if row is None:
        return None
    return {"node_id": row.node_id, "term": int(row.term), "since": cluster_events.isoformat(row.since),
            "api_url": row.api_url}

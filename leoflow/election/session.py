"""The election's dedicated PostgreSQL session: how it is configured and vetted.

- :func:`session_timeouts` — client keepalives, and server-side dead-client detection set on the
  session so the server drops a dead leader no earlier than twice the lease (ADR 0002).
- :func:`open_lock_session` — the :class:`~leoflow.db.lock_session.LockSession` with those
  timeouts, ``application_name`` ``leoflow-lock:<node_id>``.
- :func:`check_session_safety` — refuse a hot standby, and a session whose backend is shared
  between statements (transaction-mode pooler): raises :class:`UnsafeDatabaseSetup` with a
  message that says how to fix it.
"""

from __future__ import annotations

import math

from leoflow.db.election_store import LOCK_APP_PREFIX
from leoflow.db.lock_session import LockSession, SessionTimeouts
from leoflow.errors import UnsafeDatabaseSetup
from leoflow.settings import Settings

POOLER_PROBLEM = ("the election lock session does not keep its PostgreSQL backend across statements "
                  "(a transaction-mode pooler such as PgBouncer?); point LEOFLOW_DATABASE_URL at a "
                  "session-mode pooler or directly at PostgreSQL")
STANDBY_PROBLEM = ("the database is a hot standby (pg_is_in_recovery() is true) and cannot hold the "
                   "election lock; point LEOFLOW_DATABASE_URL at the primary")


def session_timeouts(lease: float, poll_interval: float = 5.0) -> SessionTimeouts:
    """Dead-peer detection for a lease: the server notices strictly later than the lease (ADR 0002).

    Server side: ``idle + interval * count >= 2 * lease`` and ``tcp_user_timeout = 2 * lease``.
    Client side: keepalives from a quarter of the lease and a user timeout of half of it, so a
    dead server is noticed before the lease runs out. ``lock_timeout`` bounds each blocking
    lock wait of a follower to the poll interval.
    """
    return SessionTimeouts(
        connect_timeout=max(2, math.ceil(lease / 2)),
        client_keepalive_idle=max(1, int(lease / 4)),
        client_user_timeout_ms=int(lease * 500),
        server_keepalive_idle=max(1, math.ceil(lease)),
        server_keepalive_interval=max(1, math.ceil(lease / 4)),
        server_keepalive_count=4,
        server_user_timeout_ms=int(2 * lease * 1000),
        lock_timeout_ms=int(poll_interval * 1000),
    )


def open_lock_session(settings: Settings) -> LockSession:
    """The dedicated election session: autocommit, named, with client and server keepalives."""
    election = settings.election
    return LockSession.connect(settings.require_database_url(),
                               application_name=f"{LOCK_APP_PREFIX}{settings.cluster.node_id}",
                               timeouts=session_timeouts(election.leader_lease, election.poll_interval))


def check_session_safety(session: LockSession, settings: Settings, *, probe_pooler: bool = True) -> None:
    """Refuse a hot standby and any session whose backend is shared between statements.

    The pooler probe needs a second, short-lived connection; the elector runs it on its first
    session only, before the process can lead, so it borrows the budget's listener slot
    (:mod:`leoflow.db.budget`) and the replica never exceeds its connection bound. A hot
    standby is checked on every session (a failover may point the URL elsewhere).
    """
    if session.in_recovery():
        raise UnsafeDatabaseSetup(STANDBY_PROBLEM)
    if not probe_pooler:
        return
    if session.backend_shared_with_new_session(settings.require_database_url(),
                                               application_name=f"leoflow-probe:{settings.cluster.node_id}"):
        raise UnsafeDatabaseSetup(POOLER_PROBLEM)

"""The election's dedicated PostgreSQL session: how it is opened, configured and vetted.

- :func:`connect_lock_session` — autocommit, no prepared statements, ``application_name``
  ``leoflow-lock:<node_id>``, libpq (client-side) keepalives, and server-side dead-client
  detection (:func:`session_timeouts`) set on the session so the server drops a dead leader no
  earlier than twice the lease (ADR 0002).
- :func:`check_session_safety` — refuse a hot standby, and a session whose backend is shared
  between statements (transaction-mode pooler): raises :class:`UnsafeDatabaseSetup` with a
  message that says how to fix it.
- :func:`shutdown_socket` — unblock a thread stuck in a call on the session.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from typing import Any

import psycopg

from leoflow.db import election_store as store
from leoflow.db.engine import libpq_url
from leoflow.errors import UnsafeDatabaseSetup
from leoflow.settings import Settings

POOLER_PROBLEM = ("the election lock session does not keep its PostgreSQL backend across statements "
                  "(a transaction-mode pooler such as PgBouncer?); point LEOFLOW_DATABASE_URL at a "
                  "session-mode pooler or directly at PostgreSQL")
STANDBY_PROBLEM = ("the database is a hot standby (pg_is_in_recovery() is true) and cannot hold the "
                   "election lock; point LEOFLOW_DATABASE_URL at the primary")


def session_timeouts(lease: float) -> dict[str, int]:
    """Server-side dead-client detection, strictly later than the lease (ADR 0002).

    ``idle + interval * count >= 2 * lease`` and ``tcp_user_timeout = 2 * lease``.
    """
    idle = max(1, math.ceil(lease))
    interval = max(1, math.ceil(lease / 4))
    return {"keepalive_idle": idle, "keepalive_interval": interval, "keepalive_count": 4,
            "user_timeout_ms": int(2 * lease * 1000)}


def connect_lock_session(settings: Settings) -> psycopg.Connection[Any]:
    """The dedicated election session: autocommit, named, with client and server keepalives."""
    lease = settings.election.leader_lease
    conn = psycopg.connect(
        libpq_url(settings.require_database_url()), autocommit=True, prepare_threshold=None,
        application_name=f"{store.LOCK_APP_PREFIX}{settings.cluster.node_id}"[:63],
        connect_timeout=max(2, math.ceil(lease / 2)),
        keepalives=1, keepalives_idle=max(1, int(lease / 4)), keepalives_interval=1, keepalives_count=2,
        tcp_user_timeout=int(lease * 500))
    store.configure_session(conn, lock_timeout_ms=int(settings.election.poll_interval * 1000),
                            **session_timeouts(lease))
    return conn


def check_session_safety(conn: psycopg.Connection[Any], settings: Settings, *, probe_pooler: bool = True) -> None:
    """Refuse a hot standby and any session whose backend is shared between statements.

    The pooler probe needs a second, short-lived connection; the elector runs it on its first
    session only, before the process can lead, so it borrows the budget's listener slot
    (:mod:`leoflow.db.budget`) and the replica never exceeds its connection bound. A hot
    standby is checked on every session (a failover may point the URL elsewhere).
    """
    if store.in_recovery(conn):
        raise UnsafeDatabaseSetup(STANDBY_PROBLEM)
    if not probe_pooler:
        return
    first = store.backend_pid(conn)
    with psycopg.connect(libpq_url(settings.require_database_url()), autocommit=True, prepare_threshold=None,
                         application_name=f"leoflow-probe:{settings.cluster.node_id}"[:63],
                         connect_timeout=5) as probe:
        probe_pid = store.probe_backend_pid_in_transaction(probe)
    if probe_pid == first or store.backend_pid(conn) != first:
        raise UnsafeDatabaseSetup(POOLER_PROBLEM)


def shutdown_socket(conn: psycopg.Connection[Any]) -> None:
    """Unblock a thread stuck in a call on ``conn``: shut its socket down (even if the peer is gone)."""
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()

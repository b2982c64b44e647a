"""How the election's lock connection is set up: its timeouts, how it is opened, how it is vetted.

The connection object itself (:class:`~leoflow.db.connection.lock_connection.LockSession`) is data-layer
plumbing; this module is the election's policy for it (why these timeouts, which databases to refuse),
so it lives here and is not named "session", a word the API's database sessions also use.

- :func:`session_timeouts` — client keepalives, and server-side dead-client detection set on the
  session so the server drops a dead leader no earlier than twice the lease (ADR 0002).
- :func:`open_lock_session` — the :class:`~leoflow.db.connection.lock_connection.LockSession` with those
  timeouts, ``application_name`` ``leoflow-lock:<node_id>``.
- :func:`vet_session` — run on *every* new session (a reconnect may land somewhere else: a
  promoted standby, a pooler switched to transaction mode): refuse a hot standby; behind a
  protocol-level pooler, refuse one that hands this session's backend to another client; and
  claim the database for this cluster, or refuse one that belongs to another (ADR 0010).
  Every statement of the session afterwards proves it still runs on its own backend
  (:mod:`leoflow.db.connection.lock_connection`).
"""

from __future__ import annotations

import logging
import math

from leoflow.db.connection.lock_connection import POOLER_PROBLEM, LockSession, SessionTimeouts
from leoflow.db.stores.installation import Ownership
from leoflow.db.stores.leader_terms import LOCK_APP_PREFIX
from leoflow.errors import UnsafeDatabaseSetup
from leoflow.settings import Settings

__all__ = ["POOLER_PROBLEM", "STANDBY_PROBLEM", "open_lock_session", "recheck_pooler", "report_claim",
           "session_timeouts", "vet_session"]

log = logging.getLogger(__name__)

STANDBY_PROBLEM = ("the database is a hot standby (pg_is_in_recovery() is true) and cannot hold the "
                   "election lock; point LEOFLOW_DATABASE_URL at the primary (with several hosts, add "
                   "target_session_attrs=read-write)")


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


def vet_session(session: LockSession, settings: Settings) -> None:
    """Refuse an unsafe session (:class:`UnsafeDatabaseSetup`) or a foreign database (``ClusterMismatch``).

    The pooler probe needs a second, short-lived connection; it runs only behind a
    protocol-level pooler (never against PostgreSQL itself, so a direct replica never exceeds
    its connection bound), at every connect, before this session can lead.
    """
    if session.in_recovery():
        raise UnsafeDatabaseSetup(STANDBY_PROBLEM)
    recheck_pooler(session, settings)
    report_claim(session.claim_installation(settings.cluster.name, settings.cluster.node_id))


def recheck_pooler(session: LockSession, settings: Settings) -> None:
    """Behind a protocol-level pooler: refuse a session whose backend is not its own (at connect,
    and every poll interval after — a pooler can be switched to transaction mode at run time)."""
    if session.behind_pooler and session.backend_shared_with_new_session(
            settings.require_database_url(), application_name=f"leoflow-probe:{settings.cluster.node_id}"):
        raise UnsafeDatabaseSetup(POOLER_PROBLEM)


def report_claim(ownership: Ownership) -> None:
    """One log line when this replica claimed the database (a warning if others used it before)."""
    if not ownership.claimed:
        return
    context = {"cluster": ownership.cluster, "schema": ownership.schema}
    if ownership.others_in_history:
        log.warning("claimed the database for this cluster; the history of other clusters found in it "
                    "belongs to no running cluster any more (ADR 0010): %s", ", ".join(ownership.others_in_history),
                    extra=context)
    else:
        log.info("claimed the database for this cluster", extra=context)

"""The election's dedicated PostgreSQL session, as an object that speaks Leoflow errors.

The elector (``leoflow.election``) owns exactly one :class:`LockSession`: a synchronous,
autocommit psycopg connection that is never pooled, used from the elector's own thread. Every
method runs the statements of :mod:`leoflow.db.stores.leader_terms` and translates what the driver
raises (:mod:`leoflow.db.connection.driver_errors`): the elector sees
:class:`~leoflow.errors.DatabaseUnavailable` when the session is gone,
:class:`~leoflow.errors.LockTimeout` when a lock wait expired, and never a psycopg type.

:meth:`LockSession.shutdown` unblocks a thread stuck in a call on the session (the lease guard
uses it when a keepalive hangs past half the lease): it shuts the socket down under the call,
which then fails with ``DatabaseUnavailable``.

**One backend, proven on every lock statement.** At connect the session writes a random token
into a session-level setting of its backend; every lock statement checks it in the same
statement (:mod:`leoflow.db.stores.leader_terms`). A statement that runs on another backend — what a
transaction-mode pooler does — raises :class:`~leoflow.errors.UnsafeDatabaseSetup` with
:data:`POOLER_PROBLEM` at that statement, deterministically, before the lock is taken or trusted
there; so does a backend that carries another session's token. When a protocol-level pooler sits
in between (the backend pid the server announced differs from the real one),
:meth:`LockSession.backend_shared_with_new_session` additionally probes at every connect whether a
second client is handed this session's backend.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from leoflow.db import migrations
from leoflow.db.connection.connect import connect_kwargs, libpq_url
from leoflow.db.connection.driver_errors import translate
from leoflow.db.stores import installation, leader_terms
from leoflow.errors import DatabaseUnavailable, UnsafeDatabaseSetup

POOLER_PROBLEM = ("the election lock session does not keep its PostgreSQL backend across statements "
                  "(a transaction-mode pooler such as PgBouncer, or a pooler that does not reset backends "
                  "between clients); point LEOFLOW_DATABASE_URL at a session-mode pooler or directly at PostgreSQL")


@dataclass(frozen=True)
class SessionTimeouts:
    """Client- and server-side dead-peer detection of the lock session (ADR 0002)."""

    connect_timeout: int
    client_keepalive_idle: int
    client_user_timeout_ms: int
    server_keepalive_idle: int
    server_keepalive_interval: int
    server_keepalive_count: int
    server_user_timeout_ms: int
    lock_timeout_ms: int


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    # The session's sockets belong to this module alone: a bare socket error is the database's.
    try:
        yield
    except leader_terms.ForeignBackend as exc:
        raise UnsafeDatabaseSetup(POOLER_PROBLEM) from exc
    except (psycopg.Error, OSError) as exc:
        if isinstance(exc, psycopg.Error):
            raise translate(exc) from exc
        raise DatabaseUnavailable(f"the lock session's connection failed: {exc}") from exc


class LockSession:
    """One dedicated lock connection; see the module docstring."""

    def __init__(self, conn: psycopg.Connection[Any], token: str) -> None:
        self._conn = conn
        self._token = token
        #: A protocol-level pooler sits between us and the server (see leoflow.db.connection.connect).
        self.behind_pooler = False

    @classmethod
    def connect(cls, url: str, *, application_name: str, timeouts: SessionTimeouts) -> LockSession:
        token = secrets.token_hex(16)
        with _translated():
            # The lock session's own client keepalives replace the pools' defaults (ADR 0002).
            kwargs = {**connect_kwargs(application_name, connect_timeout=timeouts.connect_timeout),
                      "keepalives_idle": timeouts.client_keepalive_idle, "keepalives_interval": 1,
                      "keepalives_count": 2, "tcp_user_timeout": timeouts.client_user_timeout_ms}
            conn = psycopg.connect(libpq_url(url), autocommit=True, prepare_threshold=None, **kwargs)
            with contextlib.ExitStack() as on_failure:
                on_failure.callback(conn.close)
                leader_terms.configure_session(conn, token=token, lock_timeout_ms=timeouts.lock_timeout_ms,
                                        keepalive_idle=timeouts.server_keepalive_idle,
                                        keepalive_interval=timeouts.server_keepalive_interval,
                                        keepalive_count=timeouts.server_keepalive_count,
                                        user_timeout_ms=timeouts.server_user_timeout_ms)
                session = cls(conn, token)
                session.behind_pooler = leader_terms.backend_pid(conn) != conn.info.backend_pid
                on_failure.pop_all()
        return session

    # ------------------------------------------------------------------ vetting the session

    def backend_pid(self) -> int:
        with _translated():
            return leader_terms.backend_pid(self._conn)

    def in_recovery(self) -> bool:
        with _translated():
            return leader_terms.in_recovery(self._conn)

    def timeline(self) -> int | None:
        with _translated():
            return leader_terms.timeline(self._conn)

    def backend_shared_with_new_session(self, url: str, *, application_name: str) -> bool:
        """Does this session lose its backend to a second client, or hop to another one?

        Through a transaction-mode pooler the idle lock session's backend goes back to the pool.
        A short-lived probe client opens a transaction (so it holds one backend) and looks at
        the pid and token it sees; meanwhile, and again after the probe released its backend,
        this session checks it still runs on its own backend. PgBouncer hands out the most
        recently released backend first, so in transaction mode the probe gets this session's
        backend (the one just released) or, failing that, this session gets the probe's: a
        transaction-mode pooler escapes all three checks only if other clients' traffic lands
        between the steps exactly so. Each session statement proves its backend anyway.
        """
        with _translated():
            mine, token = leader_terms.session_identity(self._conn)
            seen = [(mine, token)]
            with psycopg.connect(libpq_url(url), autocommit=True, prepare_threshold=None,
                                 **connect_kwargs(application_name)) as probe, probe.transaction():
                probe_pid, probe_token = leader_terms.session_identity(probe)
                seen.append(leader_terms.session_identity(self._conn))
            seen.append(leader_terms.session_identity(self._conn))
            shared = probe_pid == mine or probe_token == self._token
            return shared or any(pid != mine or found != self._token for pid, found in seen)

    def schema_state(self) -> migrations.SchemaState:
        """The schema's revision and which older code it declared compatible (ADR 0006)."""
        with _translated():
            return migrations.schema_state_sync(self._conn)

    def claim_installation(self, cluster: str, node_id: str) -> installation.Ownership:
        """Claim the database for ``cluster`` or learn that it belongs to another (ADR 0010)."""
        with _translated():
            return installation.claim(self._conn, cluster, node_id)

    # ------------------------------------------------------------------ the lock

    def wait_lock(self, cluster: str) -> bool:
        with _translated():
            return leader_terms.wait_lock(self._conn, cluster, self._token)

    def holds_lock(self, cluster: str) -> bool:
        with _translated():
            return leader_terms.holds_lock(self._conn, cluster, self._token)

    def unlock(self, cluster: str) -> bool:
        with _translated():
            return leader_terms.unlock(self._conn, cluster, self._token)

    # ------------------------------------------------------------------ terms and events

    def start_term(self, cluster: str, node_id: str, details: dict[str, Any], *, lock_timeout: float,
                   timeline: int | None) -> int:
        with _translated():
            return leader_terms.start_term(self._conn, cluster, node_id, details, lock_timeout=lock_timeout,
                                    token=self._token, timeline=timeline)

    def end_term(self, cluster: str, node_id: str, term: int, kind: str, reason: str, *,
                 stopped_at: datetime | None) -> None:
        with _translated():
            leader_terms.end_term(self._conn, cluster, node_id, term, kind, reason, stopped_at=stopped_at)

    def blocking_fenced_writers(self, older_than: float) -> list[int]:
        with _translated():
            return leader_terms.blocking_fenced_writers(self._conn, older_than)

    def stale_holder(self, cluster: str, silent_for: float) -> int | None:
        with _translated():
            return leader_terms.stale_holder(self._conn, cluster, silent_for)

    def terminate_backend(self, pid: int) -> bool:
        with _translated():
            return leader_terms.terminate_backend(self._conn, pid)

    # ------------------------------------------------------------------ lifecycle

    @property
    def usable(self) -> bool:
        return not (self._conn.closed or self._conn.broken)

    def shutdown(self) -> None:
        """Unblock a thread stuck in a call on this session: shut its socket down (even if the peer is gone)."""
        with contextlib.suppress(OSError, ValueError, psycopg.Error):  # the socket may already be gone
            fd = self._conn.pgconn.socket
            sock = socket.socket(fileno=os.dup(fd))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error, OSError):
            self._conn.close()

"""The elector: one dedicated lock session, a leadership toggle, and a lease that fences itself.

The elector owns exactly one lock session (:class:`~leoflow.db.connection.lock_connection.LockSession`:
autocommit, never pooled, ``application_name`` ``leoflow-lock:<node_id>``) and runs in its
**own thread**, so an event-loop stall (API load, a long scheduler tick) can never delay its
keepalive. It only flips a toggle: the :class:`ElectionListener` is told ``acquired(term)`` /
``lost(term, kind, reason)`` and the replica
runtime starts or cancels the leader-only services (see ADR 0002).

Follower: blocks in ``pg_advisory_lock`` under ``lock_timeout = LEOFLOW_ELECTION_POLL_INTERVAL``.
PostgreSQL's lock manager grants the lock to a waiter the moment the holder's session ends, so a
crash or release hands over in milliseconds; each timeout re-arms the wait and checks for a
*stale* holder (a session silent for twice the lease — frozen or half-open), which it
terminates. That is two cheap statements per poll interval.

Leader: records a new fencing term (``leoflow.db.stores.leader_terms.start_term``), then every
``LEOFLOW_KEEPALIVE_INTERVAL`` checks in ``pg_locks`` that *this backend pid* still holds the key.
It steps down at once — ``lost`` before anything else — when the check fails, finds the lock
missing, or the connection breaks. A separate guard thread enforces the **lease**: no successful
keepalive *sent* within ``LEOFLOW_LEADER_LEASE`` seconds, or one in flight longer than half the
lease, and the elector declares the term lost and shuts the socket down under the stuck call.
The server is configured to notice a dead client only after twice the lease, so the old leader
has stopped before anyone else can be granted the lock.

**Refusals.** Every new session is vetted (:func:`~leoflow.election.lock_setup.vet_session`): a hot
standby, a transaction-mode pooler, a database that belongs to another cluster (ADR 0010) or a
schema that is not migrated is refused. So is a schema that is neither at this build's head nor
declared compatible with it (ADR 0006), and a replica whose own pools cannot connect (the
``gate`` the replica passes): both checked when a session opens and again right after the lock is
granted, before a term starts: a build the schema has left behind must not lead, and a leader
that cannot run its scheduler would only take terms and die. A leader re-reads the schema's
declaration every poll interval and releases its term when a migration has left its build out.
A session that turns out mid-way to run on a backend not its own (a pooler switched to
transaction mode at run time) is refused at that statement. Each distinct refusal is one error
log line; the reason is kept in :class:`~leoflow.election.health.ElectionHealth` for ``/readyz``;
the elector retries every poll interval without contending.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from leoflow.clock import Clock, SystemClock
from leoflow.db import migrations
from leoflow.db.connection.lock_connection import LockSession
from leoflow.election.health import GATE_REFUSAL, ElectionHealth
from leoflow.election.lock_setup import POOLER_PROBLEM, open_lock_session, recheck_pooler, vet_session
from leoflow.errors import (
    DatabaseError,
    LeoflowError,
    LockTimeout,
    SchemaNotCurrent,
    SettingsError,
    UnsafeDatabaseSetup,
)
from leoflow.metrics import election as metrics
from leoflow.settings import Settings

log = logging.getLogger(__name__)

class ElectionListener(Protocol):
    """Told about leadership changes; called from the elector's threads, must not block."""

    def acquired(self, term: int) -> None: ...

    def lost(self, term: int, kind: str, reason: str) -> None:
        """``kind`` is ``lost`` (failure, fenced) or ``released`` (voluntary)."""
        ...


class _LockLost(Exception):
    """The keepalive found the lock gone, or the lease fenced this term."""


class _Refused(Exception):
    """This replica must not contend through this session (see the module docstring)."""


#: A check run before contending and after every grant: None when this replica can lead, else why not.
LeadershipGate = Callable[[], "str | None"]


class Elector:
    """Contend for the cluster's lock; hold it with an ownership keepalive; fence on lease expiry."""

    def __init__(self, settings: Settings, listener: ElectionListener, *, clock: Clock | None = None,
                 connect: Callable[[], LockSession] | None = None, gate: LeadershipGate | None = None,
                 health: ElectionHealth | None = None) -> None:
        self.settings = settings
        self.listener = listener
        self.clock = clock or SystemClock()
        self._cluster = settings.cluster.name
        self._node = settings.cluster.node_id
        self._election = settings.election
        self._connect_override = connect
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()      # stop contending (follower exits)
        self._release = threading.Event()       # leader: release and exit
        self._stepping_down: str | None = None  # leader: voluntary step-down reason
        self._conn: LockSession | None = None
        self._term: int | None = None
        self._lease_deadline = 0.0
        self._keepalive_since: float | None = None
        self._blocking = False
        self._unrecorded: list[tuple[int, str, str, datetime]] = []
        self._gate = gate
        self.health = health or ElectionHealth()
        self._probed_at = float("-inf")
        self._schema_checked_at = float("-inf")
        self._thread = threading.Thread(target=self._main, name=f"elector-{self._cluster}", daemon=True)
        self._guard = threading.Thread(target=self._guard_main, name="elector-lease-guard", daemon=True)

    # ------------------------------------------------------------------ public API
    @property
    def term(self) -> int | None:
        return self._term

    def start(self) -> None:
        self._thread.start()
        self._guard.start()

    def begin_shutdown(self) -> None:
        """Stop contending; a leader keeps its lock (and keepalive) until :meth:`release_and_join`."""
        self._stopping.set()
        self._wake.set()
        with self._mutex:
            if self._blocking and self._conn is not None:
                self._conn.shutdown()

    def release_and_join(self, timeout: float = 10.0) -> None:
        """Release the lock (recording ``leader_released``) if held, close the session, join."""
        self.begin_shutdown()
        self._release.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            with self._mutex:
                if self._blocking and self._conn is not None:
                    self._conn.shutdown()
            self._thread.join(0.1)
        self._guard.join(1.0)

    def step_down(self, reason: str) -> None:
        """Voluntarily release leadership (e.g. the scheduler stalled); contend again later."""
        with self._mutex:
            if self._term is not None:
                self._stepping_down = reason
        self._wake.set()

    # ------------------------------------------------------------------ threads
    def _main(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            conn: LockSession | None = None
            try:
                conn = self._open()
                failures = 0
                self._record_unrecorded(conn)
                self._contend(conn)
            except (_Refused, UnsafeDatabaseSetup) as exc:
                self._declare_lost("lost", _reason(exc))  # first: a term must not outlive its session's trust
                if self.health.refuse(str(exc)):
                    log.error("refusing to elect a leader: %s", exc, extra={"cluster": self._cluster})
                self._sleep(self._election.poll_interval)
                continue
            except (LeoflowError, _LockLost) as exc:  # DatabaseError, LockTimeout: the session is gone
                self._declare_lost("lost", _reason(exc))
                if not self._stopping.is_set():
                    log.warning("election session failed: %s", _reason(exc), extra={"cluster": self._cluster})
            except Exception as exc:  # boundary: a bug must not kill the elector thread silently
                self._declare_lost("lost", f"elector error: {_reason(exc)}")
                log.exception("elector failed unexpectedly; reconnecting", extra={"cluster": self._cluster})
            finally:
                with self._mutex:
                    self._conn = None
                    self._blocking = False
                if conn is not None:
                    conn.close()
            failures += 1
            backoff = min(self._election.poll_interval, 0.1 * (2 ** min(failures, 6)))
            self._sleep(backoff * random.uniform(0.5, 1.5))
        self._declare_lost("released", "shutdown")

    def _guard_main(self) -> None:
        half_lease = self._election.leader_lease / 2
        while not (self._release.is_set() and not self._thread.is_alive()):
            time.sleep(0.02)
            if not self._thread.is_alive():
                return
            now = self.clock.monotonic()
            with self._mutex:
                if self._term is None:
                    continue
                since = self._keepalive_since
                if now > self._lease_deadline:
                    reason = "lease expired without a successful keepalive"
                elif since is not None and now - since > half_lease:
                    reason = "keepalive timed out"
                else:
                    continue
            metrics.KEEPALIVE_FAILURES.inc()
            self._declare_lost("lost", reason)
            with self._mutex:
                if self._conn is not None:
                    self._conn.shutdown()

    # ------------------------------------------------------------------ connection
    def _open(self) -> LockSession:
        conn = self._connect_override() if self._connect_override is not None else open_lock_session(self.settings)
        with contextlib.ExitStack() as on_failure:
            on_failure.callback(conn.close)
            try:
                vet_session(conn, self.settings)
            except (SettingsError, SchemaNotCurrent) as exc:  # another cluster's database; not migrated
                raise _Refused(str(exc)) from exc
            self._check_schema(conn)
            self._check_gate()
            on_failure.pop_all()
        self.health.clear()
        with self._mutex:
            self._conn = conn
        return conn

    def _check_schema(self, conn: LockSession) -> None:
        """Refuse to lead code that the schema does not declare able to run on it (ADR 0006).

        Checked when a session opens and again once the lock is granted: with the lock held, no
        leader can act meanwhile, so what a newer leader wrote under a newer schema (ADR 0013's
        queued tries without rows) is never handed to a build that cannot read it. A leader checks
        again every poll interval (:meth:`_recheck_schema`).
        """
        refusal = self._schema_refusal(conn)
        if refusal is not None:
            raise _Refused(refusal)

    def _recheck_schema(self, conn: LockSession, term: int) -> None:
        """Every poll interval while leading: a migration may since have left this build out (a
        contract revision); then release the term at once, and refuse like a new session would."""
        if self.clock.monotonic() - self._schema_checked_at < self._election.poll_interval:
            return
        refusal = self._schema_refusal(conn)
        if refusal is not None:
            self._release_term(conn, term, refusal)
            raise _Refused(refusal)

    def _schema_refusal(self, conn: LockSession) -> str | None:
        problem = migrations.readiness_problem(conn.schema_state())
        self._schema_checked_at = self.clock.monotonic()
        return None if problem is None else f"this build may not lead on this database: {problem}"

    def _check_gate(self) -> None:
        problem = self._gate() if self._gate is not None else None
        if problem is not None:
            raise _Refused(f"{GATE_REFUSAL}: {problem}")

    # ------------------------------------------------------------------ follower
    def _contend(self, conn: LockSession) -> None:
        poll = self._election.poll_interval
        while not self._stopping.is_set():
            with self._mutex:
                self._blocking = True
            try:
                if self._stopping.is_set():
                    return
                granted = conn.wait_lock(self._cluster)
            finally:
                with self._mutex:
                    self._blocking = False
            if not granted:
                self._evict_stale_holder(conn)
                self._recheck_pooler(conn)
                continue
            if self._stopping.is_set():
                conn.unlock(self._cluster)
                return
            granted_at = datetime.now(UTC)
            if not conn.holds_lock(self._cluster):
                with contextlib.suppress(DatabaseError, UnsafeDatabaseSetup):  # the backend is gone already
                    conn.unlock(self._cluster)
                raise UnsafeDatabaseSetup(POOLER_PROBLEM)
            try:
                self._check_schema(conn)
                self._check_gate()
            except _Refused:
                conn.unlock(self._cluster)  # never a term for a replica that cannot work
                raise
            term, confirmed_at = self._start_term(conn, granted_at)
            self._lead(conn, term, confirmed_at)
            if self._stepping_down is not None:
                self._stepping_down = None
                self._sleep(poll)  # let another replica take over before contending again

    def _recheck_pooler(self, conn: LockSession) -> None:
        """Every poll interval, behind a pooler: has it started sharing this session's backend?"""
        now = self.clock.monotonic()
        if not conn.behind_pooler or now - self._probed_at < self._election.poll_interval:
            return
        self._probed_at = now
        recheck_pooler(conn, self.settings)

    def _evict_stale_holder(self, conn: LockSession) -> None:
        pid = conn.stale_holder(self._cluster, 2 * self._election.leader_lease)
        if pid is not None and conn.terminate_backend(pid):
            log.warning("terminated a stale election lock holder (silent for over twice the lease)",
                        extra={"cluster": self._cluster, "pid": pid})

    def _start_term(self, conn: LockSession, granted_at: datetime) -> tuple[int, float]:
        """The new term, and when the (successful) transaction that recorded it was sent.

        The lease starts then, not at the grant: waiting out a frozen predecessor's fenced write
        can take longer than the lease itself.
        """
        lease = self._election.leader_lease
        details = {"api_url": self.settings.api_url, "pid": os.getpid(), "granted_at": granted_at.isoformat()}
        timeline = conn.timeline()
        while True:
            sent = self.clock.monotonic()
            try:
                return conn.start_term(self._cluster, self._node, details, lock_timeout=lease / 2,
                                       timeline=timeline), sent
            except LockTimeout:
                # An older term's fenced write is stuck (frozen process): roll it back.
                for pid in conn.blocking_fenced_writers(older_than=lease):
                    conn.terminate_backend(pid)
                    log.warning("terminated a stuck fenced write of an older term",
                                extra={"cluster": self._cluster, "pid": pid})
                if self._stopping.is_set():
                    raise _LockLost("shutdown while starting a term") from None

    # ------------------------------------------------------------------ leader
    def _lead(self, conn: LockSession, term: int, confirmed_at: float) -> None:
        with self._mutex:
            self._term = term
            self._lease_deadline = confirmed_at + self._election.leader_lease
        metrics.set_leading(term)
        metrics.TRANSITIONS.labels(event="acquired").inc()
        log.info("acquired leadership", extra={"cluster": self._cluster, "term": term})
        self.listener.acquired(term)
        interval = self._election.keepalive_interval
        first = True  # check ownership at once: the term may have taken a while to record
        while True:
            if not first:
                self._wake.wait(interval)
                self._wake.clear()
            first = False
            if self._release.is_set() or self._stepping_down is not None:
                reason = "shutdown" if self._release.is_set() else (self._stepping_down or "step-down")
                self._release_term(conn, term, reason)
                return
            sent = self.clock.monotonic()
            with self._mutex:
                if self._term != term:
                    raise _LockLost("fenced by the lease guard")
                if sent > self._lease_deadline:  # e.g. the whole process was frozen
                    expired = True
                else:
                    expired = False
                    self._keepalive_since = sent
            if expired:
                metrics.KEEPALIVE_FAILURES.inc()
                self._declare_lost("lost", "lease expired without a successful keepalive")
                raise _LockLost("lease expired without a successful keepalive")
            try:
                holds = conn.holds_lock(self._cluster)
            except DatabaseError:
                metrics.KEEPALIVE_FAILURES.inc()
                raise
            finally:
                with self._mutex:
                    self._keepalive_since = None
            metrics.KEEPALIVE_SECONDS.observe(self.clock.monotonic() - sent)
            if not holds:
                metrics.KEEPALIVE_FAILURES.inc()
                raise _LockLost("keepalive found the lock missing (unlocked or session replaced)")
            with self._mutex:
                if self._term != term:
                    raise _LockLost("fenced by the lease guard")
                self._lease_deadline = sent + self._election.leader_lease
            self._recheck_pooler(conn)
            self._recheck_schema(conn, term)

    def _release_term(self, conn: LockSession, term: int, reason: str) -> None:
        """Stop acting first, then record the end and unlock (so the event precedes the next term)."""
        self._declare_lost("released", reason, record=False)
        try:
            conn.end_term(self._cluster, self._node, term, "leader_released", reason, stopped_at=None)
            conn.unlock(self._cluster)
        except DatabaseError as exc:
            # The session died under us (often the very reason we were fenced): record a loss later.
            with self._mutex:
                self._unrecorded.append((term, "lost", f"{_reason(exc)} ({reason})", datetime.now(UTC)))
            raise
        log.info("released leadership", extra={"cluster": self._cluster, "term": term, "reason": reason})

    def _declare_lost(self, kind: str, reason: str, *, record: bool = True) -> None:
        with self._mutex:
            term, self._term = self._term, None
            self._keepalive_since = None
            if kind == "lost":
                # A step-down asked for by the term that just ended must not end the next one.
                self._stepping_down = None
            if term is not None and record:
                self._unrecorded.append((term, kind, reason, datetime.now(UTC)))
        if term is None:
            return
        metrics.set_leading(None)
        metrics.TRANSITIONS.labels(event=kind).inc()
        if kind == "lost":
            log.error("lost leadership: %s", reason, extra={"cluster": self._cluster, "term": term})
        try:
            self.listener.lost(term, kind, reason)
        except RuntimeError:  # the event loop is already closed (process exiting)
            log.debug("leadership loss not delivered: event loop closed", extra={"term": term})
        if record and kind == "released":
            self._try_record_now()

    def _try_record_now(self) -> None:
        with self._mutex:
            conn = self._conn
        if conn is None or not conn.usable:
            return
        with contextlib.suppress(DatabaseError):  # else recorded later, from the next session (see _main)
            self._record_unrecorded(conn)

    def _record_unrecorded(self, conn: LockSession) -> None:
        """Write ``leader_lost`` events for terms that ended while the database was unreachable."""
        while self._unrecorded:
            term, kind, reason, stopped_at = self._unrecorded[0]
            conn.end_term(self._cluster, self._node, term, f"leader_{kind}", reason, stopped_at=stopped_at)
            self._unrecorded.pop(0)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""The ``leoflow serve`` process: HTTP API + elector + leader services + membership, in one process.

Every replica runs the same things:

- the Starlette app of :func:`leoflow.api.app.create_app` on uvicorn (every replica answers),
  given the executor's live log reader (running pods' output, read on whichever replica serves
  the request);
- the :class:`~leoflow.election.elector.Elector` in its own threads (lock session, keepalive,
  lease guard) — it only flips leadership, observed here through ``call_soon_threadsafe``;
- the :class:`~leoflow.election.supervisor.LeaderSupervisor`, which starts the scheduler, executor,
  executor singletons and housekeeping (DAG directory sync, retention) on acquire and cancels them
  on loss;
- membership heartbeats and the executor's ``replica_services`` (e.g. log shipping).

This module is the **composition root**: it alone decides which services a leader runs
(:func:`leader_services`, handed to the supervisor) and which modules a replica imports ahead
of its first term (:func:`modules_to_preload`, also used by standalone). The election itself
knows nothing of the scheduler or the executors (docs/adr/0008-layers.md).

Database connections: the lock connection, plus ``LEOFLOW_DB_POOL_SIZE`` split by
:class:`~leoflow.db.connection.budget.ConnectionBudget` between the API's pool, the background engine
created here (leader services, membership, replica services) and the scheduler's LISTEN
connection.

Shutdown (SIGTERM/SIGINT) is a **graceful handover**: stop contending; stop the leader services
(in-flight work gets ``LEOFLOW_SHUTDOWN_GRACE`` seconds) while still holding the lock; then
record ``leader_released`` and ``pg_advisory_unlock`` — a waiting follower is granted the lock
within milliseconds — then leave the membership, stop the HTTP server, exit 0.

Failure semantics: PostgreSQL being down never stops the process (liveness stays green, the
elector reconnects with jittered backoff, readiness fails). The process exits non-zero only
when the HTTP server cannot run (e.g. the port is taken), or at start when the database belongs
to another cluster (:func:`run` claims it or refuses with one line, exit 2; ADR 0010) — if the
database is unreachable at start, the elector makes the same check once it connects and the
replica stays unready with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence

import uvicorn

from leoflow import tracing
from leoflow.aiotasks import Registry, cancel_and_wait, restarting, start_guarded, wait_at_most
from leoflow.clock import Clock, SystemClock
from leoflow.db.connection.budget import ConnectionBudget
from leoflow.db.connection.database import Database
from leoflow.db.stores import installation
from leoflow.election import membership
from leoflow.election.elector import Elector, LeadershipGate
from leoflow.election.health import ElectionHealth
from leoflow.election.lock_setup import report_claim
from leoflow.election.supervisor import LeaderSupervisor, ServicesFactory, Stoppable
from leoflow.errors import DatabaseError, LeoflowError, SchemaNotCurrent
from leoflow.executor.base import ReplicaService
from leoflow.leadership import LeaderService
from leoflow.settings import Settings

log = logging.getLogger(__name__)


def leader_services(settings: Settings) -> tuple[Stoppable | None, list[LeaderService]]:
    """The production wiring of one term: a fresh executor, the scheduler, the executor's singletons,
    the day-2 services (backfills, the outcome observer, the webhook deliverer) and the housekeeping."""
    from leoflow.backfill.service import BackfillService
    from leoflow.executor.factory import executor_leader_services, make_executor
    from leoflow.notify.deliverer import WebhookDeliverer
    from leoflow.notify.observer import OutcomeObserver
    from leoflow.scheduler.service import SchedulerService

    executor = make_executor(settings)
    return executor, [SchedulerService(executor), *executor_leader_services(settings, executor),
                      BackfillService(), OutcomeObserver(), WebhookDeliverer(), *housekeeping_services(settings)]


def housekeeping_services(settings: Settings) -> list[LeaderService]:
    """The leader's housekeeping its settings ask for: the DAG directory sync, retention."""
    from leoflow.housekeeping.directory_sync import DagDirectorySync
    from leoflow.housekeeping.retention import RetentionService

    services: list[LeaderService] = []
    if settings.dag_files.directory is not None:
        services.append(DagDirectorySync(settings.dag_files.directory, settings.dag_files.source))
    if settings.retention.days > 0 or settings.retention.audit_days > 0:
        services.append(RetentionService(settings.retention.days, audit_days=settings.retention.audit_days))
    return services


def modules_to_preload(settings: Settings) -> list[str]:
    """What a replica imports before it can lead: the API, the scheduler, the configured executor.

    Importing ``kubernetes`` takes seconds on a busy host; done lazily inside the first
    acquisition it ran on the event loop and stalled the API and membership heartbeats. The one
    list, used by :class:`Replica` and by standalone mode (which overlaps it with PostgreSQL's
    start).
    """
    from leoflow.executor.factory import executor_modules

    return ["leoflow.api.app", "leoflow.scheduler.service", "leoflow.backfill.service", "leoflow.notify.observer",
            "leoflow.notify.deliverer", "leoflow.housekeeping.directory_sync", "leoflow.housekeeping.retention",
            *executor_modules(settings.executor.kind)]


def preload(settings: Settings) -> None:
    """Import :func:`modules_to_preload` (call it in a worker thread)."""
    for name in modules_to_preload(settings):
        importlib.import_module(name)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the replica orders the shutdown itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Bridge:
    """ElectionListener that hands transitions from the elector's threads to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, supervisor: LeaderSupervisor) -> None:
        self.loop = loop
        self.supervisor = supervisor

    def acquired(self, term: int) -> None:
        self.supervisor.notify(self.loop, "acquired", term)

    def lost(self, term: int, kind: str, reason: str) -> None:
        self.supervisor.notify(self.loop, "lost", term, kind, reason)


class Replica:
    """One replica process; :meth:`serve` runs until a signal, returns the exit code."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None,
                 services: ServicesFactory = leader_services,
                 extra_leader_services: Sequence[LeaderService] = (),
                 replica_services: Sequence[ReplicaService] | None = None) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self._services = services
        self._extra = extra_leader_services
        self._replica_services = replica_services

    async def serve(self) -> int:
        settings = self.settings
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        from leoflow.api.app import create_app
        from leoflow.executor.factory import executor_live_logs

        # The leader's work gets its own share of the connection budget (the API has another,
        # in create_app): neither can exhaust the other's connections.
        db = Database.with_pool(settings.database, application_name=f"leoflow:{settings.cluster.node_id}",
                           pool_size=ConnectionBudget.split(settings.database.pool_size).background)
        elector: Elector | None = None
        supervisor = LeaderSupervisor(settings, db, self.clock, step_down=lambda r: elector_step_down(r),
                                      factory=self._services, extra=self._extra)
        health = ElectionHealth()
        elector = Elector(settings, _Bridge(loop, supervisor), clock=self.clock, health=health,
                          gate=pools_gate(loop, db, timeout=max(1.0, settings.election.leader_lease / 2)))

        def elector_step_down(reason: str) -> None:
            assert elector is not None
            elector.step_down(reason)

        # proxy_headers off: nothing here uses the client address, and X-Forwarded-* headers
        # are only as trustworthy as the proxy chain, which a replica cannot know.
        app = create_app(settings, election_health=health, live_logs=executor_live_logs(settings))
        server = _Server(uvicorn.Config(app, host=settings.api.host, port=settings.api.port,
                                        log_config=None, access_log=False, lifespan="on",
                                        proxy_headers=False, server_header=False,
                                        timeout_graceful_shutdown=max(1, int(settings.election.shutdown_grace))))
        background: Registry = set()
        start_guarded(supervisor.run(), "leader-supervisor", on_death=lambda *_: stop.set(), registry=background)
        start_guarded(membership.heartbeat_forever(settings, db, lambda: elector.term is not None), "membership",
                      on_death=lambda *_: stop.set(), registry=background)
        for service in self._replica_service_list():
            start_guarded(restarting(_bind(service, settings, db), f"replica:{service.name}",
                                     pause=REPLICA_SERVICE_RESTART_PAUSE),
                          f"replica:{service.name}", registry=background)
        server_task = start_guarded(server.serve(), "http", may_return=True)
        # Off the event loop, before the first term can start: the API serves meanwhile.
        await asyncio.to_thread(preload, settings)
        # Everything imported so far lives as long as the process: keep it out of the cyclic
        # GC's full collections, whose pauses would otherwise show in the API's p99 latency.
        gc.freeze()
        elector.start()
        log.info("replica started", extra={"cluster": settings.cluster.name, "api_url": settings.api_url})

        stop_task = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait({stop_task, server_task}, return_when=asyncio.FIRST_COMPLETED)
        code = 0 if stop_task in done else 1
        if code:
            log.error("HTTP server stopped unexpectedly; shutting down")
        log.info("replica shutting down", extra={"cluster": settings.cluster.name})

        # 1. stop contending; 2. stop leader work while still holding the lock; 3. release.
        elector.begin_shutdown()
        await supervisor.stop()
        await asyncio.to_thread(elector.release_and_join, settings.election.shutdown_grace + 5)
        await cancel_and_wait(background)
        with contextlib.suppress(LeoflowError, TimeoutError):  # best effort: the node is marked down by others
            await wait_at_most(membership.leave(settings, db), 3)
        server.should_exit = True
        with contextlib.suppress(TimeoutError):
            await wait_at_most(server_task, settings.election.shutdown_grace + 5)
        await cancel_and_wait([server_task, stop_task])
        with contextlib.suppress(LeoflowError):
            await db.dispose()
        log.info("replica stopped", extra={"exit_code": code})
        return code

    def _replica_service_list(self) -> list[ReplicaService]:
        if self._replica_services is not None:
            return list(self._replica_services)
        from leoflow.executor.factory import executor_replica_services

        return executor_replica_services(self.settings)


#: Seconds before a dead replica service (e.g. the log shipper) is started again.
REPLICA_SERVICE_RESTART_PAUSE = 5.0


def _bind(service: ReplicaService, settings: Settings, db: Database) -> Callable[[], Awaitable[None]]:
    def run() -> Awaitable[None]:
        return service.run(settings, db)
    return run


def pools_gate(loop: asyncio.AbstractEventLoop, db: Database, *, timeout: float) -> LeadershipGate:
    """The elector's gate: can this replica's leader pool open a connection and run a statement?

    Called from the elector's thread; the check itself runs on the event loop, where the pool
    lives. A replica whose pools cannot work (a pooler refusing them, wrong credentials for
    them) must never be elected: it would take terms only to have its scheduler die.
    """
    def gate() -> str | None:
        future = asyncio.run_coroutine_threadsafe(db.check(), loop)
        try:
            future.result(timeout)
        except DatabaseError as exc:
            return str(exc)
        except TimeoutError:
            future.cancel()
            return f"a connection did not work within {timeout:g}s"
        return None
    return gate


def claim_database(settings: Settings) -> None:
    """Claim the database for this cluster at start, or refuse it (``ClusterMismatch``, ADR 0010).

    An unreachable or unmigrated database is not a reason to refuse: the elector makes the same
    check on every session it opens, and readiness says what is wrong meanwhile.
    """
    try:
        report_claim(installation.claim_at_start(settings.require_database_url(), settings.cluster.name,
                                                 settings.cluster.node_id))
    except SchemaNotCurrent:
        log.warning("the database schema is not migrated yet; the cluster is checked once it is",
                    extra={"cluster": settings.cluster.name})
    except DatabaseError as exc:
        log.warning("cannot check which cluster the database belongs to yet: %s", exc,
                    extra={"cluster": settings.cluster.name})


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (it comes with ``uvicorn[standard]``), else asyncio's own loop.

    What uvicorn's ``loop="auto"`` would pick, had uvicorn started the loop: the replica starts
    it itself (uvicorn runs inside it). uvloop cuts the API's CPU per request by about a
    third (``bench/api.py``), which is most of a core's headroom at full load.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(settings: Settings, *, extra_leader_services: Sequence[LeaderService] = ()) -> int:
    """Run a replica until SIGTERM/SIGINT; the exit code (0 after a clean handover)."""
    # Traces when an OTLP endpoint is set (leoflow.tracing: the SDK reads its own OTEL_* variables);
    # first, so that OTEL_* values the SDK refuses stop the replica before it touches the database.
    tracing.configure(os.environ, node_id=settings.cluster.node_id)
    try:
        claim_database(settings)
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(Replica(settings, extra_leader_services=extra_leader_services).serve())
    finally:
        tracing.shutdown()

"""The ``leoflow serve`` process: HTTP API + elector + leader services + membership, in one process.

Every replica runs the same things:

- the Starlette app of :func:`leoflow.api.app.create_app` on uvicorn (every replica answers);
- the :class:`~leoflow.election.elector.Elector` in its own threads (lock session, keepalive,
  lease guard) — it only flips leadership, observed here through ``call_soon_threadsafe``;
- the :class:`~leoflow.election.services.LeaderSupervisor`, which starts the scheduler, executor
  and executor singletons on acquire and cancels them on loss;
- membership heartbeats and the executor's ``replica_services`` (e.g. log shipping).

Database connections: the lock connection, plus ``LEOFLOW_DB_POOL_SIZE`` split by
:class:`~leoflow.db.budget.ConnectionBudget` between the API's pool, the background engine
created here (leader services, membership, replica services) and the scheduler's LISTEN
connection.

Shutdown (SIGTERM/SIGINT) is a **graceful handover**: stop contending; stop the leader services
(in-flight work gets ``LEOFLOW_SHUTDOWN_GRACE`` seconds) while still holding the lock; then
record ``leader_released`` and ``pg_advisory_unlock`` — a waiting follower is granted the lock
within milliseconds — then leave the membership, stop the HTTP server, exit 0.

Failure semantics: PostgreSQL being down never stops the process (liveness stays green, the
elector reconnects with jittered backoff, readiness fails). The process exits non-zero only
when the HTTP server cannot run (e.g. the port is taken).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable, Iterator, Sequence

import uvicorn

from leoflow.clock import Clock, SystemClock
from leoflow.db.budget import ConnectionBudget
from leoflow.db.engine import make_async_engine
from leoflow.election import membership
from leoflow.election.elector import Elector
from leoflow.election.services import (
    LeaderSupervisor,
    ServicesFactory,
    default_services,
    preload_leader_modules,
)
from leoflow.executor.base import ReplicaService
from leoflow.leadership import LeaderService
from leoflow.settings import Settings

log = logging.getLogger(__name__)


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
                 services: ServicesFactory = default_services,
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

        # The leader's work gets its own share of the connection budget (the API has another,
        # in create_app): neither can exhaust the other's connections.
        engine = make_async_engine(settings.database, application_name=f"leoflow:{settings.cluster.node_id}"[:63],
                                   pool_size=ConnectionBudget.split(settings.database.pool_size).background)
        elector: Elector | None = None
        supervisor = LeaderSupervisor(settings, engine, self.clock, step_down=lambda r: elector_step_down(r),
                                      factory=self._services, extra=self._extra)
        elector = Elector(settings, _Bridge(loop, supervisor), clock=self.clock)

        def elector_step_down(reason: str) -> None:
            assert elector is not None
            elector.step_down(reason)

        # proxy_headers off: nothing here uses the client address, and X-Forwarded-* headers
        # are only as trustworthy as the proxy chain, which a replica cannot know.
        server = _Server(uvicorn.Config(create_app(settings), host=settings.api.host, port=settings.api.port,
                                        log_config=None, access_log=False, lifespan="on",
                                        proxy_headers=False, server_header=False,
                                        timeout_graceful_shutdown=max(1, int(settings.election.shutdown_grace))))
        background = [
            asyncio.create_task(supervisor.run(), name="leader-supervisor"),
            asyncio.create_task(membership.heartbeat_forever(settings, engine, lambda: elector.term is not None),
                                name="membership"),
            *[asyncio.create_task(_keep_running(s, settings, engine), name=f"replica:{s.name}")
              for s in self._replica_service_list()],
        ]
        server_task = asyncio.create_task(server.serve(), name="http")
        # Off the event loop, before the first term can start: the API serves meanwhile.
        await asyncio.to_thread(preload_leader_modules, settings)
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
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(membership.leave(settings, engine), timeout=3)
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server_task, timeout=settings.election.shutdown_grace + 5)
        stop_task.cancel()
        await engine.dispose()
        log.info("replica stopped", extra={"exit_code": code})
        return code

    def _replica_service_list(self) -> list[ReplicaService]:
        if self._replica_services is not None:
            return list(self._replica_services)
        from leoflow.executor.factory import replica_services

        return replica_services(self.settings)


async def _keep_running(service: ReplicaService, settings: Settings, engine: object) -> None:
    """Guard a replica service: log its death and restart it after a pause."""
    while True:
        try:
            await service.run(settings, engine)  # type: ignore[arg-type]
            log.error("replica service returned; restarting", extra={"service": service.name})
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replica service died; restarting", extra={"service": service.name})
        await asyncio.sleep(5)


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
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(Replica(settings, extra_leader_services=extra_leader_services).serve())

"""An in-memory executor for tests and benchmarks: nothing runs, tries finish when told to.

Two modes:

- ``instant`` (default): every submitted try is reported ``running`` and then finished with the
  outcome chosen by ``outcome(launch)`` (default: success, exit code 0) after ``delay`` seconds
  (a number, or a function of the launch);
- ``manual``: tries stay running until a test calls :meth:`MemoryExecutor.complete`.

The outside world (what a Kubernetes cluster or a process table would be) is a
:class:`MemoryWorld`. Several executor instances may share one world, which is how tests model a
failover: the new leader's executor reconciles with the same world in :meth:`start` and adopts
the tries the old one launched (it reports them, it never launches them again).

Failure semantics: ``submit`` is idempotent per :class:`TryKey` (a second submit of a known
try is counted in ``world.duplicate_submits`` and does nothing). With ``check_fence=True`` the
executor checks its term in the database before launching, exactly like the real executors, so
an ex-leader launches nothing (it logs and returns; like the others it does not raise). Reports
are delivered from a background task (never from inside
``submit``), so the scheduler is never re-entered while it is submitting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from leoflow.aiotasks import Registry, cancel_and_wait, start_guarded
from leoflow.clock import SystemClock
from leoflow.errors import FencedOut
from leoflow.executor.base import Report
from leoflow.executor.failures import try_error
from leoflow.leadership import LeaderContext
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey, TryState

log = logging.getLogger(__name__)

Outcome = tuple[TryState, int | None, str | None]


def _default_outcome(launch: TaskLaunch) -> Outcome:
    return ("success", 0, None)


@dataclass
class MemoryTry:
    """One try as the fake outside world knows it."""

    launch: TaskLaunch
    state: TryState = "running"
    exit_code: int | None = None
    reason: str | None = None
    created_by_term: int = 0


@dataclass
class MemoryWorld:
    """The outside world shared by executor instances (one per leadership term)."""

    tries: dict[TryKey, MemoryTry] = field(default_factory=dict)
    launches: int = 0
    duplicate_submits: int = 0
    cancelled: list[TryKey] = field(default_factory=list)


class MemoryExecutor:
    """Implements :class:`leoflow.executor.base.Executor` without running anything."""

    name = "memory"

    def __init__(self, *, mode: str = "instant", delay: float | Callable[[TaskLaunch], float] = 0.0,
                 outcome: Callable[[TaskLaunch], Outcome] | None = None,
                 world: MemoryWorld | None = None, check_fence: bool = False) -> None:
        if mode not in ("instant", "manual"):
            raise ValueError(f"mode must be 'instant' or 'manual', not {mode!r}")
        self.mode = mode
        self.delay = delay
        self.outcome = outcome or _default_outcome
        self.world = world if world is not None else MemoryWorld()
        self.check_fence = check_fence
        self._ctx: LeaderContext | None = None
        self._report: Report | None = None
        self._queue: asyncio.Queue[StatusUpdate] = asyncio.Queue()
        self._tasks: Registry = set()
        self._pump: asyncio.Task[Any] | None = None
        self._clock = SystemClock()

    # ------------------------------------------------------------------ Executor protocol

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        self._ctx = ctx
        self._clock = ctx.clock  # type: ignore[assignment]
        self._report = report
        self._pump = start_guarded(self._deliver(), "memory-executor-reports")
        # Reconcile: report every try the world knows, so a new leader learns their state.
        for key, entry in list(self.world.tries.items()):
            self._emit(key, entry.state, entry.exit_code, entry.reason)
            if entry.state == "running" and self.mode == "instant":
                self._spawn(self._finish_later(entry.launch))

    async def submit(self, launch: TaskLaunch) -> None:
        if self._report is None:
            raise RuntimeError("MemoryExecutor.submit called before start()")
        if launch.key in self.world.tries:
            self.world.duplicate_submits += 1
            entry = self.world.tries[launch.key]
            self._emit(launch.key, entry.state, entry.exit_code, entry.reason)
            return
        if self.check_fence:
            try:
                await self._check_fence(launch.term)
            except FencedOut as exc:
                log.warning("not launching: fenced out", extra={"try": str(launch.key), "error": str(exc)})
                return
        self.world.tries[launch.key] = MemoryTry(launch=launch, created_by_term=launch.term)
        self.world.launches += 1
        self._emit(launch.key, "running", None, None)
        if self.mode == "instant":
            self._spawn(self._finish_later(launch))

    async def cancel(self, key: TryKey) -> None:
        entry = self.world.tries.get(key)
        if entry is None or entry.state != "running":
            return
        self.world.cancelled.append(key)
        self._set(key, "failed", None, "cancelled")

    async def logs(self, key: TryKey) -> str | None:
        entry = self.world.tries.get(key)
        if entry is None:
            return None
        return f"[memory executor] {' '.join([*entry.launch.command, *entry.launch.args])}\n"

    async def stop(self) -> None:
        await cancel_and_wait([*self._tasks, *([self._pump] if self._pump else [])])
        self._pump = None
        self._report = None

    # ------------------------------------------------------------------ test controls

    async def complete(self, key: TryKey, state: TryState = "success", exit_code: int | None = 0,
                       reason: str | None = None) -> None:
        """Finish a running try (manual mode); raises KeyError for an unknown try."""
        if key not in self.world.tries:
            raise KeyError(key)
        self._set(key, state, exit_code, reason)

    def running(self) -> list[TryKey]:
        return sorted(k for k, t in self.world.tries.items() if t.state == "running")

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until every queued report has been delivered (and instant tries finished)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks or not self._queue.empty() or self._queue._unfinished_tasks:  # type: ignore[attr-defined]
            if loop.time() > deadline:
                raise TimeoutError("memory executor did not drain")
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------------ internals

    async def _check_fence(self, term: int) -> None:
        assert self._ctx is not None
        async with self._ctx.db.fenced(self._ctx.cluster, term):
            pass

    def _set(self, key: TryKey, state: TryState, exit_code: int | None, reason: str | None) -> None:
        entry = self.world.tries[key]
        if entry.state != "running":
            return
        entry.state, entry.exit_code, entry.reason = state, exit_code, reason
        self._emit(key, state, exit_code, reason)

    def _emit(self, key: TryKey, state: TryState, exit_code: int | None, reason: str | None) -> None:
        index = "" if key.map_index < 0 else f"[{key.map_index}]"
        self._queue.put_nowait(StatusUpdate(key=key, state=state, at=self._clock.now(), exit_code=exit_code,
                                            reason=reason, executor_ref=f"memory:{key.dag_id}/{key.run_id}/"
                                            f"{key.task_id}{index}/{key.try_number}"))

    async def _finish_later(self, launch: TaskLaunch) -> None:
        try:
            delay = self.delay(launch) if callable(self.delay) else self.delay
            if delay > 0:
                await asyncio.sleep(delay)
            state, code, reason = self.outcome(launch)
        except Exception as exc:  # containment: one try's outcome function fails that try alone
            state, code, reason = "failed", None, try_error(launch.key, exc, doing="finishing it")
        self._set(launch.key, state, code, reason)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        start_guarded(coro, "memory-finish", may_return=True, registry=self._tasks)

    async def _deliver(self) -> None:
        while True:
            update = await self._queue.get()
            try:
                if self._report is not None:
                    await self._report(update)
            finally:
                self._queue.task_done()

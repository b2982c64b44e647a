"""Killing the tries a step flagged ``cancelling``, beside the scheduling loop, never in it.

A cancelled run, a timeout or a cleared task only *flags* its running try ``cancelling`` inside a
step (:func:`~leoflow.db.stores.tries.request_kill`). After the step commits, the scheduler
hands the tries it listed to :class:`TryKiller`, which asks the executor to kill each one in a
task of its own. This is its own module because a kill is a different job from a tick: it waits on
the executor (a pod delete, a process group's grace period), holds no transaction while it does,
and outlives the step that listed it.

Failure semantics:

- **Killed, then recorded.** The executor's ``cancel`` returns once the try is confirmed gone
  (escalating after ``LEOFLOW_KILL_GRACE``); only then is the try recorded ``cancelled``, in a
  short fenced write. A task cleared meanwhile is released from ``cancelling`` by the scheduler's
  next periodic step, which :class:`TryKiller` pokes.
- **Never twice.** A try being killed, or killed since the last step listed its victims, is not
  killed again (see :meth:`TryKiller.spawn`).
- **Bounded.** At most :data:`KILL_CONCURRENCY` kills run at once; the rest wait holding nothing.
- **Retried, not lost.** A kill the executor refuses, or whose record the database refuses, is
  logged and the try stays ``cancelling``: the next step lists it again. A fenced-out record
  (leadership lost) is only logged: the next leader lists it. One try that cannot be killed never
  stops the others' kills.
- **Watched.** A kill not done :attr:`TryKiller.slow_kill_after` seconds after it got its slot is
  reported (a warning, ``leoflow_scheduler_slow_kills_total``) while it still hangs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from leoflow.aiotasks import Registry, cancel_and_wait, start_guarded
from leoflow.db.stores import tries as try_store
from leoflow.errors import DatabaseError, FencedOut, LeoflowError
from leoflow.executor.base import Executor
from leoflow.leadership import LeaderContext
from leoflow.metrics import scheduler as metrics
from leoflow.model.tries import TryKey

log = logging.getLogger(__name__)

#: Tries being killed at once. Cancelling a run of hundreds of running tries must not start
#: hundreds of kills (each reads logs and calls the API server); the rest wait their turn,
#: holding nothing (no database connection is held while an executor kills).
KILL_CONCURRENCY = 16
#: Seconds after which a kill the executor has not finished is reported (a warning naming the try,
#: ``leoflow_scheduler_slow_kills_total``): the try shows ``cancelling`` all that time. Far past
#: what a kill may take when its API server or processes answer (the Kubernetes executor bounds
#: its log read to 5 s and each delete to a quarter of the lease; the local one waits its kill
#: grace), so each one is worth a look.
SLOW_KILL_AFTER = 30.0


class TryKiller:
    """The kills of one leadership term (see the module docstring).

    ``on_killed`` is called after each recorded kill: the scheduler then runs its periodic parts
    on the next tick, which release a cleared task that waited for this try.
    """

    def __init__(self, ctx: LeaderContext, executor: Executor, on_killed: Callable[[], None]) -> None:
        self.ctx = ctx
        self.executor = executor
        self.on_killed = on_killed
        #: Kills in progress, by try id.
        self.killing: dict[int, asyncio.Task[None]] = {}
        #: Tries whose kill was recorded since the last step spawned its kills (see spawn).
        self._killed_lately: set[int] = set()
        self.tasks: Registry = set()
        self._slots = asyncio.Semaphore(KILL_CONCURRENCY)
        self.slow_kill_after = SLOW_KILL_AFTER

    def spawn(self, victims: Sequence[try_store.TryToKill]) -> None:
        """Start a kill for each victim that is not being killed and was not killed lately.

        A step reads its victims inside its transaction, and a kill running beside the loop may
        record its try killed while that transaction is still open: the list then names a try
        that is no longer ``cancelling``, and killing it again would cancel it twice (a second
        pod delete) and time it twice. A try recorded killed before the list was read is not in
        it (a killed try is never ``cancelling`` again), so a listed try killed since the last
        spawn was killed after its listing, and is skipped. Steps run one at a time: every later
        step lists after this spawn, so the set starts over.
        """
        for victim in victims:
            if victim.task_try_id in self.killing or victim.task_try_id in self._killed_lately:
                continue
            self.killing[victim.task_try_id] = start_guarded(
                self._kill(victim.task_try_id, victim.key), f"scheduler-kill:{victim.task_try_id}",
                may_return=True, registry=self.tasks)
        self._killed_lately.clear()

    async def _kill(self, task_try_id: int, key: TryKey) -> None:
        """Executor cancels may wait for a grace period; they run beside the loop, not in it.

        At most :data:`KILL_CONCURRENCY` at once; the cancel (network) happens with no
        transaction open, the "killed" mark is a short fenced write after it. The time from here
        to the mark is ``leoflow_scheduler_kill_duration_seconds``; a kill not done
        :attr:`slow_kill_after` seconds after it got its slot is reported while it still hangs.
        """
        loop = asyncio.get_running_loop()
        requested = started = loop.time()
        watchdog: asyncio.TimerHandle | None = None
        try:
            async with self._slots:
                started = loop.time()
                watchdog = loop.call_later(self.slow_kill_after, self._kill_is_slow, key)
                await self.executor.cancel(key)
            async with self.ctx.db.fenced(self.ctx.cluster, self.ctx.term) as conn:
                await try_store.mark_tries_killed(conn, [task_try_id], self.ctx.clock.now())
            self._killed_lately.add(task_try_id)
            self.on_killed()  # a cleared task waiting for this try may be released now (periodic)
            metrics.KILL_SECONDS.observe(loop.time() - requested)
            if loop.time() - started >= self.slow_kill_after:
                log.warning("slow kill recorded", extra={"try": str(key), "seconds": round(loop.time() - started, 3)})
        except asyncio.CancelledError:
            raise
        except FencedOut:
            log.info("kill not recorded: fenced out", extra={"try": str(key)})
        except DatabaseError as exc:
            log.warning("could not record a kill; will retry", extra={"try": str(key), "error": str(exc)})
        except LeoflowError as exc:  # the executor could not kill it (its API refused): it stays cancelling
            log.warning("could not kill try; will retry", extra={"try": str(key), "error": str(exc)[:300]})
        except Exception:  # containment: one try the executor cannot kill must not stop the others' kills
            log.exception("could not kill try; will retry", extra={"try": str(key)})
        finally:
            if watchdog is not None:
                watchdog.cancel()
            self.killing.pop(task_try_id, None)

    def _kill_is_slow(self, key: TryKey) -> None:
        metrics.SLOW_KILLS.inc()
        log.warning("kill not completed", extra={"try": str(key), "seconds": self.slow_kill_after,
                                                 "executor": getattr(self.executor, "name", "?")})

    async def close(self, timeout: float | None = None) -> None:
        """Cancel the kills in progress; waits at most ``timeout`` s for them (None: until they end)."""
        await cancel_and_wait(self.tasks, timeout=timeout)

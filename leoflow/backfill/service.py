"""The backfill service: the leader creates each running backfill's runs as room allows.

Every ``interval`` it takes one step per running backfill, each in its own fenced transaction
(:mod:`leoflow.db.stores.backfills` describes the step): runs are created for the next slots while
fewer than the backfill's ``max_active_runs`` of its runs are unfinished, a failed run is
re-run when asked, and the backfill completes once every slot was handled and its last run
ended. The scheduler then treats these runs like any other queued or running run (the DAG's own
``max_active_runs`` still applies when it starts them).

Failure semantics: a step is all-or-nothing; a lost term writes nothing; one backfill whose
step fails (its DAG's schedule was removed meanwhile, a bug) is logged and does not keep the
others from advancing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from leoflow.db.stores import backfills
from leoflow.db.stores.backfills import RunningBackfill
from leoflow.errors import DatabaseError, FencedOut
from leoflow.leadership import LeaderContext, run_periodically
from leoflow.model.spec.timetable import next_fire_after

log = logging.getLogger(__name__)


class BackfillService:
    """LeaderService: see the module docstring."""

    name = "backfill"

    def __init__(self, *, interval: float = 1.0) -> None:
        self.interval = interval

    async def run(self, ctx: LeaderContext) -> None:
        await run_periodically(ctx, self.name, self.step_all, interval=self.interval)

    async def step_all(self, ctx: LeaderContext) -> bool:
        async with ctx.db.connect() as conn:
            ids = await backfills.running_backfill_ids(conn)
        for backfill_id in ids:
            try:
                await self.step(ctx, backfill_id)
            except (FencedOut, DatabaseError):
                raise
            except Exception:  # boundary: one backfill's step, never the others'
                log.exception("backfill step failed", extra={"backfill_id": backfill_id})
        return False

    async def step(self, ctx: LeaderContext, backfill_id: int) -> None:
        async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
            b = await backfills.lock_running_backfill(conn, backfill_id)
            if b is None:
                return
            now = ctx.clock.now()
            room = b.max_active_runs - b.active_runs
            cursor = b.next_logical_date if b.schedule else None
            created = rerun = skipped = 0
            while room > 0 and cursor is not None:
                slots = _slots(b, cursor, room)
                inserted = await backfills.insert_backfill_runs(conn, b, slots, now, ctx.term)
                rest = [s for s in slots if s not in inserted]
                existing = await backfills.existing_runs(conn, b.dag_id, rest)
                failed = [pk for pk, state in existing.values() if state == "failed"] if b.rerun_failed else []
                reopened = await backfills.rerun_failed_runs(conn, failed, b.id, now, ctx.term)
                created += len(inserted)
                rerun += len(reopened)
                skipped += len(rest) - len(reopened)
                room -= len(inserted) + len(reopened)
                following = next_fire_after(b.schedule or "", b.timezone, slots[-1])
                cursor = following if following < b.end_at else None
            unfinished = b.active_runs + created + rerun
            completed = cursor is None and unfinished == 0
            if created or rerun or skipped or completed or cursor != b.next_logical_date:
                await backfills.record_step(conn, b.id, next_logical_date=cursor, created=created, rerun=rerun,
                                                 skipped=skipped, completed=completed, now=now, term=ctx.term)
        if created or rerun or completed:
            log.info("backfill advanced", extra={"backfill_id": b.id, "dag_id": b.dag_id, "runs_created": created,
                                                 "rerun": rerun, "skipped": skipped, "completed": completed})


def _slots(backfill: RunningBackfill, cursor: datetime, count: int) -> list[datetime]:
    """Up to ``count`` slots from ``cursor`` (itself a slot) before the backfill's end."""
    assert backfill.schedule is not None
    slots = [cursor]
    while len(slots) < count:
        following = next_fire_after(backfill.schedule, backfill.timezone, slots[-1])
        if following >= backfill.end_at:
            break
        slots.append(following)
    return slots

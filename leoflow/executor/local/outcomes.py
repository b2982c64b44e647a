"""Every replica of the local executor reports how its own tries' processes ended (issue 17 §5).

A replica that loses leadership while its subprocesses run — a database outage is the usual
cause — keeps those processes (they survive the executor's stop) but may not report through the
scheduler: only the leader's fenced writes change task states. The next leader, on another host,
cannot see them. So each replica runs :class:`LocalOutcomeReporter`: for the tries claimed by
this replica that are still live in the database and not running in this process any more, it
settles their outcome from the files on this host (:func:`~leoflow.executor.local.process.settle`),
stores their logs, and records the outcome — with what a successful try wrote to its outputs
file, unchecked — in ``try_outcomes``
(:mod:`leoflow.db.stores.try_outcomes`), where the leader's executor is waiting for it
(:meth:`LocalExecutor._await_owner <leoflow.executor.local.executor.LocalExecutor>`).

While this replica's own executor runs (it leads), the reporter stands aside: the executor
reports its tries itself. Failure semantics: a database error skips the round (logged) and the
next round retries; one try's problem never stops the others (the report is per try).
"""

from __future__ import annotations

import asyncio
import logging

from leoflow.db.connection.database import Database
from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores import tries as try_store
from leoflow.db.stores import try_outcomes as try_outcome_store
from leoflow.errors import DatabaseError
from leoflow.executor.local import executor as local
from leoflow.executor.local.process import TryFiles, settle
from leoflow.executor.log_tail import read_tail
from leoflow.settings import Settings

log = logging.getLogger(__name__)

#: Seconds between rounds: well inside LEOFLOW_NODE_DOWN_AFTER (15 s), the longest a new leader
#: waits for this replica once it stopped heartbeating.
REPORT_INTERVAL = 2.0


class LocalOutcomeReporter:
    """A replica service (see :class:`~leoflow.executor.base.ReplicaService`)."""

    name = "local-outcomes"

    async def run(self, settings: Settings, db: Database) -> None:
        while True:
            await asyncio.sleep(REPORT_INTERVAL)
            if local.executor_running_here():
                continue
            try:
                reported = await report_once(settings, db)
            except DatabaseError as exc:  # the next round retries
                log.warning("could not report local outcomes", extra={"error": str(exc)[:300]})
                continue
            if reported:
                log.info("reported outcomes of tries this replica ran", extra={"tries": reported})


async def report_once(settings: Settings, db: Database) -> list[str]:
    """One round; the names of the tries whose outcomes it reported."""
    me = try_store.claimant(settings.cluster.name, settings.cluster.node_id)
    async with db.connect() as conn:
        claims = await try_outcome_store.unreported_claims(conn, me)
    reported = []
    for task_try_id, name in claims:
        if local.process_running_here(name):  # reported once it ends
            continue
        files = TryFiles(settings.home, name)
        outcome = await settle(files)
        outputs = files.read_outputs() if outcome.state == "success" else None
        capped = read_tail(files.log, settings.executor.task_log_max_bytes)
        async with db.transaction() as conn:
            if files.log.exists():
                await log_store.store_logs(conn, task_try_id, capped.text, truncated=capped.truncated,
                                                size_bytes=capped.size_bytes)
            await try_outcome_store.report_outcome(conn, task_try_id, state=outcome.state, exit_code=outcome.exit_code,
                                                   reason=outcome.reason, reported_by=me, outputs=outputs)
        reported.append(name)
    return reported

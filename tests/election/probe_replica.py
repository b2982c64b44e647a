"""``python -m tests.election.probe_replica serve ...``: ``leoflow serve`` plus a fenced probe writer.

Exactly the ``leoflow serve`` code path (CLI parsing, auth check, logging, replica runtime); the
only difference is one extra leader-only service, :class:`FencedProbe`, which commits a fenced
write (``check_term_async`` first, like every scheduler write) every 50 ms and calls
``ctx.progress()``. Tests use its rows (``cluster_events.kind = 'probe_write'``) to prove that an
ex-leader never commits under an old term. ``PROBE_SERVICES=probe`` replaces the production
leader services (scheduler, executor) with the probe alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from leoflow import replica
from leoflow.cli.main import main
from leoflow.db.connection.fencing import check_term_async
from leoflow.db.stores import cluster_events
from leoflow.leadership import LeaderContext, LeaderService
from leoflow.settings import Settings


class FencedProbe:
    name = "fenced-probe"

    async def run(self, ctx: LeaderContext) -> None:
        while True:
            async with ctx.db.transaction() as conn:
                await check_term_async(conn, ctx.cluster, ctx.term)
                await cluster_events.record_event_async(conn, ctx.cluster, "probe_write", ctx.node_id, ctx.term, {})
            ctx.progress()
            await asyncio.sleep(0.05)


def _probe_only(settings: Settings) -> tuple[Any, list[LeaderService]]:
    return None, []


def _run(settings: Settings, **_: Any) -> int:
    kwargs: dict[str, Any] = {"extra_leader_services": [FencedProbe()]}
    if os.environ.get("PROBE_SERVICES", "real") == "probe":
        kwargs["services"] = _probe_only
    return asyncio.run(replica.Replica(settings, **kwargs).serve())


if __name__ == "__main__":
    replica.run = _run  # type: ignore[assignment]
    sys.exit(main(sys.argv[1:]))

"""The compiled DAG versions a scheduling step needs, each compiled at most once per term.

A version that cannot be compiled — its stored spec is not valid JSON for this release, nests
too deeply to decode, or fails validation (written by an older release or by hand) — is a
*broken* version: it is remembered with its reason (so it is not re-parsed on every tick), and
the scheduler fails the runs that use it instead of failing itself
(:mod:`leoflow.scheduler.containment`).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta

from leoflow.db.connection.database import Connection, Database
from leoflow.db.stores import dag_versions
from leoflow.db.stores.runs import starts as run_starts
from leoflow.model.spec.graph import DEFAULT_CACHE_SIZE, DagGraph, GraphCache
from leoflow.scheduler.containment import contained, count

#: Broken versions remembered per term (each costs a few hundred bytes).
BROKEN_MEMORY = 1024
#: How far ahead a new term compiles the versions of due DAGs (:meth:`VersionGraphs.warm`).
WARM_AHEAD = timedelta(minutes=10)
#: Versions compiled between two yields to the event loop while warming (a few milliseconds).
WARM_CHUNK = 100


class VersionGraphs:
    """Graphs by ``dag_versions.id``: cached, loaded in one query per step, broken ones set aside."""

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.cache = GraphCache(cache_size)
        self._broken: OrderedDict[int, str] = OrderedDict()

    def broken(self, version_id: int) -> str | None:
        """Why ``version_id`` cannot be used (a reason to store on its runs), or None."""
        return self._broken.get(version_id)

    async def load(self, conn: Connection, version_ids: Iterable[int]) -> dict[int, DagGraph]:
        """Every wanted version that compiles, however many there are (the result holds them, not the
        cache); broken ones are left out and answer :meth:`broken`."""
        wanted = {v for v in version_ids if v not in self._broken}
        found: dict[int, DagGraph] = {}
        for vid in wanted:
            graph = self.cache.lookup(vid)
            if graph is not None:
                found[vid] = graph
        missing = sorted(wanted - found.keys())
        if missing:
            texts = await dag_versions.load_specs(conn, missing)
            for vid in missing:
                try:
                    found[vid] = self.cache.add(vid, json.loads(texts[vid]))
                except Exception as exc:  # containment: one version's stored spec, whatever is wrong with it
                    self._set_broken(vid, exc)
        return found

    async def warm(self, db: Database, now: datetime) -> int:
        """Compile the current versions of the DAGs due within :data:`WARM_AHEAD` (at most the
        cache's size), a chunk at a time; returns how many were compiled.

        A term starts with an empty cache, and the first boundary after it paid for every due
        DAG's compile inside its steps: at 10,000 DAGs, 2.5 s of the leader's CPU and two more
        seconds before the last run succeeded than at the next boundary. A leader that takes over
        just before midnight is exactly when that matters, so the compile happens beside the loop
        as soon as the term starts. Read-only; a version compiled meanwhile by a step is skipped.
        """
        async with db.connect() as conn:
            wanted = await run_starts.versions_due_before(conn, now + WARM_AHEAD, self.cache.size)
        compiled = 0
        for at in range(0, len(wanted), WARM_CHUNK):
            chunk = [v for v in wanted[at:at + WARM_CHUNK] if v not in self.cache and v not in self._broken]
            if chunk:
                async with db.connect() as conn:
                    compiled += len(await self.load(conn, chunk))
            await asyncio.sleep(0)
        return compiled

    def _set_broken(self, version_id: int, exc: Exception) -> None:
        fault = contained("dag_version", version_id, exc)
        count([fault])
        self._broken[version_id] = fault.reason
        while len(self._broken) > BROKEN_MEMORY:
            self._broken.popitem(last=False)

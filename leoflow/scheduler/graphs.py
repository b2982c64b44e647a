"""The compiled DAG versions a scheduling step needs, each compiled at most once per term.

A version that cannot be compiled — its stored spec is not valid JSON for this release, nests
too deeply to decode, or fails validation (written by an older release or by hand) — is a
*broken* version: it is remembered with its reason (so it is not re-parsed on every tick), and
the scheduler fails the runs that use it instead of failing itself
(:mod:`leoflow.scheduler.containment`).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable

from leoflow.db.connection.database import Connection
from leoflow.db.stores import dag_versions
from leoflow.model.spec.graph import DEFAULT_CACHE_SIZE, DagGraph, GraphCache
from leoflow.scheduler.containment import contained, count

#: Broken versions remembered per term (each costs a few hundred bytes).
BROKEN_MEMORY = 1024


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

    def _set_broken(self, version_id: int, exc: Exception) -> None:
        fault = contained("dag_version", version_id, exc)
        count([fault])
        self._broken[version_id] = fault.reason
        while len(self._broken) > BROKEN_MEMORY:
            self._broken.popitem(last=False)

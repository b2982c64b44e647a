"""Test helpers for executor tests: task-try rows in a real database and a report recorder.

The scheduler is not under test here, so :class:`Recorder` plays its part: it collects every
:class:`StatusUpdate` and, like the scheduler's CAS would, stamps terminal states on the try row
(``state``, ``ended_at``) so that log shipping and GC see finished tries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.engine import make_async_engine
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey
from leoflow.settings import Settings


@dataclass
class Seeded:
    key: TryKey
    task_try_id: int

    def launch(self, command: list[str], *, term: int, **kw: object) -> TaskLaunch:
        return TaskLaunch(key=self.key, task_try_id=self.task_try_id, term=term, image=kw.pop("image", "busybox"),  # type: ignore[arg-type]
                          command=command, **kw)  # type: ignore[arg-type]


async def set_term(engine: AsyncEngine, cluster: str, term: int, node_id: str = "n1") -> None:
    async with engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO cluster_leadership (cluster, term, node_id) VALUES (:c, :t, :n) "
            "ON CONFLICT (cluster) DO UPDATE SET term = EXCLUDED.term, node_id = EXCLUDED.node_id"),
            {"c": cluster, "t": term, "n": node_id})


async def seed_tries(engine: AsyncEngine, n: int, *, dag: str = "etl", run: str = "manual-1",
                     task_prefix: str = "task", term: int = 1, try_number: int = 1) -> list[Seeded]:
    """``n`` task instances with one queued try each, in one run of one DAG."""
    out: list[Seeded] = []
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO dags (dag_id) VALUES (:d) ON CONFLICT DO NOTHING"), {"d": dag})
        version = (await conn.execute(text(
            "INSERT INTO dag_versions (dag_id, version, spec, spec_hash) VALUES (CAST(:d AS text), "
            "(SELECT coalesce(max(version), 0) + 1 FROM dag_versions WHERE dag_id = CAST(:d AS text)), "
            "'{}', 'x') RETURNING id"),
            {"d": dag})).scalar_one()
        run_pk = (await conn.execute(text(
            "INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type) VALUES (:d, :r, :v, 'manual') "
            "RETURNING id"), {"d": dag, "r": run, "v": version})).scalar_one()
        for i in range(n):
            task_id = f"{task_prefix}{i}"
            ti = (await conn.execute(text(
                "INSERT INTO task_instances (run_pk, task_id, state, try_number) VALUES (:r, :t, 'queued', :n) "
                "RETURNING id"), {"r": run_pk, "t": task_id, "n": try_number})).scalar_one()
            tt = (await conn.execute(text(
                "INSERT INTO task_tries (task_instance_id, try_number, term) VALUES (:ti, :n, :term) RETURNING id"),
                {"ti": ti, "n": try_number, "term": term})).scalar_one()
            out.append(Seeded(TryKey(dag, run, task_id, try_number), tt))
    return out


async def try_row(engine: AsyncEngine, task_try_id: int) -> dict[str, object]:
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM task_tries WHERE id = :id"), {"id": task_try_id})).first()
        assert row is not None
        return dict(row._mapping)


async def log_row(engine: AsyncEngine, task_try_id: int) -> dict[str, object] | None:
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM task_logs WHERE task_try_id = :id"),
                                  {"id": task_try_id})).first()
        return dict(row._mapping) if row is not None else None


@dataclass
class Recorder:
    """Collects reports; applies terminal ones to ``task_tries`` like the scheduler would."""

    engine: AsyncEngine | None = None
    ids: dict[TryKey, int] = field(default_factory=dict)
    updates: list[StatusUpdate] = field(default_factory=list)

    async def __call__(self, update: StatusUpdate) -> None:
        # Recorded once applied: a test that waits for a try's end (wait_final) may then find it
        # ended in the database. Appended first, a log shipper started at once could still see the
        # try running, ship nothing and never read (a CI failure of test_log_shipping).
        if self.engine is not None and update.state in ("success", "failed") and update.key in self.ids:
            async with self.engine.begin() as conn:
                await conn.execute(text(
                    "UPDATE task_tries SET state = :s, ended_at = coalesce(ended_at, now()), exit_code = :c, "
                    "reason = :r WHERE id = :id AND ended_at IS NULL"),
                    {"s": update.state, "c": update.exit_code, "r": update.reason, "id": self.ids[update.key]})
        self.updates.append(update)

    def track(self, seeded: list[Seeded]) -> None:
        self.ids.update({s.key: s.task_try_id for s in seeded})

    def states(self, key: TryKey) -> list[str]:
        return [u.state for u in self.updates if u.key == key]

    def final(self, key: TryKey) -> StatusUpdate | None:
        done = [u for u in self.updates if u.key == key and u.state != "running"]
        return done[-1] if done else None

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; updates: {self.updates[-10:]}")
            await asyncio.sleep(0.02)

    async def wait_final(self, key: TryKey, timeout: float = 30.0) -> StatusUpdate:
        await self.wait_for(lambda: self.final(key) is not None, timeout, f"final state of {key}")
        final = self.final(key)
        assert final is not None
        return final


def run_with_term(settings: Settings, body: Callable[[AsyncEngine], Awaitable[None]], *, pool_size: int) -> None:
    """Run ``body`` with a fresh async engine after recording term 1 for the settings' cluster."""
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=pool_size)
        try:
            await set_term(engine, settings.cluster.name, 1)
            await body(engine)
        finally:
            await engine.dispose()

    asyncio.run(main())

"""The hot read's connections (issue 21, ``bench/api.py``): what was cut stays cut, the bounds stay.

- a hot read waits for a connection in the replica's own FIFO, never in psycopg_pool's queue
  (whose waiters cost a task and a timer each), and its wait stays bounded (503, slots not lost);
- a connection goes back to the pool when the read ends, not later through a worker task, and a
  connection SQLAlchemy used comes back in autocommit (rolled back if left in a transaction);
- hot reads reuse their connection's cursor (no new cursor and adapters map per statement).

No timing: each step is driven and checked through the pool's own counters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import text

from leoflow.db.connection import api_pool as pool_module
from leoflow.db.connection.api_pool import PooledDatabase
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.errors import DatabaseUnavailable
from leoflow.settings import Settings


def _database(settings: Settings, size: int) -> PooledDatabase:
    return PooledDatabase.create(settings.database, size=size, application_name="hot-read-test")


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(3000):  # up to 30 s on a loaded host; normally a few loop turns
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Holders:
    """``count`` hot reads that each keep their connection until :meth:`release`."""

    def __init__(self, db: PooledDatabase, count: int) -> None:
        self.db = db
        self.inside = 0
        self._release = asyncio.Event()
        self.tasks = [asyncio.create_task(self._hold()) for _ in range(count)]

    async def _hold(self) -> None:
        async with self.db.raw() as conn:
            await conn.execute("SELECT 1")
            self.inside += 1
            await self._release.wait()

    async def release(self) -> None:
        self._release.set()
        await asyncio.gather(*self.tasks)


def test_a_hot_read_waits_in_the_replicas_queue_not_the_pools(settings: Settings) -> None:
    async def scenario() -> None:
        db = _database(settings, 2)
        await db.open()
        try:
            warm = Holders(db, 2)  # grows the pool to its size (psycopg's queue may serve this)
            await _until(lambda: warm.inside == 2, "two connections in use")
            await warm.release()
            queued_before = db.pool.get_stats().get("requests_queued", 0)

            held = Holders(db, 2)
            await _until(lambda: held.inside == 2, "two connections in use")
            third = asyncio.create_task(_read(db))
            for _ in range(20):  # let the third read run until it blocks, wherever it waits
                await asyncio.sleep(0)
            assert not third.done()
            assert db.raw_slots.locked()
            assert db.pool.get_stats().get("requests_queued", 0) == queued_before
            await held.release()
            assert await third == 1
            assert db.pool.get_stats().get("requests_queued", 0) == queued_before
            assert db.pool.get_stats()["pool_size"] == 2
        finally:
            await db.close()

    asyncio.run(scenario())


def test_a_hot_reads_wait_is_bounded_and_gives_its_slot_back(settings: Settings,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "CHECKOUT_TIMEOUT", 1.0)

    async def scenario() -> None:
        db = _database(settings, 2)
        await db.open()
        try:
            held = Holders(db, 2)
            await _until(lambda: held.inside == 2, "two connections in use")
            with pytest.raises(DatabaseUnavailable):
                await _read(db)
            await held.release()
            again = Holders(db, 2)  # both slots are free again: neither read times out
            await _until(lambda: again.inside == 2, "two connections in use again")
            await again.release()
            assert not db.raw_slots.locked()
        finally:
            await db.close()

    asyncio.run(scenario())


def test_a_connection_is_back_in_the_pool_when_the_read_ends(settings: Settings) -> None:
    async def scenario() -> None:
        db = _database(settings, 1)
        await db.open()
        try:
            assert await _read(db) == 1
            assert db.pool.get_stats()["pool_available"] == 1
            async with db.raw() as conn:
                await conn.execute("SELECT 1")
                assert db.pool.get_stats()["pool_available"] == 0
            # No await since the block ended: returned inline, not queued for a worker task.
            assert db.pool.get_stats()["pool_available"] == 1
        finally:
            await db.close()

    asyncio.run(scenario())


def test_a_connection_sqlalchemy_used_comes_back_in_autocommit(settings: Settings) -> None:
    async def scenario() -> None:
        db = _database(settings, 1)  # one connection: every checkout below gets the same one
        await db.open()
        try:
            async with db.transaction() as conn:
                await conn.execute(text("SELECT 1"))
            async with db.raw() as raw:
                assert raw.autocommit
                assert raw.pgconn.transaction_status == 0  # IDLE
            # A borrowed connection handed back inside an open transaction is rolled back first
            # (as engine_on_pool lends them: autocommit off).
            borrowed = await db.pool.getconn()
            await borrowed.set_autocommit(False)
            await borrowed.execute("CREATE TEMP TABLE left_open (x int)")
            await borrowed.close()
            async with db.raw() as raw:
                assert raw.autocommit
                cursor = await raw.execute("SELECT to_regclass('pg_temp.left_open') IS NULL")
                assert (await cursor.fetchone()) == (True,)  # the transaction was rolled back
        finally:
            await db.close()

    asyncio.run(scenario())


def test_hot_reads_reuse_their_connections_cursor(settings: Settings) -> None:
    async def scenario() -> None:
        db = _database(settings, 1)  # one connection: both reads get the same one
        await db.open()
        try:
            async with db.raw() as conn:
                cursor = conn.reading_cursor()
                assert cursor.pgresult is None
                assert await dag_store.dag_exists(conn, "nope") is False
                assert cursor.pgresult is not None  # the statement ran on this very cursor
            async with db.raw() as conn:
                assert conn.reading_cursor() is cursor
                assert await run_store.run_document(conn, "nope", "r1") is None
        finally:
            await db.close()

    asyncio.run(scenario())


async def _read(db: PooledDatabase) -> int:
    async with db.raw() as conn:
        cursor = await conn.execute("SELECT 1")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

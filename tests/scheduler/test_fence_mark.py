"""A fenced transaction carries its own term (``leoflow.fenced_term``), and only while it lasts.

The chaos soak's audit reads that mark to know which term made a write: since ADR 0013 step 2 a
queued try's row is first written by a later writer, possibly of a later term, and the row's
``term`` column is the term that queued it, not the writer's.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.connection.fencing import FENCED_TERM_SETTING
from leoflow.errors import FencedOut
from leoflow.settings import Settings
from tests.scheduler.harness import set_term

MARK = text(f"SELECT current_setting('{FENCED_TERM_SETTING}', true)")


def test_a_fenced_transaction_is_marked_with_its_term_and_nothing_else_is(settings: Settings) -> None:
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=1)  # one connection: the mark must not leak
        db = Database(engine)
        cluster = settings.cluster.name
        try:
            await set_term(engine, cluster, 7)
            async with db.fenced(cluster, 7) as conn:
                assert (await conn.execute(MARK)).scalar() == "7"
            async with db.transaction() as conn:
                assert (await conn.execute(MARK)).scalar() in (None, "")
            await set_term(engine, cluster, 8)
            with pytest.raises(FencedOut):
                async with db.fenced(cluster, 7):
                    pass
            async with db.transaction() as conn:
                assert (await conn.execute(MARK)).scalar() in (None, "")
        finally:
            await engine.dispose()

    asyncio.run(main())

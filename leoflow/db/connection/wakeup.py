"""The wake-up channel: API writes NOTIFY, the leader's scheduler LISTENs on its own connection.

A trigger, cancel, pause or apply commits a ``NOTIFY leoflow_wakeup, '<dag_id>'``
(:func:`notify_wakeup`; PostgreSQL delivers it when the caller's transaction commits, and
never if it rolls back), so the leader starts a manual run well under a second later instead of
on its next tick. The channel is shared by every Leoflow install on the database; a spurious
wake-up costs one tick.

:func:`listen` is the scheduler's side: one dedicated connection (the budget's ``listener``
slot, :mod:`leoflow.db.connection.budget`), ``on_wakeup`` called once right after ``LISTEN`` (anything
notified while nobody listened) and then once per notification. It returns never; when the
connection is lost it raises :class:`~leoflow.errors.DatabaseUnavailable` and the caller
reconnects (the scheduler's interval drives the loop meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.connect import connect_kwargs, libpq_url
from leoflow.db.connection.driver_errors import translated_async

#: LISTEN/NOTIFY channel the leader's scheduler listens on; the payload is the DAG id.
WAKEUP_CHANNEL = "leoflow_wakeup"


async def notify_wakeup(conn: AsyncConnection, dag_id: str) -> None:
    """Wake the leader's scheduler once this transaction commits."""
    await conn.execute(text("SELECT pg_notify(:channel, :payload)"),
                       {"channel": WAKEUP_CHANNEL, "payload": dag_id})


async def listen(database_url: str, *, application_name: str, on_wakeup: Callable[[], None]) -> None:
    """LISTEN on :data:`WAKEUP_CHANNEL` until cancelled; raises DatabaseUnavailable when the connection dies."""
    async with translated_async():
        conn = await psycopg.AsyncConnection.connect(libpq_url(database_url), autocommit=True,
                                                     **connect_kwargs(application_name))
        async with conn:
            await conn.execute(f"LISTEN {WAKEUP_CHANNEL}")
            on_wakeup()
            async for _ in conn.notifies():
                on_wakeup()

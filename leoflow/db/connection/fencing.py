"""Fencing: a scheduling write commits only while its leadership term is the newest.

Every state-changing transaction of the leader (scheduler, executor) starts with
:func:`check_term` / :func:`check_term_async`, which reads the cluster's row in
``cluster_leadership`` ``FOR SHARE``. A new leader bumps that row with a plain ``UPDATE`` (see
``leoflow.election``), which needs a conflicting row lock; so:

- if the new term committed first, the old leader's check sees the newer term and raises
  :class:`~leoflow.errors.FencedOut` — its transaction writes nothing;
- if the old leader's transaction holds the share lock first, the new leader's ``UPDATE`` waits
  until that transaction ends, so the old write is ordered *before* the new term exists.

Either way no write of an older term can commit after a newer term has committed. Callers treat
``FencedOut`` as "stop acting now", never as an error to retry.

**Failover.** The row's ``timeline`` is the WAL timeline the term began on; a term is valid only
while the server is still on it. An asynchronous standby promoted to primary starts a new
timeline, and may have lost the newest term (and the row that recorded it): without this check
a paused ex-leader whose term survived on the standby — or an older one, whose term the lost
transaction had superseded — could commit again. With it, every term issued before a promotion
is void on the promoted server (ADR 0003). The current timeline is read in the same statement
(one function call, no extra round trip) and only for rows that recorded one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.errors import FencedOut

#: The transaction-local setting a fenced transaction carries its term in (see :data:`_CHECK`).
FENCED_TERM_SETTING = "leoflow.fenced_term"

#: Reads the newest term under a share lock and, in the same statement, marks the transaction
#: with the term it acts under (``SET LOCAL``, gone at its end). A row's ``term`` column says
#: which term *queued* it, and since ADR 0013 step 2 a queued try's row is first written by a
#: later writer, possibly of a later term; the mark is the writer's own term, which a trigger
#: (the chaos soak's audit, ``bench/chaos/audit.py``) reads to tell a stale write from a later
#: term materialising an older row. No extra round trip.
_CHECK = text(
    "SELECT term, timeline, CASE WHEN timeline IS NULL THEN NULL"
    " ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END,"
    f" set_config('{FENCED_TERM_SETTING}', CAST(:term AS text), true)"
    " FROM cluster_leadership WHERE cluster = :cluster FOR SHARE")


def _verify(row: Sequence[Any] | None, term: int, cluster: str) -> None:
    row_term = row[0] if row is not None else None
    if row_term != term:
        raise FencedOut(f"term {term} of cluster {cluster!r} is no longer the newest (now {row_term})")
    assert row is not None
    began_on, now_on = row[1], row[2]
    if began_on is not None and now_on != began_on:
        raise FencedOut(f"term {term} of cluster {cluster!r} began on timeline {began_on}, the database is now on "
                        f"timeline {now_on} (a standby was promoted): every earlier term is void")


def check_term(conn: Connection, cluster: str, term: int) -> None:
    """Raise FencedOut unless ``term`` is the newest; holds a share lock until the transaction ends."""
    _verify(conn.execute(_CHECK, {"cluster": cluster, "term": term}).first(), term, cluster)


async def check_term_async(conn: AsyncConnection, cluster: str, term: int) -> None:
    """Async twin of :func:`check_term`."""
    _verify((await conn.execute(_CHECK, {"cluster": cluster, "term": term})).first(), term, cluster)


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
"""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.errors import FencedOut

_CHECK = text("SELECT term FROM cluster_leadership WHERE cluster = :cluster FOR SHARE")


def _verify(row_term: int | None, term: int, cluster: str) -> None:
    if row_term != term:
        raise FencedOut(f"term {term} of cluster {cluster!r} is no longer the newest (now {row_term})")


def check_term(conn: Connection, cluster: str, term: int) -> None:
    """Raise FencedOut unless ``term`` is the newest; holds a share lock until the transaction ends."""
    _verify(conn.execute(_CHECK, {"cluster": cluster}).scalar(), term, cluster)


async def check_term_async(conn: AsyncConnection, cluster: str, term: int) -> None:
    """Async twin of :func:`check_term`."""
    _verify((await conn.execute(_CHECK, {"cluster": cluster})).scalar(), term, cluster)

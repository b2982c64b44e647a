"""Outcomes of local processes, reported by the replica that ran them, for whoever leads next.

The local executor runs a try as a subprocess of the *leader*. If that replica loses leadership
while the process runs (a database outage is the usual cause), it cannot report the end through
the scheduler any more — only the leader's fenced writes change task states. Calling such a try
"vanished" and running it again would run it twice. Instead:

- the replica that ran it writes what it saw (:func:`report_outcome`, unfenced: a fact from the
  one host that can see the process, not a scheduling decision) into ``try_outcomes``;
- the leader's executor, adopting a try claimed by another replica, waits for that report
  (:func:`reported_outcome`) for as long as the other replica is alive (:func:`owner_liveness`),
  and only then decides.

What a successful try wrote to its outputs file travels too (``try_outcomes.outputs``), raw: the
leader checks it as it checks its own executor's reports. It is kept as the JSON string of its
bytes (invalid UTF-8 as surrogate escapes, so ASCII text with every byte recoverable):
PostgreSQL's ``text`` holds neither NUL nor invalid UTF-8, and a rejection must name what was
written, not what the column could store.

Every function takes an ``AsyncConnection`` inside a transaction the caller owns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import LIVE_TRIES_SQL


@dataclass(frozen=True)
class ReportedOutcome:
    state: str
    exit_code: int | None
    reason: str | None
    reported_by: str
    #: What the try wrote to its outputs file (None: nothing, or it did not succeed).
    outputs: bytes | None = None


@dataclass(frozen=True)
class OwnerLiveness:
    """What the database knows of a replica's heartbeats, in the database's own clock."""

    last_seen: datetime | None
    now: datetime
    #: The replica has a membership row in the cluster at all.
    member: bool


_REPORT = text("""
    INSERT INTO try_outcomes (task_try_id, state, exit_code, reason, reported_by, outputs)
    VALUES (:id, :state, :code, :reason, :by, :outputs)
    ON CONFLICT (task_try_id) DO NOTHING
""")


def outputs_text(raw: bytes) -> str:
    """``raw`` as ``try_outcomes.outputs`` keeps it (see the module docstring); :func:`outputs_bytes` undoes it."""
    return json.dumps(raw.decode("utf-8", "surrogateescape"))


def outputs_bytes(stored: str) -> bytes:
    return str(json.loads(stored)).encode("utf-8", "surrogateescape")


async def report_outcome(conn: AsyncConnection, task_try_id: int, *, state: str, exit_code: int | None,
                         reason: str | None, reported_by: str, outputs: bytes | None = None) -> None:
    """Record how a try's process ended (the first report wins; reports never change)."""
    await conn.execute(_REPORT, {"id": task_try_id, "state": state, "code": exit_code,
                                 "reason": reason[:2000] if reason else None, "by": reported_by[:253],
                                 "outputs": None if outputs is None else outputs_text(outputs)})


_REPORTED = text("SELECT state, exit_code, reason, reported_by, outputs FROM try_outcomes WHERE task_try_id = :id")


async def reported_outcome(conn: AsyncConnection, task_try_id: int) -> ReportedOutcome | None:
    row = (await conn.execute(_REPORTED, {"id": task_try_id})).first()
    if row is None:
        return None
    outputs = None if row.outputs is None else outputs_bytes(row.outputs)
    return ReportedOutcome(row.state, row.exit_code, row.reason, row.reported_by, outputs)


_LIVENESS = text("""
    SELECT n.last_seen, clock_timestamp() AS now, n.node_id IS NOT NULL AS member
    FROM (SELECT 1) one
    LEFT JOIN cluster_nodes n ON n.cluster = :cluster AND n.node_id = :node
""")


async def owner_liveness(conn: AsyncConnection, cluster: str, node_id: str) -> OwnerLiveness:
    row = (await conn.execute(_LIVENESS, {"cluster": cluster, "node": node_id})).one()
    return OwnerLiveness(last_seen=row.last_seen, now=row.now, member=bool(row.member))


_UNREPORTED = text(f"""
    SELECT tt.id, tt.executor_ref FROM task_tries tt
    WHERE tt.claimed_by = :by AND tt.claimed_at IS NOT NULL AND tt.ended_at IS NULL
      AND tt.state IN {LIVE_TRIES_SQL} AND tt.executor_ref IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM try_outcomes o WHERE o.task_try_id = tt.id)
    ORDER BY tt.id
""")


async def unreported_claims(conn: AsyncConnection, claimed_by: str) -> list[tuple[int, str]]:
    """``(task_try_id, executor_ref)`` of live tries claimed by ``claimed_by`` with no outcome reported."""
    rows = await conn.execute(_UNREPORTED, {"by": claimed_by})
    return [(int(r[0]), str(r[1])) for r in rows]

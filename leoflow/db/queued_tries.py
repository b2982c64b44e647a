"""A queued try whose row is not written yet: the facts live on its task instance (ADR 0013).

Why: the statement that queues a burst of tasks is the scheduler's hottest write, and about a
sixth of its database time is the try rows it inserts (a row and three index entries each),
although a queued try's row holds nothing its task instance does not: the try number, the term and
the time it was queued. Without them, ``bench/scheduler.py``'s load measured a median p99 of
0.096 s over nine runs, against 0.118 s with them (ADR 0013). So the row can be written by the
try's *first writer* instead: the executor's claim, a report, or a cancellation — each of which
writes the row anyway.

The rule every writer and reader of live tries follows, whether or not the row exists:

- A task instance in ``queued`` with ``try_number`` n > 0 has a try n. If ``task_tries`` holds no
  row for it, the try is *implicit*: state ``queued``, id ``queued_try_id``, term and
  ``queued_at`` those of the task instance. Any other task instance with n > 0 has its row.
- A writer that must change a live try writes the row if it is missing — the executor's claim
  (:mod:`leoflow.db.stores.tries`), a report (``task_instances._TRY_CHANGES``), a cancellation
  (:func:`cancel_live_tries_sql`) — so that a try once claimed, reported or cancelled is a row like
  any other; a reader of queued tries reads the task instance (:func:`implicit_try_sql`): the
  failover resubmission (``stores.tries.queued_tries_after``) and the API (``stores.task_instances.reads``).

Rolled out in two steps, as ADR 0006 asks of every change to what older code reads: step 1
(revision 0010) made every path cope with the rows missing while the queueing statements still
wrote them; step 2 (revision 0011, which declares only code at 0010 compatible, so older builds
can neither serve nor lead) stops writing them. The queueing statements have no way left to write
them; tests/scheduler/test_implicit_queued_tries.py writes them as step-1 code did, in the
transaction that queued, and requires the same outcome.
"""

from __future__ import annotations

#: The sequence that numbers ``task_tries.id`` (and so ``task_instances.queued_try_id``).
TRY_ID_SEQUENCE = "pg_get_serial_sequence('task_tries', 'id')::regclass"


def implicit_try_sql(ti: str) -> str:
    """A condition on the task instance ``ti`` (as the statement's snapshot shows it): its current
    try is queued and has no row yet."""
    return f"""({ti}.state = 'queued' AND {ti}.try_number > 0 AND NOT EXISTS (
        SELECT 1 FROM task_tries itt WHERE itt.task_instance_id = {ti}.id AND itt.try_number = {ti}.try_number))"""


def cancel_implicit_sql(changed: str, reason: str) -> str:
    """A data-modifying CTE body: the implicit tries of the task instances ``changed`` (a CTE of the
    same statement that returns their ``id``) written as ``cancelling`` with ``reason``.

    ``changed`` is an update of those task instances; joined here, ``task_instances`` still shows
    their rows as the statement found them (every part of a statement sees one snapshot), so "was
    queued, with no row" is decided on the state before the cancel. A row a claim inserted meanwhile
    is flagged by the conflict clause, as the statement's own update flags the rows it can see.
    """
    return f"""
        INSERT INTO task_tries AS tt (id, task_instance_id, try_number, state, term, queued_at, reason)
        SELECT coalesce(ti.queued_try_id, nextval({TRY_ID_SEQUENCE})), ti.id, ti.try_number, 'cancelling',
               ti.term, coalesce(ti.queued_at, now()), {reason}
        FROM {changed} x JOIN task_instances ti ON ti.id = x.id
        WHERE {implicit_try_sql('ti')}
        ON CONFLICT (task_instance_id, try_number) DO UPDATE
        SET state = 'cancelling', reason = coalesce(tt.reason, excluded.reason)
        WHERE tt.state IN ('queued', 'running')"""


def cancel_live_tries_sql(changed: str, reason: str) -> str:
    """Two CTEs for a ``WITH`` list, ``killed`` and ``implicit``: every live try of the task
    instances ``changed`` (a CTE of the same statement returning their ``id``) flagged
    ``cancelling`` with ``reason`` unless it has one — its row when it has one, else, for a queued
    try without it, the row written so (:func:`cancel_implicit_sql`). ``reason`` may read
    ``changed``'s columns as ``x.…``.

    One fragment for both halves, so that no cancellation flags only the rows that exist.
    """
    return f"""killed AS (
        UPDATE task_tries tt SET state = 'cancelling', reason = coalesce(tt.reason, {reason})
        FROM {changed} x WHERE tt.task_instance_id = x.id AND tt.state IN ('queued', 'running')
    ), implicit AS ({cancel_implicit_sql(changed, reason)})"""

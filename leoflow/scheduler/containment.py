"""Containment: whatever one DAG, version, run, task or report does to the scheduler, it fails alone.

A leader that dies on one entity's data dies again on the next leader, which replays the same
data: one DAG with an absurd timeout stopped every DAG of the cluster (issue 16). So the line
between *the leader's* faults and *an entity's* faults is drawn here, once:

- **Leader faults** (:data:`leoflow.errors.LEADER_FAULTS`): a newer term (``FencedOut``), the database
  unreachable or too slow, a schema older than the code, and cancellation. Nothing about them
  is specific to one entity; the loop retries or steps down as before.
- **Everything else is an entity's fault** until shown otherwise. The scheduler computes per
  entity inside a boundary (:class:`Fault` collects the exception of *that* entity), and when a
  whole batch statement fails — a value the database refuses, a row that cannot be decoded, a
  bug that only one row's data reaches — :func:`isolate` splits the batch and tries the halves
  in separate transactions until every poisoned entity stands alone; only it is failed.

A failed entity is written *durably*, in a fenced transaction like every scheduling write, with a
readable reason (``scheduler error: OverflowError: date value out of range``): a task instance
becomes ``failed`` (its descendants ``upstream_failed``, its live try killed), a run ``failed``,
a DAG's schedule stops (``dags.schedule_error``). The next leader therefore never sees it as
work again — a crash loop is impossible by construction. Each is counted in
``leoflow_scheduler_entity_errors_total{kind}`` and logged once with its traceback.

An entity whose failure cannot even be written (its row is what the database refuses) is
quarantined for the rest of the term, so it costs one bisection per term, never one per tick.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from leoflow.errors import LEADER_FAULTS, is_leader_fault
from leoflow.metrics import scheduler as metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

EntityKind = Literal["dag", "dag_version", "run", "task", "report", "try"]

__all__ = ["LEADER_FAULTS", "Fault", "clean_text", "contained", "count", "is_leader_fault", "isolate",
           "scheduler_error"]

#: Longest reason stored on an entity (the columns are TEXT; this keeps API answers readable).
MAX_REASON = 500


def clean_text(text: str, limit: int = MAX_REASON) -> str:
    """``text`` as PostgreSQL can store it (no NUL characters), at most ``limit`` characters."""
    return text.replace("\x00", "\\0")[:limit]


def _message(exc: BaseException) -> str:
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # boundary: an exception whose __str__ itself fails must still be described
        return "(no message)"
    return lines[0] if lines else "(no message)"


def scheduler_error(exc: BaseException) -> str:
    """The reason stored on an entity the scheduler could not handle."""
    return clean_text(f"scheduler error: {type(exc).__name__}: {_message(exc)}")


@dataclass(frozen=True)
class Fault:
    """One entity the scheduler failed: what it is, which one, and the reason stored on it."""

    kind: EntityKind
    entity: int | str
    reason: str


def contained(kind: EntityKind, entity: int | str, exc: BaseException, *, reason: str | None = None) -> Fault:
    """Record that handling ``entity`` raised ``exc``: logged once with its traceback."""
    fault = Fault(kind, entity, reason or scheduler_error(exc))
    log.error("scheduler error contained to one %s", kind, exc_info=exc,
              extra={"entity_kind": kind, "entity": str(entity), "reason": fault.reason})
    return fault


def count(faults: Sequence[Fault]) -> None:
    """Count faults once they are durable (after the commit that stored them)."""
    for fault in faults:
        metrics.ENTITY_ERRORS.labels(kind=fault.kind).inc()


async def isolate(items: Sequence[T], attempt: Callable[[Sequence[T]], Awaitable[object]],
                  poisoned: Callable[[T, Exception], Awaitable[None]]) -> None:
    """Run ``attempt(items)``; if it fails because of an entity, bisect until each culprit is alone.

    ``attempt`` must run in a transaction of its own, so a half that succeeds is committed and
    never redone. A single item whose attempt fails is handed to ``poisoned`` with the
    exception. Leader faults propagate at once (the rest is retried on the next tick). With k
    poisoned items among n this costs O(k log n) transactions; none when nothing fails.
    """
    if not items:
        return
    try:
        await attempt(items)
    except Exception as exc:  # boundary: a batch failed, maybe because of one of its entities
        if is_leader_fault(exc):
            raise
        if len(items) == 1:
            await poisoned(items[0], exc)
            return
        middle = len(items) // 2
        await isolate(items[:middle], attempt, poisoned)
        await isolate(items[middle:], attempt, poisoned)

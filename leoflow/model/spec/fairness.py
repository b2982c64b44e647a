"""Fairness between DAGs: pools, priorities and ``max_active_tasks`` — the domain rules.

Three knobs decide which ready task gets the next free slot (Airflow's, simplified):

- **Pools** bound how many task instances of a kind run at once. A task names its ``pool``
  (default ``default``); a queued or running task instance holds one slot of its pool. The
  ``default`` pool always exists and has ``LEOFLOW_PARALLELISM`` slots; named pools are created,
  resized and deleted through the API (``leoflow pools ...``) and hold their own slots, on top
  of the default pool's. A pool with 0 slots holds its tasks back; a task naming a pool that
  does not exist (yet, or any more) waits as if its pool had 0 slots — it is not failed, so a
  GitOps sync may apply DAGs before their pools, and ``pools list`` names the missing pool with
  its waiting tasks. ``kind: empty`` tasks run in no pool (they take no slot).
- **Priority** orders the ready tasks of one pool: higher first, ties oldest first (the task
  instance created first, i.e. the run started first, then the spec's task order). A priority
  is the task's own (``priority``, default 0): Airflow's ``weight_rule: absolute``, which costs
  nothing per tick; summing weights along the graph is not done.
- **``max_active_tasks``** (DAG) bounds the DAG's task instances queued or running at once,
  across all its runs; none by default (only the pools bound it). A DAG at its limit is skipped,
  so its backlog never holds a slot another DAG could use.

This module only validates and names things; the scheduler's choice is one SQL read
(:func:`leoflow.db.stores.task_instances.queueing.pick_ready`), or the one write that applies the same rules
(:func:`leoflow.db.stores.task_instances.queueing.count_and_queue`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_name, within
from leoflow.model.fields import no_unknown, opt_str

#: The pool of tasks that name none; its size is LEOFLOW_PARALLELISM (not stored, not editable).
DEFAULT_POOL = "default"
MIN_PRIORITY, MAX_PRIORITY = int(limits.PRIORITY.minimum), int(limits.PRIORITY.maximum)
#: How many named pools may exist: every queueing round looks at each pool with free slots.
MAX_POOLS = 1_000

_POOL_FIELDS = {"name", "slots", "description"}


def pool_name(value: object, path: str) -> str:
    """A pool's name: the same rule as DAG and task ids (:data:`leoflow.model.limits.POOL_NAME`)."""
    return check_name(value, path, limits.POOL_NAME)


def priority_field(value: object, path: str) -> int:
    return int(within(value, path, limits.PRIORITY))


def max_active_tasks_field(value: object, path: str) -> int | None:
    if value is None:
        return None
    return int(within(value, path, limits.MAX_ACTIVE_TASKS))


def slots_field(value: object, path: str) -> int:
    return int(within(value, path, limits.POOL_SLOTS))


def description_field(value: object, path: str) -> str | None:
    """A pool's description: text PostgreSQL can store (no NUL character, no lone surrogate)."""
    text = opt_str(value, path, max_len=limits.POOL_DESCRIPTION.maximum)
    if text is not None:
        if "\x00" in text:
            raise ValidationFailed(path, "must not contain NUL characters")
        try:
            text.encode()
        except UnicodeEncodeError:
            raise ValidationFailed(path, "is not valid Unicode (a lone surrogate)") from None
    return text


@dataclass(frozen=True)
class PoolChange:
    """A validated pool request body: ``create`` needs a name and slots, ``update`` either field."""

    name: str | None
    slots: int | None
    description: str | None
    #: The body named ``description`` (possibly null, which clears it).
    sets_description: bool


def parse_pool_request(body: dict[str, Any], *, creating: bool) -> PoolChange:
    """Validate ``{name, slots, description?}`` (create) or ``{slots?, description?}`` (update)."""
    allowed = _POOL_FIELDS if creating else _POOL_FIELDS - {"name"}
    no_unknown(body, allowed, "")
    name = pool_name(body.get("name"), "name") if creating else None
    if name == DEFAULT_POOL:
        raise ValidationFailed("name", f"{DEFAULT_POOL!r} is the built-in pool (its size is LEOFLOW_PARALLELISM)")
    if creating and body.get("slots") is None:
        raise ValidationFailed("slots", "is required")
    slots = None if body.get("slots") is None else slots_field(body["slots"], "slots")
    description = description_field(body.get("description"), "description")
    if not creating and slots is None and "description" not in body:
        raise ValidationFailed("slots", "is required (or description)")
    return PoolChange(name=name, slots=slots, description=description, sets_description="description" in body)

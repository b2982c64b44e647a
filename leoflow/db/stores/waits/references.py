"""The DAGs a spec's ``wait_for`` names must exist when it is applied (a typo is a 422, not a task
that waits a week for a DAG nobody runs); one deleted later fails the wait with a reason instead."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import DagSpec


async def check_waited_dags(conn: AsyncConnection, spec: DagSpec) -> None:
    """Raise :class:`ValidationFailed` naming the first ``tasks[i].wait_for[j].dag`` that is not a live DAG
    (the DAG being applied may wait for its own runs)."""
    named = [(f"{where}[{i}].wait_for[{j}].dag", w.target)
             for where, tasks in (("tasks", spec.tasks), ("on_exit", spec.on_exit))
             for i, task in enumerate(tasks) for j, w in enumerate(task.wait_for)
             if w.kind == "dag" and w.target != spec.dag_id]
    if not named:
        return
    live = set((await conn.execute(text(
        "SELECT dag_id FROM dags WHERE dag_id = ANY(CAST(:ids AS text[])) AND NOT deleted"),
        {"ids": sorted({dag_id for _, dag_id in named})})).scalars())
    for path, dag_id in named:
        if dag_id not in live:
            raise ValidationFailed(path, f"DAG {dag_id!r} does not exist (apply it first, or fix the name)")

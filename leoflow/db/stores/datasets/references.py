"""Which DAGs produce and consume a dataset URI: ``dataset_references``, written at apply and delete.

An event must find its consumers with one index probe, not by opening every DAG's spec, so the
references of a DAG's current version are kept as rows: rewritten when a new version becomes
current (:func:`replace_references`, from ``apply_dag``), dropped with the DAG's queue when it is
deleted (:func:`drop_references`, from ``delete_dag``: "a deleted DAG drops its queue"). A
re-applied version that no longer waits on a URI also loses that URI's queued events, so a later
version never starts from events it did not ask for. Runs in the caller's transaction.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.model.spec.dag import DagSpec

_REPLACE = text("""
    WITH gone AS (
        DELETE FROM dataset_references WHERE dag_id = :dag_id
    ), refs AS (
        INSERT INTO dataset_references (uri, role, dag_id, task_id)
        SELECT DISTINCT r.uri, r.role, :dag_id, r.task_id
        FROM unnest(CAST(:uris AS text[]), CAST(:roles AS text[]), CAST(:tasks AS text[])) AS r(uri, role, task_id)
        ON CONFLICT DO NOTHING
    )
    DELETE FROM dataset_queue WHERE dag_id = :dag_id AND NOT uri = ANY(CAST(:consumed AS text[]))
""")


async def replace_references(conn: AsyncConnection, spec: DagSpec) -> None:
    """The references of ``spec`` (now the DAG's current version) replace the DAG's old ones."""
    rows: list[tuple[str, str, str]] = []
    consumed = spec.dataset_schedule.uris if spec.dataset_schedule is not None else ()
    rows += [(uri, "consumer", "") for uri in consumed]
    rows += [(uri, "producer", task.id) for task in (*spec.tasks, *spec.on_exit) for uri in task.produces]
    await conn.execute(_REPLACE, {"dag_id": spec.dag_id, "uris": arrays.texts(r[0] for r in rows),
                                  "roles": arrays.texts(r[1] for r in rows),
                                  "tasks": arrays.texts(r[2] for r in rows), "consumed": arrays.texts(consumed)})


async def drop_references(conn: AsyncConnection, dag_id: str) -> None:
    """A deleted DAG neither produces nor consumes; its queued events are dropped."""
    await conn.execute(text("DELETE FROM dataset_references WHERE dag_id = :dag_id"), {"dag_id": dag_id})
    await conn.execute(text("DELETE FROM dataset_queue WHERE dag_id = :dag_id"), {"dag_id": dag_id})

"""The artifacts' index (``task_artifacts``): which object holds each output artifact of each try.

Artifacts live in the log archive's bucket (leoflow.model.artifacts.objects), so their index sits
beside the log's and their objects go through the same garbage queue when retention deletes a run
(:func:`queue_run_artifacts`, in the purge's transaction, before the rows cascade away).

A row is written after its object (:func:`record_artifacts`), so a ``complete`` row never points
at an object that is not all there; writing the same try's rows again (a retried report, a new
leader reading the same manifest) replaces them with the same values.

Every function takes an ``AsyncConnection`` inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.model.artifacts.objects import PackedArtifact


@dataclass(frozen=True)
class ArtifactRow:
    """One output artifact of one try, as the API lists it."""

    name: str
    try_number: int
    kind: str | None
    size_bytes: int
    stored_bytes: int
    files: int
    digest: str | None
    object_key: str | None
    complete: bool
    problem: str | None
    created_at: datetime


_RECORD = text("""
    INSERT INTO task_artifacts (task_try_id, name, kind, object_key, size_bytes, stored_bytes, files, digest,
                                complete, problem)
    VALUES (:task_try_id, :name, :kind, :object_key, :size_bytes, :stored_bytes, :files, :digest, :complete,
            :problem)
    ON CONFLICT (task_try_id, name) DO UPDATE SET
        kind = EXCLUDED.kind, object_key = EXCLUDED.object_key, size_bytes = EXCLUDED.size_bytes,
        stored_bytes = EXCLUDED.stored_bytes, files = EXCLUDED.files, digest = EXCLUDED.digest,
        complete = EXCLUDED.complete, problem = EXCLUDED.problem
""")


async def record_artifacts(conn: AsyncConnection, task_try_id: int, results: Sequence[PackedArtifact]) -> None:
    """Index what an upload reported (after the objects are written)."""
    if not results:
        return
    await conn.execute(_RECORD, [
        {"task_try_id": task_try_id, "name": r.name, "kind": r.kind, "object_key": r.object_key,
         "size_bytes": r.size_bytes, "stored_bytes": r.stored_bytes, "files": r.files, "digest": r.digest,
         "complete": r.complete, "problem": r.problem if r.problem is not None else
         ("nothing at its path when the task ended" if r.missing else None)}
        for r in results])


_COLUMNS = """a.name, tt.try_number, a.kind, a.size_bytes, a.stored_bytes, a.files, a.digest, a.object_key,
              a.complete, a.problem, a.created_at"""

_LIST = text(f"""
    SELECT {_COLUMNS}
    FROM task_artifacts a JOIN task_tries tt ON tt.id = a.task_try_id
    JOIN task_instances ti ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
    WHERE r.dag_id = :dag_id AND r.run_id = :run_id AND ti.task_id = :task_id AND ti.map_index = :map_index
      AND (CAST(:try_number AS integer) IS NULL OR tt.try_number = :try_number)
    ORDER BY tt.try_number DESC, a.name
""")


async def list_artifacts(conn: AsyncConnection, dag_id: str, run_id: str, task_id: str, *, map_index: int = -1,
                         try_number: int | None = None) -> list[ArtifactRow]:
    """A task instance's artifacts, newest try first (only ``try_number``'s when given)."""
    result = await conn.execute(_LIST, {"dag_id": dag_id, "run_id": run_id, "task_id": task_id,
                                        "map_index": map_index, "try_number": try_number})
    return [ArtifactRow(*row) for row in result]


_SOURCES = text(f"""
    SELECT DISTINCT ON (ti.task_id, a.name) ti.task_id, {_COLUMNS}
    FROM task_artifacts a JOIN task_tries tt ON tt.id = a.task_try_id
    JOIN task_instances ti ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
    WHERE r.dag_id = :dag_id AND r.run_id = :run_id AND ti.task_id = ANY(:task_ids) AND ti.map_index = -1
      AND tt.state = 'success'
    ORDER BY ti.task_id, a.name, tt.try_number DESC
""")


async def input_sources(conn: AsyncConnection, dag_id: str, run_id: str,
                        task_ids: Sequence[str]) -> dict[tuple[str, str], ArtifactRow]:
    """The artifacts a consumer reads: per (upstream task, name), the one of its latest successful try."""
    if not task_ids:
        return {}
    result = await conn.execute(_SOURCES, {"dag_id": dag_id, "run_id": run_id, "task_ids": list(task_ids)})
    return {(row[0], row[1]): ArtifactRow(*row[1:]) for row in result}


#: Each stored artifact, and its try's manifest beside it (written by a pod's upload sidecar; a
#: local try has none, and deleting a missing object counts as done).
QUEUE_RUN_ARTIFACTS = text("""
    WITH stored AS (
        SELECT a.object_key AS key FROM task_artifacts a
        JOIN task_tries tt ON tt.id = a.task_try_id JOIN task_instances ti ON ti.id = tt.task_instance_id
        WHERE ti.run_pk = ANY(:ids) AND a.object_key IS NOT NULL
    )
    INSERT INTO log_archive_garbage (object_key)
    SELECT key FROM stored
    UNION
    SELECT regexp_replace(key, '[^/]+$', 'manifest.json') FROM stored
""")


async def queue_run_artifacts(conn: AsyncConnection, run_pks: Sequence[int]) -> int:
    """Queue the artifact objects (and pod manifests) of these runs for deletion (their rows go with the runs)."""
    result = await conn.execute(QUEUE_RUN_ARTIFACTS, {"ids": list(run_pks)})
    return result.rowcount

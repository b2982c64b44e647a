"""Artifacts around a try, for every executor: resolve the inputs before it starts, index the outputs after.

What each executor does with these (leoflow.model.artifacts for the spec, leoflow.storage.artifacts
for the bytes):

- **local**: the executor itself fetches the inputs into the try's ``artifacts/`` directory before
  it spawns the process (:func:`fetch_for_try`), and uploads the outputs after the process exited
  and before it reports the outcome (:func:`upload_for_try`);
- **kubernetes**: :func:`resolve_inputs` gives the init container its ``--inputs``; the sidecar
  uploads and writes the try's manifest, which the executor indexes (:func:`index_manifest`).

Outcome policy (Argo's, leoflow.model.artifacts.objects.outcome_problem): a successful try whose
required output is missing, over a limit or could not be stored fails with that reason (retries
apply); a required input that cannot be fetched fails the try before the task runs. A failed try
keeps its failure: its outputs are still uploaded when present, for whoever debugs it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import artifacts as artifact_store
from leoflow.errors import DatabaseError
from leoflow.model.artifacts.declared import TaskArtifacts
from leoflow.model.artifacts.objects import PackedArtifact, artifact_key, outcome_problem
from leoflow.model.tries import TaskLaunch
from leoflow.storage.artifacts import fetch_inputs, upload_outputs
from leoflow.storage.objects import ObjectMissing, ObjectStore, StorageError

#: The variable a task reads its artifacts directory from.
ARTIFACTS_ENV = "LEOFLOW_ARTIFACTS"
#: Where the artifacts volume is mounted in a pod's task, init and sidecar containers.
POD_ARTIFACTS_DIR = "/leoflow/artifacts"
NO_STORAGE = "the task declares artifacts, but there is no object storage (LEOFLOW_LOG_ARCHIVE_URL is off)"


async def resolve_inputs(db: Database, launch: TaskLaunch) -> list[dict[str, Any]]:
    """The try's inputs as ``leoflow artifacts fetch --inputs`` takes them: object key and digest of
    the upstream try that succeeded last (``key`` None and a ``problem`` when there is none)."""
    artifacts = launch.artifacts
    if artifacts is None or not artifacts.inputs:
        return []
    async with db.connect() as conn:
        sources = await artifact_store.input_sources(conn, launch.key.dag_id, launch.key.run_id,
                                                     sorted({i.task for i in artifacts.inputs}))
    resolved = []
    for item in artifacts.inputs:
        row = sources.get((item.task, item.artifact))
        ready = row is not None and row.complete
        problem = None if ready else (f"task {item.task!r} stored no artifact {item.artifact!r}" +
                                      (f" ({row.problem})" if row is not None and row.problem else ""))
        resolved.append({"name": item.name, "path": item.path, "optional": item.optional,
                         "key": row.object_key if ready and row is not None else None,
                         "digest": row.digest if ready and row is not None else None, "problem": problem})
    return resolved


async def fetch_for_try(db: Database, store: ObjectStore | None, launch: TaskLaunch, root: Path) -> str | None:
    """Unpack the try's inputs under ``root``; the try's failure reason when a required one is not there."""
    if launch.artifacts is None or not launch.artifacts.inputs:
        return None
    if store is None:
        return NO_STORAGE
    try:
        inputs = await resolve_inputs(db, launch)
    except DatabaseError as exc:
        return f"artifacts: the inputs could not be looked up: {str(exc)[:200]}"
    problems = await fetch_inputs(store, root, inputs)
    return "; ".join(problems) if problems else None


async def upload_for_try(db: Database, store: ObjectStore | None, cluster: str, task_try_id: int,
                         artifacts: TaskArtifacts | None, root: Path) -> str | None:
    """Upload and index the try's outputs; the reason a *successful* try fails for them, else None."""
    if artifacts is None or not artifacts.outputs:
        return None
    if store is None:
        return NO_STORAGE
    results = await upload_outputs(store, cluster, task_try_id, root, artifacts.outputs)
    try:
        await _index(db, task_try_id, results)
    except DatabaseError as exc:  # stored but not findable: the tasks reading it would fail later, less clearly
        return f"artifacts: uploaded but not indexed: {str(exc)[:200]}"
    return outcome_problem(results, {o.name: o.optional for o in artifacts.outputs})


def manifest_key(cluster: str, task_try_id: int) -> str:
    """The object the pod's upload sidecar writes its results to."""
    return artifact_key(cluster, task_try_id, "manifest").removesuffix("manifest.tar.gz") + "manifest.json"


async def index_manifest(db: Database, store: ObjectStore, cluster: str, task_try_id: int,
                         artifacts: TaskArtifacts) -> str | None:
    """Index what a pod's sidecar uploaded; the reason a successful try fails for its artifacts.

    No manifest (the sidecar was killed before it finished, or could not reach the storage) counts
    as every output missing, with that said in the reason."""
    try:
        data = json.loads(await store.get(manifest_key(cluster, task_try_id)))
        results = [PackedArtifact.from_json(item) for item in data if isinstance(item, dict)]
    except ObjectMissing:
        results = [PackedArtifact(o.name, None, problem="the upload sidecar wrote no manifest (it was stopped "
                                  "before it finished, or could not reach the storage)") for o in artifacts.outputs]
    except (StorageError, ValueError, KeyError) as exc:
        return f"artifacts: the sidecar's manifest could not be read: {str(exc)[:200]}"
    declared = {o.name for o in artifacts.outputs}
    results = [r for r in results if r.name in declared]
    await _index(db, task_try_id, results)
    return outcome_problem(results, {o.name: o.optional for o in artifacts.outputs})


#: Seconds between looks for a pod's manifest while its upload sidecar works.
MANIFEST_POLL = 1.0


async def await_manifest(db: Database, store: ObjectStore | None, cluster: str, task_try_id: int,
                         artifacts: TaskArtifacts, *, timeout: float) -> str | None:
    """Wait up to ``timeout`` seconds for a pod's upload sidecar to write the try's manifest, then
    index it (:func:`index_manifest`); the reason a successful try fails for its artifacts.

    The ``task`` container has exited; the kubelet is stopping the sidecar, which uploads first, so
    the manifest follows within the pod's grace period (or never: then every output counts as
    missing, with that said)."""
    if store is None:
        return NO_STORAGE
    deadline = time.monotonic() + timeout
    key = manifest_key(cluster, task_try_id)
    while time.monotonic() < deadline:
        try:
            if await store.size(key) is not None:
                break
        except StorageError:  # may pass: look again until the deadline, then read what is there
            pass
        await asyncio.sleep(MANIFEST_POLL)
    try:
        return await index_manifest(db, store, cluster, task_try_id, artifacts)
    except DatabaseError as exc:
        return f"artifacts: uploaded but not indexed: {str(exc)[:200]}"


async def _index(db: Database, task_try_id: int, results: list[PackedArtifact]) -> None:
    async with db.transaction() as conn:
        await artifact_store.record_artifacts(conn, task_try_id, results)

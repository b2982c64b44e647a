"""``POST /api/v2/dags:sync``: a whole set of DAG files, applied as one all-or-nothing operation.

The body carries the files themselves, not parsed specs, so the server reports problems the
way the files read — file, document, path, line and column — and parses them exactly like the
leader parses ``LEOFLOW_DAGS_DIR``::

    {"source": "team-a", "prune": true, "prune_unlabeled": false, "dry_run": false,
     "files": [{"name": "etl.yaml", "content": "dag_id: etl\\n..."}, ...]}

Answers: 200 with the plan (``dags[]`` with ``action`` ``created``/``changed``/``unchanged``/
``deleted``, ``counts``, and ``missing``: DAGs of the source the files no longer define, kept
because ``prune`` was off); 422 with ``details.errors[]`` listing *every* problem of *every*
file (nothing applied); 409 with the same shape when files define DAGs another source owns.
Parsing runs in a worker thread so a large body does not stall other requests. The body is
bounded by its own ``LEOFLOW_SYNC_MAX_BODY_BYTES`` (64 MiB by default: 10,000 DAG files of 1 KB
are about 10 MiB of JSON, far above the 1 MiB every other route takes), and so is what its
files mean, *all files together*: one :class:`~leoflow.model.files.yaml_loader.YamlBudget` per
request holds the YAML of every file to the body limit in bytes and
:data:`~leoflow.model.limits.DOCUMENT`'s values (aliases expanded), and to the request's
deadline — the thread cannot be cancelled, so it stops itself.
Twenty alias-heavy files cost what one does (issue 44, item 15), not twenty times as much.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import forget_owners, learn_owners, refuse_live_move, require_dag
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import cluster_templates
from leoflow.clock import SystemClock
from leoflow.db.stores import dags
from leoflow.errors import DagFilesInvalid
from leoflow.model.files import dag_sync
from leoflow.model.files.dag_files import MAX_FILE_NAME, MAX_FILES, DagFile, cluster_templates_named, parse_dag_files
from leoflow.model.files.yaml_loader import YamlBudget
from leoflow.model.limits import DOCUMENT
from leoflow.model.source_labels import source_label

_FIELDS = {"source", "prune", "prune_unlabeled", "dry_run", "files"}
_FILE_FIELDS = {"name", "content"}


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise bad_field(name, "must be true or false", status=422)
    return value


def _files(raw: object) -> list[DagFile]:
    if not isinstance(raw, list):
        raise bad_field("files", "is required: a list of {name, content} objects", status=422)
    if len(raw) > MAX_FILES:
        raise bad_field("files", f"has {len(raw)} files; at most {MAX_FILES} are allowed", status=422)
    files: list[DagFile] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        entry = require_object(item, f"files[{i}]")
        unknown = sorted(set(entry) - _FILE_FIELDS)
        if unknown:
            raise bad_field(f"files[{i}].{unknown[0]}", "unknown field (allowed: content, name)", status=422)
        name, content = entry.get("name"), entry.get("content")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_FILE_NAME or "\x00" in name:
            raise bad_field(f"files[{i}].name", f"must be a file name of 1-{MAX_FILE_NAME} characters", status=422)
        if name in names:
            raise bad_field(f"files[{i}].name", f"duplicate file name {name!r}", status=422)
        if not isinstance(content, str):
            raise bad_field(f"files[{i}].content", "must be the file's text", status=422)
        names.add(name)
        files.append(DagFile(name, content))
    return files


def sync_request(body: dict[str, Any]) -> tuple[list[DagFile], dag_sync.SyncOptions]:
    """The files and options of a sync request; 422 naming the field on bad input."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise bad_field(unknown[0], f"unknown field (allowed: {', '.join(sorted(_FIELDS))})", status=422)
    if "source" not in body:
        raise bad_field("source", "is required: the sync source label owning these DAGs", status=422)
    source = source_label(body["source"])
    options = dag_sync.SyncOptions(source, prune=_flag(body, "prune"),
                                   prune_unlabeled=_flag(body, "prune_unlabeled"), dry_run=_flag(body, "dry_run"))
    if options.prune_unlabeled and not options.prune:
        raise bad_field("prune_unlabeled", "only applies together with prune", status=422)
    return _files(body.get("files")), options


def plan_document(plan: dag_sync.SyncPlan) -> dict[str, Any]:
    options = plan.options
    return {
        "source": options.source, "prune": options.prune, "prune_unlabeled": options.prune_unlabeled,
        "dry_run": options.dry_run,
        "dags": [{"dag_id": c.dag_id, "action": c.action, "file": c.file, "document": c.document,
                  "version": c.version, "adopted": c.adopted} for c in plan.changes],
        "counts": {action: plan.count(action) for action in dag_sync.ACTIONS},
        "missing": list(plan.missing),
    }


OPERATIONS = Operations()


@OPERATIONS("POST", "/api/v2/dags:sync", "Sync DAG files",
            oas.json_answer("200", "DagSyncResult", "The plan (applied unless dry_run)"), body="DagSyncRequest",
            auth="admin", errors="409")
async def sync_dags(request: Request) -> Response:
    state = api_state(request)
    limit = state.settings.api.sync_max_body_bytes
    files, options = sync_request(require_object(await read_document(request, limit=limit,
                                                                     setting="LEOFLOW_SYNC_MAX_BODY_BYTES")))
    budget = YamlBudget(DOCUMENT.max_values, limit,
                        deadline=time.monotonic() + state.request_timeout, subject="the files of this sync")
    catalog = await cluster_templates(request, cluster_templates_named(files))
    dag_set = await asyncio.to_thread(parse_dag_files, files, budget,
                                      pod_policy=state.settings.executor.kubernetes.pod_policy(),
                                      executor=state.settings.executor.kind, cluster_templates=catalog)
    if not dag_set.ok:
        bad_files = len({e.file for e in dag_set.errors})
        raise DagFilesInvalid(f"{len(dag_set.errors)} problem(s) in {bad_files} file(s); nothing was applied",
                              [e.to_json() for e in dag_set.errors])
    await learn_owners(request, [located.spec.dag_id for located in dag_set.dags])  # one lookup, not one each
    for located in dag_set.dags:  # every DAG of the files must be the caller's to edit: 403 naming it
        await require_dag(request, located.spec.dag_id, "edit", new_team=located.spec.team)
        await refuse_live_move(request, located.spec.dag_id, located.spec.team)  # 409 naming its live runs
    async with state.db.transaction() as conn:
        plan = await dags.sync_dags(conn, dag_set.dags, options, clock=SystemClock())
        for change in plan.changes:  # a prune reaching another team's DAG: 403, nothing applied (rolled back)
            if change.action == "deleted":
                await require_dag(request, change.dag_id, "edit")
    forget_owners(request, [c.dag_id for c in plan.changes])
    return JsonResponse(plan_document(plan))

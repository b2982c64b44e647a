"""Approval gates: ``POST …/runs/{run_id}/tasks/{task_id}/approval {decision, comment}``.

A task whose ``wait_for`` holds an ``approval`` waits, without a slot, until someone allowed to
operate its DAG decides. The decision is recorded on the wait row by this replica (compare-and-set:
the second of two racing decisions gets ``409``), audited in the same transaction with the
comment, and the leader is woken; its fenced step applies it (the task runs, or fails with
"rejected by NAME: COMMENT"), exactly once. The answer (``200``) is the decision as recorded.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import require_dag
from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import read_document, require_object
from leoflow.api.errors import bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import path_dag_id
from leoflow.api.routes.runs import TASK, path_run_id
from leoflow.db.stores.waits import approvals as approval_store
from leoflow.model import limits

OPERATIONS = Operations()


def parse_approval(document: object) -> tuple[approval_store.Decision, str]:
    """(decision, comment) from the body; 422 naming the field otherwise."""
    body = require_object({} if document is None else document)
    unknown = sorted(set(body) - {"decision", "comment"})
    if unknown:
        raise bad_field(str(unknown[0])[:60], "unknown field (expected decision, comment)", status=422)
    decision = body.get("decision")
    if decision not in ("approve", "reject"):
        shown = repr(decision)[:40] if isinstance(decision, str) else type(decision).__name__
        raise bad_field("decision", f"must be 'approve' or 'reject', got {shown}", status=422)
    comment = body.get("comment", "")
    if comment is None:
        comment = ""
    if not isinstance(comment, str):
        raise bad_field("comment", f"must be a string, got {type(comment).__name__}", status=422)
    if len(comment) > limits.APPROVAL_COMMENT.maximum:
        raise bad_field("comment", f"must be at most {limits.APPROVAL_COMMENT.maximum:,} characters, "
                                   f"got {len(comment):,}", status=422)
    if "\x00" in comment or any(ord(c) < 32 and c not in "\n\t\r" for c in comment):
        raise bad_field("comment", "must not contain control characters", status=422)
    return decision, comment


@OPERATIONS("POST", TASK + "/approval", "Decide approval",
            oas.json_answer("200", "Approval"), body="ApprovalRequest", auth="admin", errors="404 409",
            params=[*oas.RUN_PATH, oas.TASK_ID])
async def decide_approval(request: Request) -> Response:
    """``POST …/runs/{run_id}/tasks/{task_id}/approval {decision: approve | reject, comment}``."""
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    task_id: str = request.path_params["task_id"]
    decision, comment = parse_approval(await read_document(request))
    await require_dag(request, dag_id, "operate")
    principal = getattr(request.state, "principal", None)
    by = str(getattr(principal, "name", None) or "anonymous")[:100]
    async with audited_transaction(request, dag_id=dag_id, run_id=run_id) as write:
        decided = await approval_store.decide_approval(write.conn, dag_id, run_id, task_id, decision=decision,
                                                       comment=comment, by=by)
        write.details.update(task_id=task_id, decision=decision, comment=comment[:500])
    return JsonResponse({"dag_id": decided.dag_id, "run_id": decided.run_id, "task_id": decided.task_id,
                         "decision": decided.decision, "decided_by": decided.decided_by,
                         "comment": decided.comment})

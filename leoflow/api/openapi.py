"""The OpenAPI 3.1 description of the HTTP API.

Written by hand (the routes are plain Starlette functions) and kept honest by tests: one
proves the documented operations are exactly the app's routes, and a schemathesis run against
a live server checks every answer against this document (status codes, content types, bodies).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from leoflow import __version__
from leoflow.api.endpoint import MAX_LIMIT
from leoflow.model import limits
from leoflow.model.dag_files import MAX_FILE_NAME, MAX_FILES
from leoflow.model.dag_sync import ACTIONS
from leoflow.model.run_commands import MARK_STATES
from leoflow.model.run_ids import SCHEDULED_PREFIX
from leoflow.model.source_labels import SOURCE_RE
from leoflow.model.states import RUN_STATES, TASK_STATES
from leoflow.model.trigger_rules import TRIGGER_RULES

JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


_TIME = _nullable("string", format="date-time")
_STR = {"type": "string"}
_INT = {"type": "integer"}


def _obj(props: dict[str, Any], *, required: list[str] | None = None, extra: bool = False) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required if required is not None else list(props),
            "additionalProperties": extra}


def _name(rule: limits.Name) -> dict[str, Any]:
    return {"type": "string", "pattern": rule.pattern.pattern, "maxLength": rule.max_length}


def _range(rule: limits.Range) -> dict[str, Any]:
    low = "exclusiveMinimum" if rule.above_minimum else "minimum"
    return {"type": "integer" if rule.integer else "number", low: rule.minimum, "maximum": rule.maximum}


def _strings(rule: limits.Size) -> dict[str, Any]:
    return {"type": "array", "items": _STR, "maxItems": rule.max_entries}


def _page(item: str) -> dict[str, Any]:
    return _obj({"items": {"type": "array", "items": _ref(item)}, "next_cursor": _nullable("string")})


_TASK_INSTANCE = {
    "task_id": _STR, "state": {"type": "string", "enum": list(TASK_STATES)}, "try_number": _INT,
    "max_tries": _INT, "queued_at": _TIME, "started_at": _TIME, "ended_at": _TIME, "next_try_at": _TIME,
    "reason": _nullable("string"),
}
_RUN = {
    "dag_id": _STR, "run_id": _STR, "run_type": _STR, "state": {"type": "string", "enum": list(RUN_STATES)},
    "reason": {**_nullable("string"), "description": "Why the run ended as it did: its first failed task and "
               "that task's reason, a scheduler error stored on the run, or 'run deadline exceeded'."},
    "logical_date": _TIME, "conf": {"type": "object"}, "created_at": {"type": "string", "format": "date-time"},
    "started_at": _TIME, "ended_at": _TIME, "updated_at": {"type": "string", "format": "date-time"},
    "dag_version": _INT, "backfill_id": _nullable("integer"),
    "deadline_at": {**_TIME, "description": "When the run fails with 'run deadline exceeded' (set when it starts, "
                    "from run_timeout_seconds); null without a deadline."},
}
_DAG = {
    "dag_id": _STR, "paused": {"type": "boolean"}, "schedule": _nullable("string"), "version": _nullable("integer"),
    "next_run_at": _TIME, "source": {**_nullable("string"), "description": "Sync source label owning the DAG "
                                     "(null: applied by hand)"},
    "schedule_error": {**_nullable("string"), "description": "Why the leader stopped creating scheduled runs "
                       "(a scheduler error); cleared when the DAG is applied again."},
    "created_at": {"type": "string", "format": "date-time"},
    "updated_at": {"type": "string", "format": "date-time"},
}

#: A task's environment: the mapping form, or entries that may reference Secrets and ConfigMaps.
_ENV = {"oneOf": [{"type": "object", "additionalProperties": _STR}, {"type": "array", "items": {
    "type": "object", "required": ["name"], "properties": {
        "name": _STR, "value": _STR, "secret": {"type": "object"}, "config_map": {"type": "object"}}}}]}
#: The pod fields of a task and of ``defaults`` (Kubernetes objects as in Kubernetes, camelCase).
_POD_FIELDS: dict[str, Any] = {
    **{name: {"type": "array", "items": {"type": "object"}} for name in (
        "env_from", "volumes", "volume_mounts", "tolerations")},
    **{name: {"type": "object", "additionalProperties": _STR} for name in ("node_selector", "labels", "annotations")},
    **{name: {"type": "object"} for name in ("affinity", "security_context", "pod_template")},
    **{name: _STR for name in ("priority_class_name", "service_account", "image_pull_policy", "working_dir")},
    "automount_service_account_token": {"type": "boolean"},
}

#: Beside every spec a route answers (a DAG's, a version's): whether its env values are hidden.
ENV_VALUES_HIDDEN = {"type": "boolean", "description": "True when plain env values in the spec are shown as "
                     "<hidden> (a read-scoped token; admin tokens see the spec as stored)."}

SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _obj({"code": _STR, "message": _STR, "details": {}})}),
    "Dag": _obj(_DAG),
    "DagDetail": _obj({**_DAG, "spec": _nullable("object"), "env_values_hidden": ENV_VALUES_HIDDEN}),
    "DagPage": _page("Dag"),
    "DagSpec": {
        "type": "object", "description": "A DAG specification (the same schema as the YAML files); the limits "
                                         "are in docs/limits.md (leoflow/model/limits.py).",
        "required": ["dag_id", "tasks"], "additionalProperties": False,
        "properties": {
            "dag_id": _name(limits.DAG_ID), "description": _nullable("string", maxLength=limits.DESCRIPTION.maximum),
            "schedule": _nullable("string", maxLength=limits.SCHEDULE.max_length),
            "timezone": {"type": "string", "minLength": 1, "maxLength": limits.TIMEZONE.maximum},
            "catchup": {"type": "boolean"}, "start_date": _nullable("string"),
            "max_active_runs": _range(limits.MAX_ACTIVE_RUNS), "paused": {"type": "boolean"},
            "default_retries": _range(limits.RETRIES),
            "notify": {"type": "array", "description": "Webhook rules (see docs/notifications.md).",
                       "items": {"type": "object", "required": ["on", "webhook"], "properties": {
                           "on": {"type": "array", "items": {"type": "string",
                                                             "enum": ["failure", "success", "retry", "deadline"]}},
                           "webhook": {"type": "object", "required": ["url"], "properties": {
                               "url": _STR, "secret": {"type": "object"}, "header_from_env": {"type": "object"}}}}}},
            "params": {"type": "object", "description": "JSON Schema (draft 2020-12) of the runs' conf."},
            "run_timeout_seconds": {**_range(limits.RUN_TIMEOUT), "description": "Seconds a run may take from "
                                    "its start; then it fails with the reason 'run deadline exceeded'."},
            "max_active_tasks": {**_range(limits.MAX_ACTIVE_TASKS), "description": "Most task instances of the "
                                 "DAG queued or running at once, all runs together (default: no limit)"},
            "tasks": {"type": "array", "minItems": limits.TASKS.minimum, "maxItems": limits.TASKS.maximum,
                      "items": {"type": "object", "required": ["id"], "additionalProperties": False, "properties": {
                          "id": _name(limits.TASK_ID), "kind": {"type": "string", "enum": ["container", "empty"]},
                          "image": {"type": "string", "maxLength": limits.IMAGE.maximum},
                          "command": _strings(limits.COMMAND), "args": _strings(limits.COMMAND),
                          "env": _ENV,
                          "retries": _range(limits.RETRIES), "retry_delay_seconds": _range(limits.RETRY_DELAY),
                          "max_retry_delay_seconds": _range(limits.MAX_RETRY_DELAY),
                          "timeout_seconds": _range(limits.TIMEOUT), "resources": {"type": "object"},
                          "depends_on": {"type": "array", "items": _name(limits.TASK_ID),
                                         "maxItems": limits.TASKS.maximum},
                          "trigger_rule": {"type": "string", "enum": list(TRIGGER_RULES), "default": "all_success"},
                          "pool": {**_name(limits.POOL_NAME), "description": "The pool whose slot the task takes "
                                   "(default: default)"},
                          "priority": {**_range(limits.PRIORITY), "description": "Higher first among a pool's "
                                       "ready tasks (default 0)"}, **_POD_FIELDS}}},
            "defaults": {"type": "object", "description": "Pod fields every container task inherits (see "
                         "docs/task-pods.md).", "properties": {"env": _ENV, **_POD_FIELDS}},
        },
    },
    "DagPatch": _obj({"paused": {"type": "boolean"}}),
    "DagSyncRequest": _obj({
        "source": {"type": "string", "pattern": SOURCE_RE.pattern, "maxLength": 63,
                   "description": "Sync source label: owns the DAGs the files define; prune only deletes its own"},
        "prune": {"type": "boolean", "default": False,
                  "description": "Delete live DAGs of this source the files no longer define"},
        "prune_unlabeled": {"type": "boolean", "default": False,
                            "description": "With prune, also delete DAGs applied by hand (no source label)"},
        "dry_run": {"type": "boolean", "default": False, "description": "Plan only; change nothing"},
        "files": {"type": "array", "maxItems": MAX_FILES, "items": _ref("DagSyncFile")},
    }, required=["source", "files"]),
    "DagSyncFile": _obj({"name": {"type": "string", "minLength": 1, "maxLength": MAX_FILE_NAME,
                                  "description": "File name (relative path), used in problem reports; "
                                                 "*.json is read as JSON, anything else as YAML"},
                         "content": {"type": "string", "description": "The file's text (several YAML documents "
                                                                      "allowed)"}}),
    "DagSyncResult": _obj({
        "source": _STR, "prune": {"type": "boolean"}, "prune_unlabeled": {"type": "boolean"},
        "dry_run": {"type": "boolean"},
        "dags": {"type": "array", "items": _obj({
            "dag_id": _STR, "action": {"type": "string", "enum": list(ACTIONS)},
            "file": _nullable("string"), "document": _nullable("integer"), "version": _nullable("integer"),
            "adopted": {"type": "boolean"}})},
        "counts": _obj({a: _INT for a in ACTIONS}),
        "missing": {"type": "array", "items": _STR},
    }),
    "RunRequest": _obj({"run_id": {**_name(limits.RUN_ID), "not": {"pattern": f"^{SCHEDULED_PREFIX}"},
                                   "description": f"Not starting with {SCHEDULED_PREFIX} (the scheduler's)."},
                        "conf": _nullable("object"),
                        "run_timeout_seconds": {**_range(limits.RUN_TIMEOUT), "description": "This run's "
                                                "deadline in seconds from its start (overrides the DAG's)."}},
                       required=[]),
    "Run": _obj(_RUN),
    "RunDetail": _obj({**_RUN, "tasks": {"type": "array", "items": _ref("TaskInstance")}}),
    "RunPage": _page("Run"),
    "TaskInstance": _obj(_TASK_INSTANCE),
    "ClearRequest": _obj({
        "tasks": {"type": "array", "items": _STR, "minItems": limits.CLEAR_TASKS.minimum,
                  "maxItems": limits.CLEAR_TASKS.maximum,
                  "description": "Task ids to clear (default: every task, with failed_only)"},
        "failed_only": {"type": "boolean", "default": False,
                        "description": "Only task instances failed, upstream_failed or cancelled"},
        "downstream": {"type": "boolean", "default": False, "description": "Also every task downstream of them"},
    }, required=[]),
    "MarkRequest": _obj({"state": {"type": "string", "enum": list(MARK_STATES)}}),
    "CommandResult": _obj({
        "command": _obj({"id": _INT, "kind": {"type": "string", "enum": ["clear", "mark", "mark_run"]},
                         "state": {"type": "string", "enum": ["applied"]},
                         "tasks": {"type": "array", "items": _STR,
                                   "description": "Task ids cleared, or the task marked (empty: unchanged)"},
                         "marked": {"type": "string", "enum": list(MARK_STATES)}},
                        required=["id", "kind", "state", "tasks"]),
        "run": _ref("RunDetail")}),
    "CommandPending": _obj({"command": _obj({"id": _INT, "state": {"type": "string", "enum": ["pending"]}})}),
    "TaskInstancePage": _page("TaskInstance"),
    "TaskInstanceAnywhere": _obj({**_TASK_INSTANCE, "dag_id": _STR, "run_id": _STR}),
    "TaskInstanceAnywherePage": _page("TaskInstanceAnywhere"),
    "TaskTry": _obj({
        "try_number": _INT, "state": _STR, "executor_ref": _nullable("string"), "term": _INT,
        "queued_at": {"type": "string", "format": "date-time"}, "started_at": _TIME, "ended_at": _TIME,
        "exit_code": _nullable("integer"), "reason": _nullable("string"), "logs_shipped_at": _TIME,
        "logs_unavailable": _nullable("string"), "has_logs": {"type": "boolean"}}),
    "TaskDetail": _obj({**_TASK_INSTANCE, "tries": {"type": "array", "items": _ref("TaskTry")}}),
    "Leader": _obj({"node_id": _STR, "term": _INT, "since": _TIME, "api_url": _nullable("string")}),
    "Node": _obj({"node_id": _STR, "api_url": _nullable("string"), "version": _nullable("string"),
                  "started_at": _TIME, "last_seen": _TIME, "is_leader": {"type": "boolean"}, "state": _STR},
                 extra=True),
    "NodeList": _obj({"items": {"type": "array", "items": _ref("Node")}}),
    "Event": _obj({"id": _INT, "ts": _TIME, "kind": _STR, "node_id": _nullable("string"),
                   "term": _nullable("integer"), "details": {"type": "object"}}, extra=True),
    "EventPage": _page("Event"),
    "Health": _obj({"status": _STR}),
    "Ready": _obj({"status": _STR, "schema": _STR, "pooler": {"type": "boolean"}}),
}

_RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}}
RESPONSES: dict[str, Any] = {
    name: {"description": text, "content": {JSON: {"schema": _ref("Error")}}, **extra}
    for name, text, extra in (
        ("BadRequest", "Malformed input (the message and details.field name it).", {}),
        ("Unauthorized", "Missing or invalid bearer token.",
         {"headers": {"WWW-Authenticate": {"schema": {"type": "string"}}}}),
        ("Forbidden", "The token's scope does not allow this request.", {}),
        ("NotFound", "No such object.", {}),
        ("Conflict", "Conflicts with the current state.", {}),
        ("TooLarge", "The body exceeds LEOFLOW_MAX_BODY_BYTES.", {}),
        ("UnsupportedMediaType", "Send application/json or application/yaml.", {}),
        ("Unprocessable", "Invalid content (details.field names the path of the first problem; a DAG spec "
                          "with several has details.errors, each {field, message}, the first included).", {}),
        ("Unavailable", "The database is unreachable (or no leader); retry later.", {"headers": _RETRY_AFTER}),
    )
}
_ERR = {"400": "BadRequest", "401": "Unauthorized", "403": "Forbidden", "404": "NotFound", "409": "Conflict",
        "413": "TooLarge", "415": "UnsupportedMediaType", "422": "Unprocessable", "503": "Unavailable"}


def _param(name: str, where: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path", "schema": schema, "description": description}


DAG_ID = {**_param("dag_id", "path", {"type": "string"}, "DAG id"), "example": "etl-daily"}
RUN_ID = {**_param("run_id", "path", {"type": "string"}, "Run id"), "example": "manual-1"}
TASK_ID = {**_param("task_id", "path", {"type": "string"}, "Task id"), "example": "extract"}
LIMIT = _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
               "Page size")
CURSOR = _param("cursor", "query", {"type": "string"}, "Opaque cursor from a previous page's next_cursor")


def _state(values: tuple[str, ...]) -> dict[str, Any]:
    return _param("state", "query", {"type": "string", "enum": list(values)}, "Only items in this state")


def _op(summary: str, ok: dict[str, Any], *, errors: str = "", params: list[dict[str, Any]] | None = None,
        body: str | None = None, body_required: bool = True, auth: str = "read") -> dict[str, Any]:
    responses = dict(ok)
    codes = set(errors.split())
    if auth in ("read", "admin"):
        codes |= {"401", "503"}
    if auth == "admin":
        codes.add("403")
    if body:
        codes |= {"400", "413", "415", "422"}
    for code in sorted(codes):
        responses[code] = {"$ref": f"#/components/responses/{_ERR[code]}"}
    op: dict[str, Any] = {"summary": summary, "operationId": summary.lower().replace(" ", "_").replace("'", ""),
                          "responses": responses, "parameters": params or []}
    if auth == "open":
        op["security"] = []
    elif auth == "metrics":  # open unless LEOFLOW_METRICS_AUTH=true
        op["security"] = [{}, {"bearer": []}]
    if body:
        schema = _ref(body)
        op["requestBody"] = {"required": body_required, "content": {JSON: {"schema": schema},
                                                                     "application/yaml": {"schema": schema}}}
    return op


def _json(code: str, schema: str, description: str = "OK", links: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {JSON: {"schema": _ref(schema)}}}
    if links:
        answer["links"] = links
    return {code: answer}


def _links(*operation_ids: str, run: bool = False) -> dict[str, Any]:
    """OpenAPI links from an answer carrying ``dag_id`` (and ``run_id``) to the operations that take
    them: what a client does next, and what schemathesis' stateful phase chains (apply → trigger → read)."""
    parameters = {"dag_id": "$response.body#/dag_id"}
    if run:
        parameters["run_id"] = "$response.body#/run_id"
    return {op: {"operationId": op, "parameters": parameters} for op in operation_ids}


_DAG_LINKS = _links("trigger_run", "get_dag", "list_runs", "pause_or_unpause_dag")
_RUN_LINKS = _links("get_run", "list_task_instances", "cancel_run", run=True)


_TEXT = {"content": {"text/plain": {"schema": {"type": "string"}}}}
_RUN_PATH = [DAG_ID, RUN_ID]


def _get_run() -> dict[str, Any]:
    """The hot read, with its long poll (leoflow.api.run_waits)."""
    op = _op("Get run", _json("200", "RunDetail"), errors="400 404", params=[
        *_RUN_PATH,
        _param("wait", "query", {"type": "number", "minimum": 0, "maximum": 30},
               "With If-None-Match: seconds to wait for the run to change (304 if it does not)"),
        _param("If-None-Match", "header", {"type": "string"}, "The ETag of the document the client has")])
    op["responses"]["200"]["headers"] = {"ETag": {"schema": _STR}}
    op["responses"]["304"] = {"description": "Unchanged (after waiting)", "headers": {"ETag": {"schema": _STR}}}
    return op


def operations() -> dict[str, dict[str, Any]]:
    """``{path: {method: operation}}`` for every route of the app."""
    return {
        "/healthz": {"get": _op("Liveness", _json("200", "Health"), auth="open")},
        "/readyz": {"get": _op("Readiness", _json("200", "Ready"), auth="open", errors="503")},
        "/metrics": {"get": _op("Prometheus metrics", {"200": {"description": "Text exposition", **_TEXT}},
                                auth="metrics", errors="401")},
        "/api/v2/openapi.json": {"get": _op("OpenAPI document", {"200": {
            "description": "This document", "content": {JSON: {"schema": {"type": "object"}}}}}, auth="open")},
        "/api/v2/cluster/leader": {"get": _op("Current leader", _json("200", "Leader"))},
        "/api/v2/cluster/nodes": {"get": _op("Cluster nodes", _json("200", "NodeList"))},
        "/api/v2/cluster/events": {"get": _op("Cluster events", _json("200", "EventPage"), errors="400",
                                              params=[LIMIT, CURSOR])},
        "/api/v2/dags": {
            "get": _op("List DAGs", _json("200", "DagPage"), errors="400",
                       params=[LIMIT, CURSOR, _state(("active", "paused"))]),
            "post": _op("Apply DAG", {**_json("200", "DagDetail", "Unchanged", _DAG_LINKS),
                                      **_json("201", "DagDetail", "Created", _DAG_LINKS)},
                        body="DagSpec", auth="admin", errors="409"),
        },
        "/api/v2/dags:sync": {
            "post": _op("Sync DAG files", _json("200", "DagSyncResult", "The plan (applied unless dry_run)"),
                        body="DagSyncRequest", auth="admin", errors="409"),
        },
        "/api/v2/dags/{dag_id}": {
            "get": _op("Get DAG", _json("200", "DagDetail"), errors="404", params=[DAG_ID]),
            "put": _op("Put DAG", {**_json("200", "DagDetail", "Unchanged", _DAG_LINKS),
                                   **_json("201", "DagDetail", "Created", _DAG_LINKS)},
                       body="DagSpec", auth="admin", errors="409", params=[DAG_ID]),
            "patch": _op("Pause or unpause DAG", _json("200", "DagDetail"), body="DagPatch", auth="admin",
                         errors="404", params=[DAG_ID]),
            "delete": _op("Delete DAG", {"204": {"description": "Deleted"}}, auth="admin", errors="404",
                          params=[DAG_ID]),
        },
        "/api/v2/dags/{dag_id}/runs": {
            "get": _op("List runs", _json("200", "RunPage"), errors="400 404",
                       params=[DAG_ID, LIMIT, CURSOR, _state(RUN_STATES)]),
            "post": _op("Trigger run", _json("201", "RunDetail", "Created", _RUN_LINKS), body="RunRequest",
                        body_required=False,
                        auth="admin", errors="404 409", params=[DAG_ID]),
        },
        "/api/v2/runs": {
            "get": _op("List runs of every DAG", _json("200", "RunPage"), errors="400",
                       params=[LIMIT, CURSOR, _state(RUN_STATES),
                               _param("dag_id", "query", {"type": "string"}, "Only this DAG's runs"),
                               _param("since", "query", {"type": "string", "maxLength": 40},
                                      "Only runs created at or after this ISO 8601 date (midnight UTC) or time")]),
        },
        "/api/v2/task-instances": {
            "get": _op("List task instances of every run", _json("200", "TaskInstanceAnywherePage"), errors="400",
                       params=[LIMIT, CURSOR, _state(TASK_STATES),
                               _param("dag_id", "query", {"type": "string"}, "Only this DAG's task instances"),
                               _param("since", "query", {"type": "string", "maxLength": 40},
                                      "Only task instances of runs created at or after this ISO 8601 date "
                                      "(midnight UTC) or time")]),
        },
        "/api/v2/dags/{dag_id}/runs/{run_id}": {"get": _get_run()},
        "/api/v2/dags/{dag_id}/runs/{run_id}/cancel": {
            "post": _op("Cancel run", _json("200", "RunDetail"), auth="admin", errors="404 409", params=_RUN_PATH)},
        "/api/v2/dags/{dag_id}/runs/{run_id}/clear": {
            "post": _op("Clear task instances (the leader applies it)", {
                **_json("200", "CommandResult", "Applied by the leader"),
                **_json("202", "CommandPending", "Recorded; no leader applied it within 10 s (the next one will)")},
                body="ClearRequest", auth="admin", errors="404 409", params=_RUN_PATH)},
        "/api/v2/dags/{dag_id}/runs/{run_id}/mark": {
            "post": _op("Mark a run success or failed, with its unfinished tasks (the leader applies it)", {
                **_json("200", "CommandResult", "Applied by the leader"),
                **_json("202", "CommandPending", "Recorded; no leader applied it within 10 s (the next one will)")},
                body="MarkRequest", auth="admin", errors="404 409", params=_RUN_PATH)},
        "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/mark": {
            "post": _op("Mark a task instance success or failed (the leader applies it)", {
                **_json("200", "CommandResult", "Applied by the leader"),
                **_json("202", "CommandPending", "Recorded; no leader applied it within 10 s (the next one will)")},
                body="MarkRequest", auth="admin", errors="404 409", params=[*_RUN_PATH, TASK_ID])},
        "/api/v2/dags/{dag_id}/runs/{run_id}/tasks": {
            "get": _op("List task instances", _json("200", "TaskInstancePage"), errors="400 404",
                       params=[*_RUN_PATH, LIMIT, CURSOR, _state(TASK_STATES)])},
        "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}": {
            "get": _op("Get task instance", _json("200", "TaskDetail"), errors="404", params=[*_RUN_PATH, TASK_ID])},
        "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/logs": {
            "get": _op("Get task log", {"200": {
                "description": "The try's log (plain text): live from its pod while it runs on Kubernetes (a "
                               "bounded tail, read by whichever replica answers), else what is stored.", **_TEXT,
                "headers": {
                    "X-Leoflow-Try": {"schema": _STR, "description": "The try shown"},
                    "X-Leoflow-Log-Complete": {"schema": _STR, "description": "true once the log is final"},
                    "X-Leoflow-Log-Source": {"schema": {"type": "string", "enum": ["pod", "stored"]}},
                    "X-Leoflow-Log-Cursor": {"schema": _STR, "description": "With since: pass it back as since"},
                    "X-Leoflow-Log-Continues": {"schema": _STR, "description": "With since: false when the "
                                                "text is the whole stored log, not a continuation"}}}},
                       errors="400 404", params=[*_RUN_PATH, TASK_ID, _param(
                           "try", "query", {"type": "integer", "minimum": 1}, "Try number (default: latest)"),
                           _param("since", "query", {"type": "string", "maxLength": 64},
                                  "Follow mode: only output after this cursor (empty to start); no notes")])},
    }


@cache
def openapi_document() -> dict[str, Any]:
    from leoflow.api import openapi_day2, openapi_pools

    return {
        "openapi": "3.1.0",
        "info": {"title": "Leoflow API", "version": __version__,
                 "description": "The stateless HTTP API served by every Leoflow replica."},
        "paths": {**operations(), **openapi_day2.operations(), **openapi_pools.operations()},
        "components": {"schemas": {**SCHEMAS, **openapi_day2.SCHEMAS, **openapi_pools.SCHEMAS}, "responses": RESPONSES,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }

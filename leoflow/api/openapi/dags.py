"""OpenAPI schemas of the DAG routes: apply, read, pause, delete, and the sync of a
folder of DAG files (``dags:sync``).
"""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import (
    INT,
    STR,
    TIME,
    json_answer,
    links,
    name,
    nullable,
    number_range,
    obj,
    page,
    param,
    ref,
    strings,
)
from leoflow.model import limits
from leoflow.model.files.dag_files import MAX_FILE_NAME, MAX_FILES
from leoflow.model.files.dag_sync import ACTIONS
from leoflow.model.source_labels import SOURCE_RE
from leoflow.model.spec.trigger_rules import TRIGGER_RULES
from leoflow.model.states import DAG_LAST_RUN_STATES, DAG_STATES, RUN_STATES

_DAG = {
    "dag_id": STR, "paused": {"type": "boolean"}, "version": nullable("integer"),
    "schedule": {"type": ["string", "object", "null"], "description": "As the current version's spec says it: a "
                 "cron, {datasets: {all|any: [URI…]}}, or null (manual runs only)"},
    "next_run_at": TIME, "source": {**nullable("string"), "description": "Sync source label owning the DAG "
                                     "(null: applied by hand)"},
    "schedule_error": {**nullable("string"), "description": "Why the leader stopped creating scheduled runs "
                       "(a scheduler error); cleared when the DAG is applied again."},
    "created_at": {"type": "string", "format": "date-time"},
    "updated_at": {"type": "string", "format": "date-time"},
}

#: The DAG list's filters (``GET /api/v2/dags``); a value outside these is a 400 naming the parameter.
LIST_PARAMS = [
    param("paused", "query", {"type": "string", "enum": ["true", "false"]}, "Only paused (true) or unpaused DAGs"),
    param("prefix", "query", {"type": "string", "maxLength": limits.DAG_ID.max_length},
          "Only DAGs whose id starts with this text (matched literally: % and _ are not wildcards)"),
    param("state", "query", {"type": "string", "enum": [*DAG_LAST_RUN_STATES, *DAG_STATES]},
          "Only DAGs whose last run (the one created last) is in this state; none: DAGs that never ran. "
          "active/paused: the same as paused=false/true (kept for older clients)."),
]

#: A task's environment: the mapping form, or entries that may reference Secrets and ConfigMaps.
_ENV = {"oneOf": [{"type": "object", "additionalProperties": STR}, {"type": "array", "items": {
    "type": "object", "required": ["name"], "properties": {
        "name": STR, "value": STR, "secret": {"type": "object"}, "config_map": {"type": "object"}}}}]}
#: The pod fields of a task and of ``defaults`` (Kubernetes objects as in Kubernetes, camelCase).
_POD_FIELDS: dict[str, Any] = {
    **{field: {"type": "array", "items": {"type": "object"}} for field in (
        "env_from", "volumes", "volume_mounts", "tolerations")},
    **{field: {"type": "object", "additionalProperties": STR} for field in ("node_selector", "labels", "annotations")},
    **{field: {"type": "object"} for field in ("affinity", "security_context", "pod_template")},
    **{field: STR for field in ("priority_class_name", "service_account", "image_pull_policy", "working_dir")},
    "automount_service_account_token": {"type": "boolean"},
}

#: Beside every spec a route answers (a DAG's, a version's): whether its env values are hidden.
ENV_VALUES_HIDDEN = {"type": "boolean", "description": "True when plain env values in the spec are shown as "
                     "<hidden> (a read-scoped token; admin tokens see the spec as stored)."}

SCHEMAS: dict[str, Any] = {
    "Dag": obj({**_DAG, "last_run_id": {**nullable("string"), "description": "The DAG's last run (the one created "
                                        "last; null: it never ran)"},
                "last_run_state": {"type": ["string", "null"], "enum": [*RUN_STATES, None],
                                             "description": "Its state"}}),
    "DagDetail": obj({**_DAG, "spec": nullable("object"), "env_values_hidden": ENV_VALUES_HIDDEN,
                      "pending_slot": {**nullable("object"), "description": "A schedule with combine: and: the "
                                       "cron slot waiting for the DAG's datasets (its logical_date and "
                                       "data_interval_start); null when none waits", "properties": {
                                           "logical_date": TIME, "data_interval_start": TIME}},
                      "template_changes": {"type": "array", "description": "Applying only: the cluster templates "
                                           "whose version this apply changed (from: null when newly used)",
                                           "items": obj({"template": STR, "from": nullable("integer"),
                                                         "to": nullable("integer")})}},
                     required=[*_DAG, "spec", "env_values_hidden"]),
    "DagPage": page("Dag"),
    "DagSpec": {
        "type": "object", "description": "A DAG specification (the same schema as the YAML files); the limits "
                                         "are in docs/limits.md (leoflow/model/limits.py).",
        "required": ["dag_id", "tasks"], "additionalProperties": False,
        "properties": {
            "dag_id": name(limits.DAG_ID), "description": nullable("string", maxLength=limits.DESCRIPTION.maximum),
            "schedule": nullable("string", maxLength=limits.SCHEDULE.max_length),
            "timezone": {"type": "string", "minLength": 1, "maxLength": limits.TIMEZONE.maximum},
            "catchup": {"type": "boolean"}, "start_date": nullable("string"),
            "max_active_runs": number_range(limits.MAX_ACTIVE_RUNS), "paused": {"type": "boolean"},
            "default_retries": number_range(limits.RETRIES),
            "notify": {"type": "array", "description": "Webhook rules (see docs/notifications.md).",
                       "items": {"type": "object", "required": ["on", "webhook"], "properties": {
                           "on": {"type": "array", "items": {"type": "string",
                                                             "enum": ["failure", "success", "retry", "deadline"]}},
                           "webhook": {"type": "object", "required": ["url"], "properties": {
                               "url": STR, "secret": {"type": "object"}, "header_from_env": {"type": "object"}}}}}},
            "params": {"type": "object", "description": "JSON Schema (draft 2020-12) of the runs' conf."},
            "run_timeout_seconds": {**number_range(limits.RUN_TIMEOUT), "description": "Seconds a run may take from "
                                    "its start; then it fails with the reason 'run deadline exceeded'."},
            "max_active_tasks": {**number_range(limits.MAX_ACTIVE_TASKS), "description": "Most task instances of the "
                                 "DAG queued or running at once, all runs together (default: no limit)"},
            "team": {**name(limits.TEAM_NAME), "description": "The team owning the DAG (docs/access-control.md); "
                     "default: the team whose DAG-id prefix it has"},
            "template_syntax": {"type": "integer", "enum": [1], "description": "Set by Leoflow in the stored form "
                                "of a DAG whose command/args/env hold {{ … }} templates (docs/dag-spec.md); may be "
                                "left out"},
            "tasks": {"type": "array", "minItems": limits.TASKS.minimum, "maxItems": limits.TASKS.maximum,
                      "items": {"type": "object", "required": ["id"], "additionalProperties": False, "properties": {
                          "id": name(limits.TASK_ID), "kind": {"type": "string", "enum": ["container", "empty"]},
                          "image": {"type": "string", "maxLength": limits.IMAGE.maximum},
                          "command": {**strings(limits.COMMAND), "description": "Absent or empty: the image's "
                                      "entrypoint runs with args (Kubernetes executor only)"},
                          "args": strings(limits.COMMAND),
                          "env": _ENV,
                          "retries": number_range(limits.RETRIES),
                          "retry_delay_seconds": number_range(limits.RETRY_DELAY),
                          "max_retry_delay_seconds": number_range(limits.MAX_RETRY_DELAY),
                          "timeout_seconds": number_range(limits.TIMEOUT), "resources": {"type": "object"},
                          "depends_on": {"type": "array", "items": name(limits.TASK_ID),
                                         "maxItems": limits.TASKS.maximum},
                          "trigger_rule": {"type": "string", "enum": list(TRIGGER_RULES), "default": "all_success"},
                          "pool": {**name(limits.POOL_NAME), "description": "The pool whose slot the task takes "
                                   "(default: default)"},
                          "priority": {**number_range(limits.PRIORITY), "description": "Higher first among a pool's "
                                       "ready tasks (default 0)"},
                          "when": {"type": "string", "minLength": 1, "maxLength": limits.WHEN.maximum,
                                   "description": "A boolean CEL expression over params, run and the ancestors' "
                                   "tasks.T.outputs: false skips the task, an error fails it"},
                          "skip_on_exit_code": {"type": "array", "maxItems": limits.SKIP_EXIT_CODES.maximum,
                                                "uniqueItems": True,
                                                "items": {"type": "integer", "minimum": 0, "maximum": 255},
                                                "description": "Exit codes that end a try as skipped, not failed"},
                          "uses": {"description": "A template: NAME (the DAG's templates:), cluster/NAME or "
                                   "cluster/NAME@VERSION, whose fields are inlined at apply; the stored form "
                                   "records it as {template, version}",
                                   "anyOf": [STR, obj({"template": STR, "version": {"type": "integer", "minimum": 1}},
                                                      required=["template"])]},
                          "inputs": {"type": "object", "maxProperties": limits.TEMPLATE_INPUTS.maximum,
                                     "description": "Values of the template's inputs ({{ inputs.NAME }})"},
                          **_POD_FIELDS}}},
            "templates": {"type": "array", "maxItems": limits.TEMPLATES.maximum,
                          "description": "Task shapes the tasks use (uses: NAME); see docs/dag-spec.md",
                          "items": {"type": "object", "required": ["name"], "properties": {
                              "name": name(limits.TEMPLATE_NAME), "inputs": {"type": "object"}}}},
            "defaults": {"type": "object", "description": "Pod fields every container task inherits (see "
                         "docs/task-pods.md).", "properties": {"env": _ENV, **_POD_FIELDS}},
        },
    },
    "DagPatch": obj({"paused": {"type": "boolean"}}),
    "DagSyncRequest": obj({
        "source": {"type": "string", "pattern": SOURCE_RE.pattern, "maxLength": 63,
                   "description": "Sync source label: owns the DAGs the files define; prune only deletes its own"},
        "prune": {"type": "boolean", "default": False,
                  "description": "Delete live DAGs of this source the files no longer define"},
        "prune_unlabeled": {"type": "boolean", "default": False,
                            "description": "With prune, also delete DAGs applied by hand (no source label)"},
        "dry_run": {"type": "boolean", "default": False, "description": "Plan only; change nothing"},
        "files": {"type": "array", "maxItems": MAX_FILES, "items": ref("DagSyncFile")},
    }, required=["source", "files"]),
    "DagSyncFile": obj({"name": {"type": "string", "minLength": 1, "maxLength": MAX_FILE_NAME,
                                  "description": "File name (relative path), used in problem reports; "
                                                 "*.json is read as JSON, anything else as YAML"},
                         "content": {"type": "string", "description": "The file's text (several YAML documents "
                                                                      "allowed)"}}),
    "DagSyncResult": obj({
        "source": STR, "prune": {"type": "boolean"}, "prune_unlabeled": {"type": "boolean"},
        "dry_run": {"type": "boolean"},
        "dags": {"type": "array", "items": obj({
            "dag_id": STR, "action": {"type": "string", "enum": list(ACTIONS)},
            "file": nullable("string"), "document": nullable("integer"), "version": nullable("integer"),
            "adopted": {"type": "boolean"}})},
        "counts": obj({a: INT for a in ACTIONS}),
        "missing": {"type": "array", "items": STR},
    }),
}

DAG_LINKS = links("trigger_run", "get_dag", "list_runs", "pause_or_unpause_dag")

#: What applying a DAG answers (POST and PUT): unchanged, or created.
APPLY_ANSWERS = {**json_answer("200", "DagDetail", "Unchanged", DAG_LINKS),
                 **json_answer("201", "DagDetail", "Created", DAG_LINKS)}

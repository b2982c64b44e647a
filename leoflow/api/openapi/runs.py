"""OpenAPI schemas of the run routes: runs, their task instances and tries, the logs,
and the commands the leader applies to a run (clear, mark).
"""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import (
    INT,
    STR,
    TEXT,
    TIME,
    json_answer,
    links,
    name,
    nullable,
    number_range,
    obj,
    page,
    ref,
)
from leoflow.model import limits
from leoflow.model.run_commands import MARK_STATES
from leoflow.model.run_ids import SCHEDULED_PREFIX
from leoflow.model.states import RUN_STATES, TASK_STATES

_TASK_INSTANCE = {
    "task_id": STR, "state": {"type": "string", "enum": list(TASK_STATES)}, "try_number": INT,
    "max_tries": INT, "queued_at": TIME, "started_at": TIME, "ended_at": TIME, "next_try_at": TIME,
    "reason": nullable("string"),
    "map_count": {**nullable("integer"), "description": (
        "A mapped task (map_over): how many instances it expanded into; null for a task that is not mapped, "
        "or not expanded yet. Its row then sums up its instances (state: the most active of them, then "
        "failed, cancelled, upstream_failed, all skipped, else success); ?map_index= names one.")},
    "map_states": {**nullable("object"), "additionalProperties": {"type": "integer"},
                   "description": "A mapped task's instances counted by state; null otherwise."},
}
#: One instance of a mapped task (or an unmapped task: -1), in the task-instance document.
_MAP_INDEX = {"map_index": {"type": "integer", "minimum": -1, "description": (
    "Which instance of a mapped task this is (0 and up); -1 for an unmapped task and for a mapped "
    "task's summary.")}}
#: A task instance's current outputs (ADR 0014, decision 1), in its document and from the outputs route.
_OUTPUTS = nullable("object", description=(
    "What the task published (one JSON object, at most 4,095 bytes): the outputs of try try_number while "
    "the task instance is success; null otherwise (not succeeded yet, cleared, failed, or a success "
    "without outputs)."))
_RUN = {
    "dag_id": STR, "run_id": STR, "run_type": STR, "state": {"type": "string", "enum": list(RUN_STATES)},
    "reason": {**nullable("string"), "description": "Why the run ended as it did: the failed task that "
               "decided it (for an upstream_failed leaf, its earliest failed ancestor) and that task's reason, "
               "then a failed on_exit task's, a scheduler error stored on the run, or 'run deadline exceeded'."},
    "logical_date": TIME, "conf": {"type": "object"}, "created_at": {"type": "string", "format": "date-time"},
    "started_at": TIME, "ended_at": TIME, "updated_at": {"type": "string", "format": "date-time"},
    "dag_version": INT, "backfill_id": nullable("integer"),
    "deadline_at": {**TIME, "description": "When the run fails with 'run deadline exceeded' (set when it starts, "
                    "from run_timeout_seconds); null without a deadline."},
    "body_state": {**nullable("string"), "enum": ["success", "failed", None], "description": (
        "What the run's tasks decided before its on_exit tasks ran (success or failed); null without "
        "on_exit tasks or until the other tasks have all ended. The run ends failed if an exit task "
        "fails, else in this state.")},
    "triggering_events": {**nullable("array"), "items": {"type": "object"}, "description": (
        "A dataset-triggered run (run_type dataset): per URI, the events it consumed, coalesced (uri, events, "
        "first_event_id, last_event_id, first_at, last_at, and the last event's source: task with dag_id, "
        "run_id, task_id, or api; and the last event's extra when it had one); null for every other run. Tasks "
        "get it as LEOFLOW_TRIGGERING_EVENTS.")},
    "data_interval_start": {**TIME, "description": "The start of the span of data the run is for: a scheduled "
                            "run's previous fire time; a manual or dataset-triggered run's logical date. Tasks get "
                            "LEOFLOW_DATA_INTERVAL_START and {{ run.data_interval_start }}."},
    "data_interval_end": {**TIME, "description": "The end of the run's data interval: its logical date (the "
                          "slot it is named after, not the start of the interval as in Airflow)."},
}
SCHEMAS: dict[str, Any] = {
    "RunRequest": obj({"run_id": {**name(limits.RUN_ID), "not": {"pattern": f"^{SCHEDULED_PREFIX}"},
                                   "description": f"Not starting with {SCHEDULED_PREFIX} (the scheduler's)."},
                        "conf": nullable("object"),
                        "run_timeout_seconds": {**number_range(limits.RUN_TIMEOUT), "description": "This run's "
                                                "deadline in seconds from its start (overrides the DAG's)."},
                        "logical_date": {**nullable("string"), "format": "date-time", "description": (
                            "The moment the run is for (default: now), ISO 8601 with an offset, from 1970 to "
                            "2199; its data interval starts and ends there.")}},
                       required=[]),
    "Run": obj(_RUN),
    "RunDetail": obj({**_RUN, "tasks": {"type": "array", "items": ref("TaskInstance")}}),
    "RunPage": page("Run"),
    "TaskInstance": obj(_TASK_INSTANCE),
    "ClearRequest": obj({
        "tasks": {"type": "array", "items": STR, "minItems": limits.CLEAR_TASKS.minimum,
                  "maxItems": limits.CLEAR_TASKS.maximum,
                  "description": "Task ids to clear (default: every task, with failed_only)"},
        "failed_only": {"type": "boolean", "default": False,
                        "description": "Only task instances failed, upstream_failed or cancelled"},
        "downstream": {"type": "boolean", "default": False, "description": "Also every task downstream of them"},
        "map_index": {"type": "integer", "minimum": 0, "maximum": limits.MAP_ITEMS.maximum - 1, "description": (
            "Only this instance of the one mapped task named in tasks (it runs again; the task does not "
            "expand again). Without it a cleared mapped task expands again from its source's current value.")},
    }, required=[]),
    "MarkRequest": obj({"state": {"type": "string", "enum": list(MARK_STATES)}}),
    "CommandResult": obj({
        "command": obj({"id": INT, "kind": {"type": "string", "enum": ["clear", "mark", "mark_run"]},
                         "state": {"type": "string", "enum": ["applied"]},
                         "tasks": {"type": "array", "items": STR,
                                   "description": "Task ids cleared, or the task marked (empty: unchanged)"},
                         "marked": {"type": "string", "enum": list(MARK_STATES)},
                         "map_index": {"type": "integer", "minimum": 0,
                                       "description": "The instance of a mapped task marked (?map_index=)"}},
                        required=["id", "kind", "state", "tasks"]),
        "run": ref("RunDetail")}),
    "CommandPending": obj({"command": obj({"id": INT, "state": {"type": "string", "enum": ["pending"]}})}),
    "TaskInstancePage": page("TaskInstance"),
    "TaskInstanceAnywhere": obj({**_TASK_INSTANCE, **_MAP_INDEX, "dag_id": STR, "run_id": STR}),
    "TaskInstanceAnywherePage": page("TaskInstanceAnywhere"),
    "TaskTry": obj({
        "try_number": INT, "state": STR, "executor_ref": nullable("string"), "term": INT,
        "queued_at": {"type": "string", "format": "date-time"}, "started_at": TIME, "ended_at": TIME,
        "exit_code": nullable("integer"), "reason": nullable("string"), "logs_shipped_at": TIME,
        "logs_unavailable": nullable("string"), "has_logs": {"type": "boolean"}}),
    "TaskDetail": obj({**_TASK_INSTANCE, **_MAP_INDEX, "outputs": _OUTPUTS,
                       "tries": {"type": "array", "items": ref("TaskTry")},
                       "waiting_for": {"type": "array", "items": ref("TaskWait"),
                                       "description": "Its wait_for / depends_on_past conditions (empty: none)"}}),
    "PodEvent": obj({
        "type": {"type": "string", "description": "Normal or Warning"},
        "reason": {**STR, "description": "e.g. Scheduled, FailedScheduling, FailedMount, Pulling, BackOff, Killing"},
        "message": {**STR, "maxLength": limits.POD_EVENT_MESSAGE.maximum},
        "container": nullable("string", description="The container the event is about (null: the pod)"),
        "count": {**INT, "description": "How often it happened (the API server folds repeats into one event)"},
        "first_seen": {"type": "string", "format": "date-time"},
        "last_seen": {"type": "string", "format": "date-time"}}),
    "TaskEvents": obj({
        "try_number": INT,
        "events": {"type": "array", "items": ref("PodEvent"), "maxItems": limits.POD_EVENTS.maximum,
                   "description": "The Kubernetes events of the try's pod, oldest first (empty: none kept, or "
                                  "not a Kubernetes try)"}}),
    "TaskOutputs": obj({
        "try_number": {**INT, "description": "The try whose outputs these are: the task instance's current one"},
        "state": {"type": "string", "enum": list(TASK_STATES), "description": "The task instance's state"},
        "outputs": _OUTPUTS}),
}

RUN_LINKS = links("get_run", "list_task_instances", "cancel_run", run=True)

#: A command's answers: applied by the leader within 10 s, or recorded for the next one.
COMMAND_ANSWERS = {
    **json_answer("200", "CommandResult", "Applied by the leader"),
    **json_answer("202", "CommandPending", "Recorded; no leader applied it within 10 s (the next one will)")}


def etag_answers(document: dict[str, Any]) -> None:
    """The hot read's long poll (leoflow.api.run_waits): an ETag on 200, and 304 when unchanged."""
    document["responses"]["200"]["headers"] = {"ETag": {"schema": STR}}
    document["responses"]["304"] = {"description": "Unchanged (after waiting)", "headers": {"ETag": {"schema": STR}}}


#: A task's log: plain text, and where it came from in the headers.
LOG_ANSWER = {"200": {
    "description": "The try's log (plain text): live from its pod while it runs on Kubernetes (a "
                   "bounded tail, read by whichever replica answers), else what is stored.", **TEXT,
    "headers": {
        "X-Leoflow-Try": {"schema": STR, "description": "The try shown"},
        "X-Leoflow-Log-Complete": {"schema": STR, "description": "true once the log is final"},
        "X-Leoflow-Log-Source": {"schema": {"type": "string", "enum": ["pod", "stored", "archive"]}},
        "X-Leoflow-Log-Size": {"schema": STR, "description": "Archive: bytes of the container's output archived"},
        "X-Leoflow-Log-Offset": {"schema": STR, "description": "Archive: the first byte answered"},
        "X-Leoflow-Log-Containers": {"schema": STR, "description": "Archive: the try's archived containers"},
        "X-Leoflow-Log-Cursor": {"schema": STR, "description": "With since: pass it back as since"},
        "X-Leoflow-Log-Continues": {"schema": STR, "description": "With since: false when the "
                                    "text is the whole stored log, not a continuation"}}}}

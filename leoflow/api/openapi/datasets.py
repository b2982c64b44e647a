"""The OpenAPI schemas of datasets (operations: :mod:`leoflow.api.routes.datasets`)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import INT, STR, TIME, nullable, obj, param, ref
from leoflow.model import limits

_URI = {"type": "string", "minLength": 1, "maxLength": limits.DATASET_URI.maximum,
        "description": "Any string without control characters; compared as written, never read"}

_EXTRA = {**nullable("object"), "description": f"Stored with the event (null: none); {limits.DATASET_EXTRA.rule}"}
_ANSWER = {
    "uri": STR, "source": {"type": "string", "enum": ["task", "api"]},
    "queued_for": {"type": "integer", "description": "Consuming DAGs whose queue took the event"},
}

SCHEMAS: dict[str, Any] = {
    "DatasetEventRequest": {
        **obj({
            "uri": _URI,
            "extra": _EXTRA,
            "events": {"type": "array", "minItems": limits.DATASET_EVENT_BATCH.minimum,
                       "maxItems": limits.DATASET_EVENT_BATCH.maximum,
                       "items": obj({"uri": _URI, "extra": _EXTRA}, required=["uri"]),
                       "description": "The list form, instead of uri/extra: recorded in one transaction, all "
                                      "or none, each event audited; the answer lists each event in order"},
        }, required=[]),
        "description": "One event (uri, extra) or the list form (events)",
    },
    "DatasetEvent": {
        **obj({
            **_ANSWER,
            "events": {"type": "array", "items": obj(_ANSWER), "description": "The list form's answer, in order"},
        }, required=[]),
        "description": "One event's uri, source and queued_for; for the list form, only events",
    },
    "Dataset": obj({
        "uri": STR,
        "producers": {"type": "array", "items": obj({"dag_id": STR, "task_id": STR})},
        "consumers": {"type": "array", "items": STR, "description": "DAGs whose schedule waits on the URI"},
        "no_producer": {"type": "boolean", "description": "No task of a live DAG produces it (outside events only)"},
        "last_event": {**nullable("object"), "properties": {
            "id": INT, "source": STR, "dag_id": nullable("string"), "run_id": nullable("string"),
            "task_id": nullable("string"), "created_at": TIME}},
        "queued": {"type": "array", "items": obj({"dag_id": STR, "events": INT, "first_at": TIME, "last_at": TIME}),
                   "description": "Events waiting for each consumer, coalesced (one entry per DAG)"},
    }),
    "DatasetList": obj({"items": {"type": "array", "items": ref("Dataset")}, "next_cursor": nullable("string")}),
}

URI = param("uri", "query", {"type": "string", "maxLength": limits.DATASET_URI.maximum},
            "Only this URI (also one known from its events alone)")
DAG_ID = param("dag_id", "query", {"type": "string", "maxLength": limits.DAG_ID.max_length},
               "Only the URIs this DAG produces or consumes (what its page shows: why it waits)")

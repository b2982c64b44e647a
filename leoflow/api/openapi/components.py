"""What every part of the OpenAPI document shares: schema building blocks, the error answers,
the common parameters and :func:`op`, which writes one operation.

Each shared constant (``TIME``, ``STR``, ``INT`` …) is defined here once; the resource modules
beside it (:mod:`~leoflow.api.openapi.dags`, :mod:`~leoflow.api.openapi.runs`, …) import them
and never each other's helpers, so the package has no import cycle.
"""

from __future__ import annotations

from typing import Any

from leoflow.api.endpoint import MAX_LIMIT
from leoflow.model import limits

JSON = "application/json"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


TIME = nullable("string", format="date-time")
STAMP = {"type": "string", "format": "date-time"}
STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
TEXT = {"content": {"text/plain": {"schema": {"type": "string"}}}}


def obj(props: dict[str, Any], *, required: list[str] | None = None, extra: bool = False) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required if required is not None else list(props),
            "additionalProperties": extra}


def name(rule: limits.Name) -> dict[str, Any]:
    return {"type": "string", "pattern": rule.pattern.pattern, "maxLength": rule.max_length}


def number_range(rule: limits.Range) -> dict[str, Any]:
    low = "exclusiveMinimum" if rule.above_minimum else "minimum"
    return {"type": "integer" if rule.integer else "number", low: rule.minimum, "maximum": rule.maximum}


def strings(rule: limits.Size) -> dict[str, Any]:
    return {"type": "array", "items": STR, "maxItems": rule.max_entries}


def page(item: str) -> dict[str, Any]:
    return obj({"items": {"type": "array", "items": ref(item)}, "next_cursor": nullable("string")})


SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": obj({"code": STR, "message": STR, "details": {}})}),
}

_RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}}
RESPONSES: dict[str, Any] = {
    key: {"description": text, "content": {JSON: {"schema": ref("Error")}}, **extra}
    for key, text, extra in (
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


def param(name: str, where: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path", "schema": schema, "description": description}


DAG_ID = {**param("dag_id", "path", {"type": "string"}, "DAG id"), "example": "etl-daily"}
RUN_ID = {**param("run_id", "path", {"type": "string"}, "Run id"), "example": "manual-1"}
TASK_ID = {**param("task_id", "path", {"type": "string"}, "Task id"), "example": "extract"}
MAP_INDEX = param("map_index", "query", {"type": "integer", "minimum": 0, "maximum": 9_999},
                  "Which instance of a mapped task (map_over); without it a mapped task answers its summary")
RUN_PATH = [DAG_ID, RUN_ID]
LIMIT = param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
              "Page size")
CURSOR = param("cursor", "query", {"type": "string"}, "Opaque cursor from a previous page's next_cursor")


def state(values: tuple[str, ...]) -> dict[str, Any]:
    return param("state", "query", {"type": "string", "enum": list(values)}, "Only items in this state")


def op(summary: str, ok: dict[str, Any], *, errors: str = "", params: list[dict[str, Any]] | None = None,
       body: str | None = None, body_required: bool = True, auth: str = "read") -> dict[str, Any]:
    """One operation: ``ok`` answers, the error answers ``errors`` names plus those ``auth`` and a
    ``body`` imply. ``auth`` is ``open``, ``read``, ``admin`` or ``metrics`` (open unless
    LEOFLOW_METRICS_AUTH=true)."""
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
    operation: dict[str, Any] = {"summary": summary,
                                 "operationId": summary.lower().replace(" ", "_").replace("'", ""),
                                 "responses": responses, "parameters": params or []}
    if auth == "open":
        operation["security"] = []
    elif auth == "metrics":
        operation["security"] = [{}, {"bearer": []}]
    if body:
        schema = ref(body)
        operation["requestBody"] = {"required": body_required, "content": {JSON: {"schema": schema},
                                                                            "application/yaml": {"schema": schema}}}
    return operation


def json_answer(code: str, schema: str, description: str = "OK",
                links: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {JSON: {"schema": ref(schema)}}}
    if links:
        answer["links"] = links
    return {code: answer}


def links(*operation_ids: str, run: bool = False) -> dict[str, Any]:
    """OpenAPI links from an answer carrying ``dag_id`` (and ``run_id``) to the operations that take
    them: what a client does next, and what schemathesis' stateful phase chains (apply → trigger → read)."""
    parameters = {"dag_id": "$response.body#/dag_id"}
    if run:
        parameters["run_id"] = "$response.body#/run_id"
    return {operation_id: {"operationId": operation_id, "parameters": parameters} for operation_id in operation_ids}

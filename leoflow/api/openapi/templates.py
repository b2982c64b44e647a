"""The OpenAPI schemas of the cluster templates (operations: :mod:`leoflow.api.routes.templates`)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import INT, STAMP, STR, name, obj, param, ref
from leoflow.model import limits
from leoflow.model.spec.template_inputs import INPUT_TYPES

_NAME = name(limits.TEMPLATE_NAME)
_DESCRIPTION = {"type": "string", "maxLength": limits.DESCRIPTION.maximum}
_SUMMARY = {"name": _NAME, "version": {**INT, "description": "Counts from 1 per name; never reused"},
            "spec_hash": {**STR, "description": "SHA-256 of the document: the same document is the same version"},
            "created_by": STR, "created_at": STAMP}

SCHEMAS: dict[str, Any] = {
    "TaskTemplateSpec": obj({
        "name": {**_NAME, "description": "Optional; must equal the path's name"},
        "description": _DESCRIPTION,
        "inputs": {"type": "object", "description": "Typed inputs: {NAME: {type, default, required}}",
                   "maxProperties": limits.TEMPLATE_INPUTS.maximum,
                   "additionalProperties": obj({"type": {"type": "string", "enum": list(INPUT_TYPES)}, "default": {},
                                                "required": {"type": "boolean"}, "description": _DESCRIPTION},
                                               required=[])},
    }, required=[], extra=True),
    "TaskTemplate": obj({**_SUMMARY, "spec": {"type": "object", "description": "The template as stored"}}),
    "TaskTemplateSummary": obj({**_SUMMARY, "versions": {**INT, "description": "Live versions of the name"}}),
    "TaskTemplateList": obj({"items": {"type": "array", "items": ref("TaskTemplateSummary")}}),
}

TEMPLATE = {**param("name", "path", {"type": "string"}, "Template name"), "example": "etl"}
VERSION = param("version", "query", {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                "A version (default: the newest)")

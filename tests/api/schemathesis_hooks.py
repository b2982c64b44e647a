"""Schemathesis hooks (``SCHEMATHESIS_HOOKS``) for ``test_live_serve.py``: realistic DAG specs.

A DAG spec has rules no JSON schema states: a cron must be a real one that fires, a time zone
must exist, a dependency must name an earlier task, a container task needs an image and a
command. Random data that fits the schema almost always breaks one of them, so without help
every generated ``POST /api/v2/dags`` is a 422, no DAG exists, and the stateful phase has
nothing to chain (apply → trigger → read → cancel).

:func:`map_body` therefore repairs the bodies of ``POST /api/v2/dags`` that conform to the
schema (positive data) into valid specs, keeping the generated ids, names, numbers and text.
Bodies that do not conform (negative data) are left alone, so ``negative_data_rejection``
still checks that the API refuses everything the schema refuses.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import schemathesis

from leoflow.api.openapi.dags import SCHEMAS

_SPEC_SCHEMA = SCHEMAS["DagSpec"]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLAIN_TASK_FIELDS = frozenset({"id", "kind", "image", "command", "args", "env", "retries", "retry_delay_seconds",
                                "max_retry_delay_seconds", "timeout_seconds", "depends_on", "resources"})


def _conforms(body: Any) -> bool:
    return bool(jsonschema.Draft202012Validator(_SPEC_SCHEMA).is_valid(body))


def _realistic(body: dict[str, Any]) -> dict[str, Any]:
    spec = dict(body)
    spec["schedule"] = None
    spec.pop("timezone", None)
    spec.pop("start_date", None)
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in spec["tasks"]:
        # Pod fields (task pods) are validated against the Kubernetes Pod schema, which random data
        # rarely passes; positive cases leave them out so the stateful chains get past apply.
        task = {k: v for k, v in raw.items() if k in _PLAIN_TASK_FIELDS}
        if task["id"] in seen:
            continue
        earlier = [d for d in dict.fromkeys(task.get("depends_on") or []) if d in seen]
        seen.add(task["id"])
        task["depends_on"] = earlier
        if task.get("kind") == "empty":
            for key in ("image", "command", "args", "env", "resources"):
                task.pop(key, None)
        else:
            task["image"] = task["image"] if task.get("image") and "\x00" not in task["image"] else "busybox"
            # A random "{{" is a template syntax error (a 422 that ends the chain at apply).
            task["command"] = [c for c in task.get("command") or [] if "\x00" not in c and "{{" not in c] or ["true"]
            task["args"] = [a for a in task.get("args") or [] if "\x00" not in a and "{{" not in a]
            env = task.get("env") if isinstance(task.get("env"), dict) else {}  # the list form: references
            task["env"] = {k: v for k, v in env.items()
                           if _ENV_NAME.match(k) and not k.upper().startswith("LEOFLOW_") and "\x00" not in v
                           and "{{" not in v}
            task.pop("resources", None)
        tasks.append(task)
    spec["tasks"] = tasks
    # Validated deeper than their schema says (pod fields, webhooks, JSON Schema, task shapes): left out here.
    # A team the cluster does not know is refused, and an on_exit list rarely checks out: left out too.
    for key in ("defaults", "notify", "params", "templates", "team", "on_exit"):
        spec.pop(key, None)
    if isinstance(spec.get("description"), str):
        spec["description"] = spec["description"].replace("\x00", "")
    return spec


@schemathesis.hook
def map_body(context: schemathesis.HookContext, body: Any) -> Any:
    operation = context.operation
    if (operation is None or operation.method.upper() != "POST" or operation.path != "/api/v2/dags"
            or not isinstance(body, dict) or not _conforms(body)):
        return body
    return _realistic(body)

"""Reusable task shapes: a DAG's ``templates:`` and the cluster's templates, resolved at apply.

A *template* is a named task shape — image, command, args, env, resources, pod settings,
timeout, retries, retry policy, outputs — with typed ``inputs``. A task says ``uses: NAME`` (a
template of its DAG) or ``uses: cluster/NAME@V`` / ``uses: cluster/NAME`` (a cluster template,
stored through ``PUT /api/v2/templates/{name}``; without ``@V`` the newest at apply time), and
``inputs: {X: value}``::

    templates:
      - name: etl
        inputs: {partition: {type: string}, mode: {type: string, default: full}}
        image: ghcr.io/acme/etl:5.1
        args: [--partition, "{{ inputs.partition }}", --mode, "{{ inputs.mode }}"]
    tasks:
      - {id: p0, uses: etl, inputs: {partition: p0}}

**Resolved at apply and inlined** (:func:`expand_task`): the task's own fields override the
template's the way they override the DAG's ``defaults:`` (ADR 0009: pod mappings merge key by
key, ``env`` by name, ``volumes`` by name, ``volume_mounts`` by mount path, ``pod_template``
strategic-merged; every other field is replaced as a whole), and ``defaults:`` still applies
below both. The canonical task holds the result plus a ``uses`` record (``{template: etl}``,
``{template: cluster/etl, version: 4}``), so the scheduler never reads a template and a DAG
version keeps its copy whatever happens to the template afterwards. (Argo resolves a
``templateRef`` while a workflow runs: a template edited or deleted meanwhile changed a running
workflow's meaning, failed its retry with "not found" or left it stuck — argo-workflows#1525,
#1744, #13850 — and a deleted-and-recreated one was still served stale, #14607.)

**Inputs compose on parsed strings, never on text.** Each template string of ``command``,
``args``, ``env`` and the pod template's containers' ``args``/``env`` is parsed with the template
grammar (:mod:`.templating`); every ``{{ inputs.X }}`` piece is replaced by the input's pieces and
the result written back, literal text escaped (``{{`` becomes ``{{ "{{" }}``). So a literal never
turns into a reference, however the pieces meet. An input's value is written exactly like an
``args`` element: a string may itself hold references (``"{{ params.day }}"``, ``"{{ tasks.list
.outputs.uri }}"``, ``{{ "{{" }}`` for a literal ``{{``), which become references of the task that
uses the template and are checked there like its own (declared parameter, upstream task, declared
output); a non-string value becomes its compact JSON text, always literal. Substitution happens
once, at apply; a rendered value is never parsed again (:mod:`.rendering`). Argo substitutes
``{{inputs.parameters.x}}`` as text in more than one pass, so a value holding ``{{ }}`` is expanded
again and users resort to ``{`` tricks to escape it (argo-workflows#1765, #12634); here it cannot.

No template uses another, or carries ``depends_on``, ``trigger_rule``, ``when``, ``map_over`` or
``max_parallel``: those place a task in its graph, which is the using task's business.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_count, check_name, check_size, shown, type_name
from leoflow.model.fields import as_mapping, no_unknown
from leoflow.model.k8s.pod import DEFAULTS_FIELDS, parse_own
from leoflow.model.k8s.strategic_merge import merge_pods
from leoflow.model.spec.template_inputs import (
    InputDecl,
    description_field,
    input_decls,
    input_strings,
    input_values,
    substituted,
)
from leoflow.model.spec.templating import parse_template

CLUSTER = "cluster/"
#: Fields that place a task in its graph: the using task's, never a template's.
NOT_IN_TEMPLATE = frozenset({"id", "depends_on", "trigger_rule", "when", "map_over", "max_parallel", "uses",
                             "inputs"})
_CLUSTER_REF = re.compile(r"cluster/([a-z0-9][a-z0-9-]{0,48}[a-z0-9]|[a-z0-9])(?:@([0-9]{1,9}))?")


@dataclass(frozen=True)
class Shape:
    """A validated template: its name as ``uses:`` writes it, and its task fields as written."""

    #: ``etl`` (the DAG's) or ``cluster/etl`` (the cluster's).
    name: str
    inputs: Mapping[str, InputDecl]
    fields: Mapping[str, Any]
    #: The cluster template's version (None for a DAG's).
    version: int | None = None

    def record(self) -> dict[str, Any]:
        """What the canonical task keeps of the template it used."""
        return {"template": self.name} if self.version is None else {"template": self.name, "version": self.version}


@dataclass(frozen=True)
class ClusterTemplate:
    """One stored version of a cluster template (``task_templates``), as the data layer reads it."""

    name: str
    version: int
    spec: Mapping[str, Any]


#: The cluster templates an apply may use: by (name, version), and by (name, None) for the newest.
ClusterTemplates = Mapping[tuple[str, int | None], ClusterTemplate]

#: Checks a template's task fields as a task's (``leoflow.model.spec.dag`` passes its parser).
TaskCheck = Callable[[Mapping[str, Any], str], object]


# --------------------------------------------------------------------------- templates

def parse_shape(raw: object, path: str, check_task: TaskCheck, *, name: str | None = None,
                version: int | None = None) -> Shape:
    """A template written at ``path``; ``name``: a cluster template's (else its ``name:`` field).

    ``check_task`` validates the task fields (with a stand-in id), so a template's problems are
    reported once, at its own path, rather than in every task that uses it.
    """
    doc = as_mapping(raw, path)
    if name is None:
        name = check_name(doc.get("name"), f"{path}.name", limits.TEMPLATE_NAME)
    for key in doc:
        if key in NOT_IN_TEMPLATE and key != "inputs":
            raise ValidationFailed(f"{path}.{key}", "is not allowed in a template: depends_on, trigger_rule, when, "
                                   "map_over and max_parallel belong to the task that says uses:, and a template "
                                   "cannot use another")
    if "description" in doc:
        description_field(doc["description"], f"{path}.description")
    inputs = input_decls(doc.get("inputs"), f"{path}.inputs")
    fields = {k: v for k, v in doc.items() if k not in ("name", "inputs", "description")}
    check_task({**fields, "id": "template"}, path)
    for where, text in input_strings(fields, path):
        template = parse_template(text, where)  # a syntax error is raised here, at the template's own path
        for ref in template.references if template is not None else ():
            if ref.kind == "inputs" and ref.name not in inputs:
                declared = ", ".join(inputs) or "none"
                raise ValidationFailed(where, f"{ref.text}: the template declares no input {ref.name!r} "
                                       f"(its inputs: {declared})")
    return Shape(f"{CLUSTER}{name}" if version is not None else name, inputs, fields, version)


def local_shapes(raw: object, check_task: TaskCheck) -> dict[str, Shape]:
    """A DAG's ``templates:`` list, by name."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ValidationFailed("templates", f"must be a list of templates, got {type_name(raw)}")
    check_count(len(raw), "templates", limits.TEMPLATES)
    shapes: dict[str, Shape] = {}
    for i, entry in enumerate(raw):
        shape = parse_shape(entry, f"templates[{i}]", check_task)
        if shape.name in shapes:
            raise ValidationFailed(f"templates[{i}].name", f"duplicate template name {shape.name!r}")
        shapes[shape.name] = shape
    return shapes


def cluster_shape(template: ClusterTemplate, check_task: TaskCheck) -> Shape:
    """A stored cluster template, checked again (a release may have tightened a rule since it was stored)."""
    return parse_shape(template.spec, f"cluster/{template.name}@{template.version}", check_task,
                       name=template.name, version=template.version)


def cluster_template_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 of a cluster template's canonical JSON: equal documents are one version."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- uses

def cluster_refs(text: str) -> set[tuple[str, int | None]]:
    """Every ``cluster/NAME[@V]`` in a text (a DAG file, a JSON body): the templates an apply may read.

    A superset is harmless (the data layer reads what exists); the spec's own parse decides which are used.
    """
    return {(m.group(1), int(m.group(2)) if m.group(2) else None) for m in _CLUSTER_REF.finditer(text)}


def cluster_uses(doc: object) -> set[tuple[str, int | None]]:
    """The cluster templates a decoded spec's tasks name in ``uses:`` (exactly; a bad one is the parse's 422)."""
    found: set[tuple[str, int | None]] = set()
    for key in ("tasks", "on_exit"):
        tasks = doc.get(key) if isinstance(doc, dict) else None
        for task in tasks if isinstance(tasks, list) else ():
            uses = task.get("uses") if isinstance(task, dict) else None
            if isinstance(uses, str) and (m := _CLUSTER_REF.fullmatch(uses)):
                found.add((m.group(1), int(m.group(2)) if m.group(2) else None))
    return found


def template_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cluster templates whose version differs between two canonical specs (``cluster/etl 4 → 5``)."""
    def versions(spec: Mapping[str, Any] | None) -> dict[str, set[int]]:
        used: dict[str, set[int]] = {}
        for key in ("tasks", "on_exit"):
            for task in (spec or {}).get(key) or ():
                record = task.get("uses") if isinstance(task, dict) else None
                if isinstance(record, dict) and isinstance(record.get("version"), int):
                    used.setdefault(str(record.get("template")), set()).add(record["version"])
        return used

    old, new = versions(before), versions(after)
    changes = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            changes.append({"template": name, "from": max(old[name]) if name in old else None,
                            "to": max(new[name]) if name in new else None})
    return changes


def _parse_uses(value: str, path: str) -> tuple[str, bool, int | None]:
    """``NAME`` → (NAME, False, None), a DAG's; ``cluster/NAME[@V]`` → (NAME, True, V or None), the cluster's."""
    if not value.startswith(CLUSTER):
        return check_name(value, path, limits.TEMPLATE_NAME), False, None
    m = _CLUSTER_REF.fullmatch(value)
    if m is None or (m.group(2) is not None and int(m.group(2)) < 1):
        raise ValidationFailed(path, f"{shown(value)} is not a template: write NAME (a template of this DAG), "
                               "cluster/NAME (the newest cluster template) or cluster/NAME@VERSION (from 1)")
    return m.group(1), True, int(m.group(2)) if m.group(2) else None


def uses_record(value: object, path: str) -> dict[str, Any] | None:
    """A stored ``uses`` record (``{template, version?}``), as the canonical form keeps it."""
    if value is None:
        return None
    doc = as_mapping(value, path)
    no_unknown(doc, {"template", "version"}, path)
    template = doc.get("template")
    if not isinstance(template, str) or not (limits.TEMPLATE_NAME.matches(template.removeprefix(CLUSTER))):
        raise ValidationFailed(f"{path}.template", "must name the template used: NAME or cluster/NAME")
    version = doc.get("version")
    if template.startswith(CLUSTER) != isinstance(version, int) or isinstance(version, bool) \
            or (isinstance(version, int) and version < 1):
        raise ValidationFailed(f"{path}.version", "a cluster template's version (an integer from 1); none for a "
                               "DAG's template")
    return dict(doc)


def expand_task(raw: object, path: str, shapes: Mapping[str, Shape], cluster: ClusterTemplates | None,
                check_task: TaskCheck) -> object:
    """The task written at ``path`` with the template it uses inlined (unchanged without ``uses: NAME``)."""
    if isinstance(raw, dict) and raw.get("uses") is not None and not isinstance(raw["uses"], str | dict):
        raise ValidationFailed(f"{path}.uses", f"must name a template (NAME, cluster/NAME or cluster/NAME@VERSION), "
                               f"got {type_name(raw['uses'])}")
    if not isinstance(raw, dict) or not isinstance(raw.get("uses"), str):
        if isinstance(raw, dict) and "inputs" in raw and raw.get("uses") is None:
            raise ValidationFailed(f"{path}.inputs", "only a task that says uses: TEMPLATE takes inputs")
        return raw
    name, in_cluster, version = _parse_uses(raw["uses"], f"{path}.uses")
    shape = _find(name, in_cluster, version, raw["uses"], f"{path}.uses", shapes, cluster, check_task)
    values = input_values(raw.get("inputs"), shape.inputs, shape.name, path)
    fields = substituted(shape.fields, path, values)
    own = {k: v for k, v in raw.items() if k not in ("uses", "inputs")}
    return {**_layered(fields, own, path), "uses": shape.record()}


def _find(name: str, in_cluster: bool, version: int | None, text: str, path: str, shapes: Mapping[str, Shape],
          cluster: ClusterTemplates | None, check_task: TaskCheck) -> Shape:
    if not in_cluster:
        if name not in shapes:
            known = ", ".join(sorted(shapes)[:20]) or "none"
            raise ValidationFailed(path, f"unknown template {name!r} (this DAG's templates: {known}; a cluster "
                                   "template is written cluster/NAME)")
        return shapes[name]
    found = (cluster or {}).get((name, version))
    if found is None:
        what = f"cluster template {name!r}" + (f" has no version {version}" if version else " does not exist")
        raise ValidationFailed(path, f"{what} (leoflow templates list shows them); {shown(text)}")
    try:
        return cluster_shape(found, check_task)
    except ValidationFailed as problem:
        raise ValidationFailed(path, f"cluster template {name!r} version {found.version} is no longer valid: "
                               f"{problem.path}: {problem.problem}") from None


# --------------------------------------------------------------------------- task over template

_MERGED_BY = {"volumes": "name", "volume_mounts": "mountPath"}


def _layered(template: Mapping[str, Any], own: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The task's fields over the template's, pod fields merged as over ``defaults:`` (ADR 0009)."""
    lower = parse_own(template, path, fields=DEFAULTS_FIELDS)
    upper = parse_own(own, path, fields=DEFAULTS_FIELDS)
    pod: dict[str, Any] = {**lower, **upper}
    if "env" in lower and "env" in upper:
        low, up = lower["env"], upper["env"]
        if isinstance(low, dict) and isinstance(up, dict):
            pod["env"] = {**low, **up}
        else:
            mine = {e["name"] for e in _entries(up)}
            pod["env"] = [e for e in _entries(low) if e["name"] not in mine] + _entries(up)
    for key, by in _MERGED_BY.items():
        if key in lower and key in upper:
            mine = {e[by] for e in upper[key]}
            pod[key] = [e for e in lower[key] if e[by] not in mine] + list(upper[key])
    if "env_from" in lower and "env_from" in upper:
        pod["env_from"] = list(lower["env_from"]) + [s for s in upper["env_from"] if s not in lower["env_from"]]
    for key in ("node_selector", "labels", "annotations"):
        if key in lower and key in upper:
            pod[key] = {**lower[key], **upper[key]}
    if "security_context" in lower and "security_context" in upper:
        pod["security_context"] = {part: {**lower["security_context"].get(part, {}),
                                          **upper["security_context"].get(part, {})}
                                   for part in ("pod", "container")
                                   if part in lower["security_context"] or part in upper["security_context"]}
    if "pod_template" in lower and "pod_template" in upper:
        pod["pod_template"] = merge_pods(lower["pod_template"], upper["pod_template"])
    plain = {k: v for k, v in template.items() if k not in DEFAULTS_FIELDS}
    plain.update({k: v for k, v in own.items() if k not in DEFAULTS_FIELDS})
    return {**plain, **pod}


def _entries(env: object) -> list[dict[str, Any]]:
    if isinstance(env, dict):
        return [{"name": k, "value": v} for k, v in sorted(env.items())]
    return list(env) if isinstance(env, list) else []


def check_cluster_template(doc: Mapping[str, Any], path: str = "") -> None:
    """A cluster template's size, before anything else reads it."""
    check_size(doc, path, limits.CLUSTER_TEMPLATE)


def check_template_count(names: int) -> None:
    """``names`` live cluster templates once a new one is stored: at most :data:`limits.CLUSTER_TEMPLATE_NAMES`."""
    if names > limits.CLUSTER_TEMPLATE_NAMES.maximum:
        raise ValidationFailed("name", f"would be cluster template number {names:,}; at most "
                               f"{limits.CLUSTER_TEMPLATE_NAMES.maximum:,} are kept (delete unused ones: "
                               "leoflow templates delete NAME)")

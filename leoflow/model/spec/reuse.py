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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_count, check_name, check_size, shown, type_name
from leoflow.model.fields import as_mapping, bool_field, no_unknown
from leoflow.model.k8s.pod import DEFAULTS_FIELDS, parse_own
from leoflow.model.k8s.strategic_merge import merge_pods
from leoflow.model.spec.templating import OPEN, Piece, Reference, parse_template

CLUSTER = "cluster/"
INPUT_TYPES = ("string", "integer", "number", "boolean", "array", "object", "any")
#: Fields that place a task in its graph: the using task's, never a template's.
NOT_IN_TEMPLATE = frozenset({"id", "depends_on", "trigger_rule", "when", "map_over", "max_parallel", "uses",
                             "inputs"})
_CLUSTER_REF = re.compile(r"cluster/([a-z0-9][a-z0-9-]{0,48}[a-z0-9]|[a-z0-9])(?:@([0-9]{1,9}))?")
_MISSING: Any = object()
_ESCAPED_OPEN = '{{ "{{" }}'


@dataclass(frozen=True)
class InputDecl:
    """One declared input: its JSON type, and its default (absent: required unless ``required: false``)."""

    name: str
    type: str = "string"
    default: Any = _MISSING
    required: bool = True


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
    inputs = _input_decls(doc.get("inputs"), f"{path}.inputs")
    fields = {k: v for k, v in doc.items() if k not in ("name", "inputs", "description")}
    check_task({**fields, "id": "template"}, path)
    for where, text in _strings(fields, path):
        template = parse_template(text, where)  # check_task parsed it too: no syntax error is left
        for ref in template.references if template is not None else ():
            if ref.kind == "inputs" and ref.name not in inputs:
                declared = ", ".join(inputs) or "none"
                raise ValidationFailed(where, f"{ref.text}: the template declares no input {ref.name!r} "
                                       f"(its inputs: {declared})")
    return Shape(f"{CLUSTER}{name}" if version is not None else name, inputs, fields, version)


def _input_decls(raw: object, path: str) -> dict[str, InputDecl]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationFailed(path, f"must be a mapping of input names to {{type, default, required}}, "
                               f"got {type_name(raw)}")
    check_count(len(raw), path, limits.TEMPLATE_INPUTS)
    decls: dict[str, InputDecl] = {}
    for key, spec in raw.items():
        where = f"{path}.{key}"
        check_name(key, where, limits.INPUT_NAME)
        spec = {} if spec is None else spec
        if not isinstance(spec, dict):
            raise ValidationFailed(where, f"must be a mapping {{type, default, required}}, got {type_name(spec)}")
        no_unknown(spec, {"type", "default", "required", "description"}, where)
        kind = spec.get("type", "string")
        if kind not in INPUT_TYPES:
            raise ValidationFailed(f"{where}.type", f"must be one of {', '.join(INPUT_TYPES)}, got {shown(str(kind))}")
        default = spec.get("default", _MISSING)
        if default is not _MISSING:
            _check_type(default, kind, f"{where}.default")
        required = bool_field(spec.get("required", default is _MISSING), f"{where}.required")
        if required and default is not _MISSING:
            raise ValidationFailed(f"{where}.required", "an input with a default is not required")
        decls[key] = InputDecl(key, kind, default, required)
    return decls


def _check_type(value: object, kind: str, path: str) -> None:
    ok = {"string": isinstance(value, str), "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, int | float) and not isinstance(value, bool),
          "boolean": isinstance(value, bool), "array": isinstance(value, list), "object": isinstance(value, dict),
          "any": True}[kind]
    if not ok:
        raise ValidationFailed(path, f"must be of type {kind}, got {type_name(value)}")


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
    values = _input_values(raw.get("inputs"), shape, path)
    fields = _substituted(shape.fields, path, values)
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


def _input_values(raw: object, shape: Shape, path: str) -> dict[str, list[Piece]]:
    """Each declared input's value as template pieces (see the module docstring)."""
    given = {} if raw is None else raw
    if not isinstance(given, dict):
        raise ValidationFailed(f"{path}.inputs", f"must be a mapping of input names to values, got {type_name(given)}")
    check_count(len(given), f"{path}.inputs", limits.TEMPLATE_INPUTS)
    for key in given:
        if key not in shape.inputs:
            declared = ", ".join(shape.inputs) or "none"
            raise ValidationFailed(f"{path}.inputs.{str(key)[:60]}",
                                   f"unknown input of template {shape.name!r} (its inputs: {declared})")
    values: dict[str, list[Piece]] = {}
    for decl in shape.inputs.values():
        where = f"{path}.inputs.{decl.name}"
        if decl.name in given:
            value = given[decl.name]
        elif decl.default is not _MISSING:
            value = decl.default
        elif decl.required:
            raise ValidationFailed(f"{path}.inputs" if raw is not None else f"{path}.uses",
                                   f"missing required input {decl.name!r} of template {shape.name!r}")
        else:
            value = ""
        values[decl.name] = _pieces(value, decl, where)
    return values


def _pieces(value: object, decl: InputDecl, where: str) -> list[Piece]:
    if not isinstance(value, str):
        _check_type(value, decl.type, where)
        return [json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)]
    template = parse_template(value, where)
    if template is None:
        _check_type(value, decl.type, where)
        return [value]
    for ref in template.references:  # a string holding a reference is as typed as what it renders to
        if ref.kind == "inputs":
            raise ValidationFailed(where, f"{ref.text}: an input's value cannot name an input")
    return list(template.pieces)


# --------------------------------------------------------------------------- substitution

def _strings(fields: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """(path, text) of every string a template may hold ``{{ inputs.X }}`` in."""
    found: list[tuple[str, str]] = []
    for key in ("command", "args"):
        items = fields.get(key)
        if isinstance(items, list):
            found += [(f"{path}.{key}[{i}]", s) for i, s in enumerate(items) if isinstance(s, str) and OPEN in s]
    env = fields.get("env")
    if isinstance(env, dict):
        found += [(f"{path}.env.{k}", v) for k, v in env.items() if isinstance(v, str) and OPEN in v]
    elif isinstance(env, list):
        found += [(f"{path}.env[{j}].value", e["value"]) for j, e in enumerate(env)
                  if isinstance(e, dict) and isinstance(e.get("value"), str) and OPEN in e["value"]]
    return found


def _substituted(fields: Mapping[str, Any], path: str, values: Mapping[str, list[Piece]]) -> dict[str, Any]:
    """The template's fields with every ``{{ inputs.X }}`` replaced (a copy; the shape is shared)."""
    def sub(text: object, where: str) -> object:
        return _substitute(text, where, values) if isinstance(text, str) and OPEN in text else text

    out = dict(fields)
    for key in ("command", "args"):
        if isinstance(out.get(key), list):
            out[key] = [sub(s, f"{path}.{key}[{i}]") for i, s in enumerate(out[key])]
    env = out.get("env")
    if isinstance(env, dict):
        out["env"] = {k: sub(v, f"{path}.env.{k}") for k, v in env.items()}
    elif isinstance(env, list):
        out["env"] = [{**e, "value": sub(e["value"], f"{path}.env[{j}].value")}
                      if isinstance(e, dict) and "value" in e else e for j, e in enumerate(env)]
    template = out.get("pod_template")
    spec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(template, dict) and isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        containers = []
        for c, container in enumerate(spec["containers"]):
            if isinstance(container, dict):
                where = f"{path}.pod_template.spec.containers[{c}]"
                container = dict(container)
                if isinstance(container.get("args"), list):
                    container["args"] = [sub(s, f"{where}.args[{j}]") for j, s in enumerate(container["args"])]
                if isinstance(container.get("env"), list):
                    container["env"] = [{**e, "value": sub(e["value"], f"{where}.env[{j}].value")}
                                        if isinstance(e, dict) and "value" in e else e
                                        for j, e in enumerate(container["env"])]
            containers.append(container)
        out["pod_template"] = {**template, "spec": {**spec, "containers": containers}}
    return out


def _substitute(text: str, where: str, values: Mapping[str, list[Piece]]) -> str:
    template = parse_template(text, where)
    if template is None or not any(isinstance(p, Reference) and p.kind == "inputs" for p in template.pieces):
        return text
    pieces: list[Piece] = []
    for piece in template.pieces:
        pieces += values[piece.name] if isinstance(piece, Reference) and piece.kind == "inputs" else [piece]
    return written(pieces, where)


def written(pieces: Sequence[Piece], where: str) -> str:
    """Pieces as template text that parses back to the same pieces: adjacent literals joined, then
    their ``{{`` escaped, so no literal can meet another piece and open a reference."""
    out: list[str] = []
    literal: list[str] = []
    size = 0
    for piece in [*pieces, None]:
        if isinstance(piece, str):
            literal.append(piece)
            size += len(piece)
        else:
            if literal:
                out.append("".join(literal).replace(OPEN, _ESCAPED_OPEN))
                literal = []
            if piece is not None:
                out.append(piece.text)
                size += len(piece.text)
        if size > limits.COMMAND.max_bytes:
            raise ValidationFailed(where, f"with its inputs substituted is over {limits.COMMAND.max_bytes:,} "
                                   "characters; pass large values by reference (a URI)")
    return "".join(out)


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

"""Generate ``leoflow/model/k8s/pod_schema.py``: the Pod object's shape, for validation and merging.

Leoflow validates ``pod_template`` (and every pod it renders) strictly, naming the path, and
merges templates with Kubernetes strategic-merge semantics; both need to know, for each field
of a Pod, its type and — for lists — the patch strategy and merge key. That knowledge is the
Kubernetes OpenAPI schema. The runtime package cannot depend on a schema bundle (the model
layer is pure and has no test-only dependencies), so this script distils the strict JSON schema
that ``kubernetes-validate`` ships (a dev dependency) into a small Python module of plain data.

Run ``python tools/generate_pod_schema.py`` after changing :data:`KUBERNETES_VERSION`;
``tests/model/test_pod_schema.py`` fails when the checked-in module differs from the output.

Encoding of a field (tuples, so the module is a literal):
``("string",)``, ``("integer",)``, ``("number",)``, ``("boolean",)``, ``("quantity",)``,
``("int-or-string",)``, ``("object",)`` (free-form), ``("ref", TYPE)``,
``("map", FIELD)`` (string keys), ``("list", FIELD, STRATEGY, MERGE_KEY)`` with STRATEGY
``"merge"`` (merge by MERGE_KEY, or a set union for primitive lists), ``"retainKeys"``-free, or
``"replace"``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from pprint import pformat
from typing import Any

#: The API version the schema is taken from: native sidecars (1.29+ by default) and
#: appArmorProfile (1.30) are in it; older API servers drop unknown fields with a warning.
KUBERNETES_VERSION = "1.31.0"
TARGET = Path(__file__).resolve().parent.parent / "leoflow" / "model" / "k8s" / "pod_schema.py"
#: Pod metadata a template may set; name, namespace and the rest belong to Leoflow or the server.
TEMPLATE_METADATA = ("annotations", "labels")
_SCALARS = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
_SPECIAL = {"io.k8s.apimachinery.pkg.api.resource.Quantity": ("quantity",),
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": ("int-or-string",),
            "io.k8s.apimachinery.pkg.apis.meta.v1.Time": ("string",),
            "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": ("object",)}


def _definitions() -> dict[str, Any]:
    import kubernetes_validate

    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{KUBERNETES_VERSION}-local-strict"
    return json.loads((root / "_definitions.json").read_text())["$defs"]  # type: ignore[no-any-return]


def _short(ref: str) -> str:
    return ref.rsplit("/", 1)[-1].rsplit(".", 1)[-1]


class _Distiller:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.types: dict[str, dict[str, tuple[Any, ...]]] = {}
        self.required: dict[str, tuple[str, ...]] = {}
        self.full_names: dict[str, str] = {}

    def field(self, prop: dict[str, Any]) -> tuple[Any, ...]:
        if "$ref" in prop:
            full = prop["$ref"].rsplit("/", 1)[-1]
            if full in _SPECIAL:
                return _SPECIAL[full]
            return ("ref", self.type(full))
        kinds = prop.get("type")
        kinds = [k for k in (kinds if isinstance(kinds, list) else [kinds]) if k != "null"]
        kind = kinds[0] if kinds else None
        if kind in _SCALARS:
            return (_SCALARS[kind],)
        if kind == "array":
            strategy = prop.get("x-kubernetes-patch-strategy", "")
            merge = "merge" if "merge" in strategy.split(",") else "replace"
            return ("list", self.field(prop["items"]), merge, prop.get("x-kubernetes-patch-merge-key"))
        if kind == "object":
            extra = prop.get("additionalProperties")
            if isinstance(extra, dict):
                return ("map", self.field(extra))
            return ("object",)
        raise ValueError(f"unsupported schema shape {prop}")

    def type(self, full: str) -> str:
        short = _short(full)
        known = self.full_names.setdefault(short, full)
        if known != full:
            raise ValueError(f"two types named {short}: {known}, {full}")
        if short in self.types:
            return short
        self.types[short] = {}
        definition = self.defs[full]
        props = definition.get("properties") or {}
        if short == "ObjectMeta":
            props = {k: v for k, v in props.items() if k in TEMPLATE_METADATA}
        self.types[short] = {name: self.field(p) for name, p in sorted(props.items())}
        required = tuple(r for r in definition.get("required") or () if r in props)
        if required:
            self.required[short] = required
        return short


def render() -> str:
    distiller = _Distiller(_definitions())
    distiller.type("io.k8s.api.core.v1.PodSpec")
    distiller.type("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    types = dict(sorted(distiller.types.items()))
    required = dict(sorted(distiller.required.items()))
    return (
        '"""The shape of a Pod (spec and template metadata), distilled from the Kubernetes OpenAPI schema.\n\n'
        f"Generated by ``python tools/generate_pod_schema.py`` from the v{KUBERNETES_VERSION} strict schema;\n"
        "do not edit. See that script for the encoding of a field.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        f'KUBERNETES_VERSION = "{KUBERNETES_VERSION}"\n\n'
        f"TYPES: dict[str, dict[str, tuple[Any, ...]]] = {pformat(types, width=116, sort_dicts=True)}\n\n"
        f"REQUIRED: dict[str, tuple[str, ...]] = {pformat(required, width=116, sort_dicts=True)}\n"
    )


def main() -> int:
    TARGET.write_text(render())
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

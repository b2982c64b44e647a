"""The chart README, values.yaml, the schema and the templates name the same values.

The README's values table is generated from the ``# --`` comments of ``values.yaml``
(``helm/generate_readme.py``) and must be current; every value the README, the install notes
or a template mentions must exist (a template that reads a missing value silently renders
nothing); every value in ``values.yaml`` must be documented and declared in the schema.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import CHART_DIR, ROOT


def _load_generator() -> ModuleType:
    path = ROOT / "helm" / "generate_readme.py"
    spec = importlib.util.spec_from_file_location("generate_readme", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


generator = _load_generator()
README, VALUES_TEXT, SCHEMA = generator.current_inputs()
VALUES: dict[str, Any] = yaml.safe_load(VALUES_TEXT)
#: `a.b.c` in prose: a dotted path whose first part is a top-level value.
PROSE_REFERENCE = re.compile(r"`([a-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)+)`")
TEMPLATE_REFERENCE = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
ALIAS = re.compile(r"(\$[A-Za-z_][A-Za-z0-9_]*) :?= \$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def referenced_values(text: str) -> set[str]:
    return {m for m in PROSE_REFERENCE.findall(text) if m.split(".")[0] in VALUES}


def test_readme_values_table_is_current() -> None:
    assert generator.render_readme(README, VALUES_TEXT, SCHEMA) == README, "run: python helm/generate_readme.py"


def test_every_value_in_the_readme_exists_in_values_yaml() -> None:
    table = README.split(generator.START, 1)[1].split(generator.END, 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert len(rows) > 50
    missing = [path for path in rows + sorted(referenced_values(README)) if not generator.exists(VALUES, path)]
    assert missing == [], f"the chart README names values that values.yaml lacks: {missing}"


def test_every_value_in_values_yaml_is_documented() -> None:
    assert generator.undocumented(VALUES_TEXT) == [], "add a '# --' comment above each of these in values.yaml"


def test_every_value_the_templates_and_notes_read_exists() -> None:
    used: dict[str, set[str]] = {}
    for template in sorted((CHART_DIR / "templates").iterdir()):
        text = template.read_text()
        found = {m.lstrip(".") for m in TEMPLATE_REFERENCE.findall(text)}
        for alias, target in ALIAS.findall(text):  # {{ $pg := .Values.postgresql }} ... $pg.image.tag
            found |= {target.lstrip(".") + m for m in re.findall(re.escape(alias) + r"((?:\.[A-Za-z_]\w*)+)", text)}
        if template.name == "NOTES.txt" or template.suffix == ".tpl":
            found |= referenced_values(re.sub(r"\{\{.*?\}\}", "", text))  # values named in messages
        used[template.name] = found
    missing = {name: sorted(p for p in paths if not generator.exists(VALUES, p)) for name, paths in used.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    assert "postgresql.persistence.size" in used["postgresql.yaml"], "the scan must see $pg-style reads too"
    assert "dags.inline" in used["NOTES.txt"] | used["_helpers.tpl"]


def schema_paths(node: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths the schema declares, down to free-form objects."""
    paths = set()
    for key, child in node.get("properties", {}).items():
        paths.add(prefix + key)
        paths |= schema_paths(child, f"{prefix}{key}.")
    return paths


def value_paths(node: Any, schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of values.yaml, not descending into what the schema leaves free-form."""
    paths = set()
    if isinstance(node, dict):
        for key, child in node.items():
            paths.add(prefix + key)
            child_schema = schema.get("properties", {}).get(key, {})
            if "properties" in child_schema:
                paths |= value_paths(child, child_schema, f"{prefix}{key}.")
    return paths


def test_schema_and_values_yaml_declare_the_same_keys() -> None:
    declared = schema_paths(SCHEMA) - {"global"}
    present = value_paths(VALUES, SCHEMA)
    assert sorted(declared - present) == [], "the schema declares values that values.yaml lacks"
    assert sorted(present - declared) == [], "values.yaml has values the schema does not declare"


def test_readme_documents_the_hand_written_sections() -> None:
    headings = re.findall(r"^##+ (.+)$", README, re.M)
    for section in ("Install", "Evaluation: no values at all", "Production", "Upgrade", "DAG delivery",
                    "GitOps recipe (Argo CD or Flux)", "External database", "Tokens", "Ingress",
                    "Metrics and alerts", "Uninstall", "Values"):
        assert section in headings, f"the chart README lacks its {section!r} section"
    assert "for evaluation — use an external database in production" in README
    assert "configMapGenerator" in README and "kind: Application" in README and "subPath" in README


# --------------------------------------------------------- the checks themselves can fail


SAMPLE = """\
# A section comment, not documentation.
image:
  # -- The image.
  repository: leoflow/leoflow
  tag: ""
# -- Resources, documenting everything below.
resources:
  limits:
    memory: 1Gi
extra:
  # -- A list whose items look like keys.
  items:
    - name: x
      value: y
  # -- Text that looks like keys.
  text: |
    fake: key
"""


def test_generator_documents_keys_and_flags_undocumented_ones() -> None:
    rows = {row.path: row for row in generator.documented_values(SAMPLE)}
    assert list(rows) == ["image.repository", "resources", "extra.items", "extra.text"]
    assert rows["resources"].description == "Resources, documenting everything below."
    assert rows["extra.items"].default == [{"name": "x", "value": "y"}]
    assert generator.undocumented(SAMPLE) == ["image.tag"]


def test_stale_readme_and_unknown_values_are_caught(tmp_path: Path) -> None:
    renamed = VALUES_TEXT.replace("  poolSize: 10", "  connectionPoolSize: 10")
    assert renamed != VALUES_TEXT
    assert generator.render_readme(README, renamed, SCHEMA) != README, "a renamed value must make the README stale"
    assert not generator.exists(yaml.safe_load(renamed), "database.poolSize")
    ghost = README + "\nSet `database.password` to ...\n"
    assert [p for p in referenced_values(ghost) if not generator.exists(VALUES, p)] == ["database.password"]


@pytest.mark.parametrize("text", ["no markers at all", f"{generator.START} only the start"])
def test_generator_refuses_a_readme_without_markers(text: str) -> None:
    with pytest.raises(ValueError, match="markers"):
        generator.render_readme(text, SAMPLE, {})


def test_schema_type_column_comes_from_the_schema() -> None:
    rows = {row.path: row for row in generator.documented_values(VALUES_TEXT, SCHEMA)}
    assert rows["postgresql.enabled"].type == '"auto" | true | false'
    assert rows["replicaCount"].type == "integer"
    assert json.loads(json.dumps(rows["dags.inline"].default)) == {}

"""Every YAML example in the README and docs/ applies through the real API, as written.

A reader copies these blocks into files; one the server refuses (the ``notify`` example, then in the README,
read ``on:`` as ``true`` under YAML 1.1 — issue 44, item 8) is a broken promise. Each fenced
```` ```yaml ```` block is classified by what it holds: a DAG (it has ``tasks``), DAG-level fields
(completed with one task), or a task's fields (completed into a DAG of that task). A block that is
none of these must say so with ``<!-- not a DAG -->`` on a line of its own just before its fence.
ADRs (``docs/adr/``) are left out: they record designs, proposed syntax included, not examples.
A block marked ``<!-- cluster template -->`` is a cluster template: it is stored (``PUT
/api/v2/templates/{name}``) before any example that names ``cluster/…`` is applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.model.files.yaml_loader import dump_yaml, load_yaml
from leoflow.model.spec.dag import _DAG_FIELDS, _TASK_FIELDS
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for

ROOT = Path(__file__).resolve().parents[2]
NOT_A_DAG = "<!-- not a DAG -->"
CLUSTER_TEMPLATE = "<!-- cluster template -->"
_FENCE = re.compile(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Example:
    where: str
    text: str
    skipped: bool
    cluster_template: bool = False


def yaml_examples() -> list[Example]:
    found: list[Example] = []
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "adr" not in p.relative_to(ROOT / "docs").parts]
    for path in [ROOT / "README.md", *docs]:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            found.append(Example(f"{path.relative_to(ROOT)}:{line}", match.group(1),
                                 before in (NOT_A_DAG, CLUSTER_TEMPLATE), before == CLUSTER_TEMPLATE))
    return found


EXAMPLES = yaml_examples()
_TASK = {"id": "doc-task", "image": "busybox:1.36", "command": ["true"]}


def as_dag(document: Any, dag_id: str) -> dict[str, Any]:
    """The example as a whole DAG spec (see the module docstring); fails for an unmarked non-DAG block."""
    assert isinstance(document, dict), f"not a mapping: {document!r:.200}"
    if "tasks" in document:
        return {"dag_id": dag_id, **document}
    if set(document) <= _DAG_FIELDS:
        return {"dag_id": dag_id, "tasks": [_TASK], **document}
    if set(document) <= _TASK_FIELDS:
        return {"dag_id": dag_id, "tasks": [{**_TASK, **document}]}
    raise AssertionError(f"neither a DAG nor DAG or task fields: {sorted(map(str, document))}; "
                         f"mark it {NOT_A_DAG!r} if it is no DAG")


def test_the_readme_and_docs_have_yaml_examples_and_the_notify_one() -> None:
    assert len(EXAMPLES) >= 10
    assert any("  - on: [" in e.text and e.where.startswith("docs/notifications.md") for e in EXAMPLES)


@pytest.fixture
def docs_client(database_url: str) -> Iterator[httpx.Client]:
    """The API as the docs' operator runs it: the pod examples (docs/task-pods.md) name the service account
    ``etl-runner``, which the cluster's pod policy refuses unless allowed (as that page says)."""
    settings = api_settings(database_url, LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS="etl-runner")
    with client_for(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_yaml_example_applies(docs_client: httpx.Client, example: Example) -> None:
    api_client = docs_client
    if example.skipped:
        pytest.skip("marked as no DAG")
    if "cluster/" in example.text:
        _store_cluster_templates(api_client)
    dag_id = "doc-" + re.sub(r"[^a-z0-9]+", "-", example.where.lower()).strip("-")[-40:]
    document = as_dag(load_yaml(example.text), dag_id)
    _apply_waited_dags(api_client, document)
    # The body is the example's own text when it is a whole DAG, so the server reads what the reader wrote.
    whole = "tasks" in load_yaml(example.text) and "dag_id" in load_yaml(example.text)
    body = example.text if whole else dump_yaml(document)
    answer = api_client.post("/api/v2/dags", content=body.encode(),
                             headers={**ADMIN, "Content-Type": "application/yaml"})
    assert answer.status_code in (200, 201), f"{example.where}: {answer.text[:500]}"


def _apply_waited_dags(client: httpx.Client, document: dict[str, Any]) -> None:
    """The DAGs an example's ``wait_for`` names must exist (a 422 at apply otherwise): stand-ins first."""
    for task in [*document.get("tasks", []), *document.get("on_exit", [])]:
        waits = task.get("wait_for") if isinstance(task, dict) else None
        for wait in waits if isinstance(waits, list) else [waits] if isinstance(waits, dict) else []:
            other = wait.get("dag") if isinstance(wait, dict) else None
            if isinstance(other, str) and other != document["dag_id"]:
                answer = client.post("/api/v2/dags", json={"dag_id": other, "tasks": [_TASK]}, headers=ADMIN)
                assert answer.status_code in (200, 201), answer.text[:500]


def _store_cluster_templates(client: httpx.Client) -> None:
    for example in EXAMPLES:
        if example.cluster_template:
            template = load_yaml(example.text)
            answer = client.put(f"/api/v2/templates/{template['name']}", content=example.text.encode(),
                                headers={**ADMIN, "Content-Type": "application/yaml"})
            assert answer.status_code in (200, 201), f"{example.where}: {answer.text[:500]}"


def test_cluster_template_examples_are_stored(docs_client: httpx.Client) -> None:
    assert any(e.cluster_template for e in EXAMPLES)
    _store_cluster_templates(docs_client)


def test_notify_on_is_a_key_not_true(api_client: httpx.Client) -> None:
    body = ("dag_id: notified\ntasks: [{id: a, image: busybox, command: ['true']}]\n"
            "notify:\n  - on: [failure]\n    webhook: {url: 'https://alerts.example/leoflow'}\n")
    answer = api_client.post("/api/v2/dags", content=body.encode(),
                             headers={**ADMIN, "Content-Type": "application/yaml"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["spec"]["notify"][0]["on"] == ["failure"]

"""Render the Helm chart in-process (Helm's own Go library through helm-python-sdk).

No helm binary and no cluster: ``Chart.render`` runs the same template engine and schema check
as ``helm install``, so a value set that fails here fails for a user too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_validate

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "leoflow"
RELEASE = "wf"
NAMESPACE = "workflows"

#: A production-shaped install: an external database URL and one admin token (most tests start here;
#: rendering with no values at all, the evaluation install, is tested in test_chart_defaults.py).
MINIMAL: dict[str, Any] = {
    "database": {"url": "postgresql://leoflow:secret@db.example:5432/leoflow"},
    "auth": {"tokens": [{"name": "ops", "scope": "admin", "token": "ops-token-123456"}]},
}

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]

#: Oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas shipped.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
#: Kinds whose schema is a CRD, unknown to the offline validator.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
_VALIDATED: set[tuple[str, str]] = set()


def validate_strict(doc: Manifest) -> bool:
    """kubernetes-validate --strict against every supported version; False for a custom kind.

    Documents already validated are skipped (value sets share most of them).
    """
    if doc["kind"] in CUSTOM_KINDS:
        return False
    for version in KUBE_VERSIONS:
        key = (json.dumps(doc, sort_keys=True), version)
        if key not in _VALIDATED:
            kubernetes_validate.validate(doc, version, strict=True)
            _VALIDATED.add(key)
    return True


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` into a copy of ``base`` (what several ``-f`` files do)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def manifests(rendered: dict[str, str]) -> list[Manifest]:
    docs: list[Manifest] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def one(docs: list[Manifest], kind: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def kinds(docs: list[Manifest]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def named(docs: list[Manifest], kind: str, name: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    others = [d["metadata"]["name"] for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} {name}, got {others}"
    return found[0]


@pytest.fixture(scope="session")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(str(CHART_DIR)) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render_raw(chart: helm_python.Chart) -> Callable[..., dict[str, str]]:
    def _render(values: dict[str, Any], *, name: str = RELEASE) -> dict[str, str]:
        return chart.render(values, name=name, namespace=NAMESPACE, is_install=True)
    return _render


@pytest.fixture(scope="session")
def render(render_raw: Callable[..., dict[str, str]]) -> Render:
    """Render ``MINIMAL`` merged with the given values; returns the manifests (NOTES excluded)."""
    def _render(values: dict[str, Any] | None = None, *, base: dict[str, Any] | None = None) -> list[Manifest]:
        return manifests(render_raw(merged(MINIMAL if base is None else base, values or {})))
    return _render

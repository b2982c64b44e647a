"""Render the Helm chart in-process (Helm's own Go library through helm-python-sdk).

No helm binary and no cluster: ``Chart.render`` runs the same template engine and schema check
as ``helm install``, so a value set that fails here fails for a user too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "leoflow"
RELEASE = "wf"
NAMESPACE = "workflows"

#: The smallest values a user can install with: a database URL and one admin token.
MINIMAL: dict[str, Any] = {
    "database": {"url": "postgresql://leoflow:secret@db.example:5432/leoflow"},
    "auth": {"tokens": [{"name": "ops", "scope": "admin", "token": "ops-token-123456"}]},
}

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


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

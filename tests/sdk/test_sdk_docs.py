"""The Python DAG page's examples render, and its quick start is the tutorial's YAML DAG, exactly."""

from __future__ import annotations

import re
from pathlib import Path

from leoflow.model.files.yaml_loader import load_yaml
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.sdk.render import render_file

ROOT = Path(__file__).resolve().parents[2]


def _blocks(page: str, language: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_quick_start_is_the_tutorials_report_dag(tmp_path: Path) -> None:
    python = _blocks("python-dags.md", "python")
    (tmp_path / "report.py").write_text(python[0])
    rendered = render_file(tmp_path / "report.py", "report.py")
    assert rendered.problems == ()
    [dag] = rendered.dags
    tutorial = next(load_yaml(b) for b in _blocks("tutorial.md", "yaml") if "dag_id: report" in b)
    assert parse_dag_spec(dag.spec).to_canonical() == parse_dag_spec(tutorial).to_canonical()


def test_every_python_example_of_the_page_renders(tmp_path: Path) -> None:
    for i, block in enumerate(_blocks("python-dags.md", "python")):
        (tmp_path / f"example{i}.py").write_text(block)
        rendered = render_file(tmp_path / f"example{i}.py", f"example{i}.py")
        assert rendered.problems == () and rendered.dags, (i, rendered.problems)

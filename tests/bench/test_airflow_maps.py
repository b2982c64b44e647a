"""``bench/vs_airflow.py --map`` without Airflow: the Leoflow side is bench/map.py's pipelines, the
Airflow DAG file is valid Python that maps with ``.partial().expand()``, and the flags."""

from __future__ import annotations

import ast

import pytest

from bench import airflow_maps, vs_airflow
from leoflow.model.spec.dag import parse_dag_spec


def test_the_leoflow_side_is_bench_maps_pipelines() -> None:
    specs = airflow_maps.map_specs()
    assert [s["dag_id"] for s in specs] == [airflow_maps.EMPTY_MAP, airflow_maps.TRUE_MAP]
    empty, true = (parse_dag_spec(s) for s in specs)
    assert [t.kind for t in empty.tasks if t.id == "process"] == ["empty"]
    assert [t.max_parallel for t in true.tasks if t.id == "process"] == [32]


def test_the_airflow_file_expands_the_same_items_with_the_same_bound() -> None:
    text = airflow_maps.airflow_dag_file(1_000)
    ast.parse(text)  # it is Python
    assert text.count(".expand(") == 2 and "range(1000)" in text and "max_active_tis_per_dagrun=32" in text
    assert f'dag("{airflow_maps.EMPTY_MAP}")' in text and f'dag("{airflow_maps.TRUE_MAP}")' in text


def test_map_has_its_own_plot_and_excludes_chain(capsys: pytest.CaptureFixture[str]) -> None:
    assert vs_airflow.parse_args(["--map"]).plot.name == "vs_airflow_map.png"
    with pytest.raises(SystemExit) as exit_info:
        vs_airflow.parse_args(["--map", "--chain"])
    assert exit_info.value.code == 2 and "choose one" in capsys.readouterr().err

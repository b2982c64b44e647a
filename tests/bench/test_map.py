"""``bench/map.py``: its pipelines are valid DAGs the local executor runs, the expansion row times
a real expansion in one transaction, and the arguments it refuses."""

from __future__ import annotations

import asyncio

import pytest

from bench import map as bench_map
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.entrypoint import check_entrypoints


@pytest.mark.parametrize(("items", "true_tasks"), [(1_000, False), (10_000, False), (1_000, True)])
def test_each_pipeline_is_a_valid_map_over_an_upstream_count(items: int, true_tasks: bool) -> None:
    spec = parse_dag_spec(bench_map.pipeline("p", items, true_tasks=true_tasks))
    check_entrypoints(spec, "local")
    [process] = [t for t in spec.tasks if t.id == "process"]
    assert process.map_over is not None and process.map_over.upstream == "list"
    assert process.max_parallel == (bench_map.TRUE_MAX_PARALLEL if true_tasks else None)
    assert f'"n":{items}' in spec.tasks[0].command[2]


def test_the_expansion_row_times_the_statement_inside_its_step_and_sees_one_transaction(database_url: str) -> None:
    row = asyncio.run(bench_map.expansion(database_url, 2, 50))
    assert row["items"] == 50 and row["transactions_per_expansion"] == [1, 1]
    assert all(0 < st <= sp for st, sp in zip(row["statements_s"], row["steps_s"], strict=True))


def test_memory_growth_is_from_the_first_sample_to_the_peak() -> None:
    row = bench_map.memory_row([(0.0, 100.0), (0.1, 130.5), (0.2, 110.0)])
    assert (row["baseline_mb"], row["peak_mb"], row["end_mb"], row["growth_mb"]) == (100.0, 130.5, 110.0, 30.5)
    assert bench_map.memory_row([])["growth_mb"] is None


@pytest.mark.parametrize("flag", ["--repeats", "--big-repeats", "--true-repeats", "--expand-repeats"])
def test_a_count_below_one_is_refused_naming_the_flag(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench_map.parse_args([flag, "0"])
    assert exit_info.value.code == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err

"""``bench/many_dags.py``: the arguments it refuses, and the Airflow side's DAG file."""

from __future__ import annotations

import pytest

from bench import airflow_many_dags, many_dags


@pytest.mark.parametrize(("argv", "message"), [
    (["--dags", "0"], "--dags: each size must be"),
    (["--idle", "-1"], "--idle and --sync"),
    (["--sync", "100001"], "--idle and --sync"),
    (["--idle-seconds", "0"], "--idle-seconds must be at least 1"),
    (["--dags", "10000", "--airflow"], "--airflow compares with --dags 1000"),
])
def test_a_bad_value_is_refused_naming_the_flag(argv: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        many_dags.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_every_row_is_asked_for_by_the_page_entry() -> None:
    args = many_dags.parse_args(["--dags", "1000", "10000", "--idle", "100000", "--sync", "10000", "--airflow"])
    assert (args.dags, args.idle, args.sync, args.airflow) == ([1000, 10000], 100000, 10000, True)


def test_the_airflow_dag_file_defines_every_dag_once_on_the_same_schedule() -> None:
    """The file Airflow parses: N distinct DAGs on ``* * * * *``, catchup off, one EmptyOperator each
    (compiled here, not run: Airflow is not installed in the test environment)."""
    source = airflow_many_dags.dag_file(3)
    compile(source, "bench_dags.py", "exec")
    assert 'schedule="* * * * *"' in source and "catchup=False" in source and "EmptyOperator" in source
    assert "range(3)" in source

"""``--example``: the packaged sample DAG is valid, and applying it queues exactly one run."""

from __future__ import annotations

import psycopg

from leoflow.model.spec.dag import parse_dag_spec
from leoflow.settings import Settings
from leoflow.standalone.example import apply_example, example_documents, example_spec_data


def test_packaged_example_is_a_valid_fan_out_fan_in() -> None:
    spec = parse_dag_spec(example_spec_data())
    assert len(spec.tasks) >= 4


def test_apply_example_stores_the_dag_and_queues_one_run_each_time(settings: Settings, database_url: str) -> None:
    first = apply_example(settings)
    second = apply_example(settings)
    assert first.dag_id == second.dag_id == "example"
    assert first.run_id != second.run_id
    with psycopg.connect(database_url) as conn:
        runs = conn.execute("SELECT run_id FROM dag_runs "
                            "WHERE dag_id = 'example'").fetchall()
        versions = conn.execute("SELECT count(*) FROM dag_versions").fetchone()
    assert sorted(r[0] for r in runs) == sorted([first.run_id, second.run_id])
    assert versions == (1,)  # re-applying the unchanged spec adds no version


def test_every_packaged_example_is_offered_by_name_and_valid_for_the_local_executor() -> None:
    """``standalone --example NAME`` offers exactly the files of ``leoflow/examples/``, each a spec the
    standalone's local executor can run (a command on every task)."""
    from pathlib import Path

    import leoflow
    from leoflow.cli.standalone import EXAMPLES
    from leoflow.model.spec.entrypoint import check_entrypoints

    shipped = sorted(p.stem for p in (Path(leoflow.__file__).parent / "examples").glob("*.yaml"))
    assert sorted(EXAMPLES) == shipped
    for name in EXAMPLES:
        for document in example_documents(name):  # raises for a task without command
            check_entrypoints(parse_dag_spec(document), "local")


def test_apply_example_by_name_queues_a_run_of_that_dag(settings: Settings, database_url: str) -> None:
    run = apply_example(settings, "conditional")
    assert run.dag_id == "conditional"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM dag_runs WHERE dag_id = 'conditional' AND run_id = %s",
                            (run.run_id,)).fetchone() == (1,)

"""Migrations produce exactly the models' schema and round-trip on a database with data."""

from __future__ import annotations

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from alembic import command
from leoflow.db import migrations
from leoflow.db.connection.engine import sqlalchemy_url
from leoflow.db.tables import Base


def _diff(url: str) -> list[object]:
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_head_matches_models(empty_database_url: str) -> None:
    migrations.upgrade(empty_database_url)
    assert _diff(empty_database_url) == []
    command.check(migrations.alembic_config(empty_database_url))  # `alembic check` is clean


def test_upgrade_is_idempotent(empty_database_url: str) -> None:
    migrations.upgrade(empty_database_url)
    migrations.upgrade(empty_database_url)
    assert migrations.current_revision(empty_database_url) == migrations.head_revision()


def _seed(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO dags (dag_id) VALUES ('etl')")
        version_id = conn.execute(
            "INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
            "VALUES ('etl', 1, '{}'::jsonb, 'h') RETURNING id").fetchone()[0]  # type: ignore[index]
        conn.execute("UPDATE dags SET current_version_id = %s", (version_id,))
        run_pk = conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type) "
            "VALUES ('etl', 'manual-1', %s, 'manual') RETURNING id", (version_id,)).fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO task_instances (run_pk, task_id) VALUES (%s, 'extract')", (run_pk,))
        conn.execute("INSERT INTO leader_terms (cluster, node_id) VALUES ('default', 'n1')")
        conn.execute("INSERT INTO cluster_events (cluster, kind) VALUES ('default', 'leader_elected')")


def test_downgrade_base_then_upgrade_round_trips_with_data(empty_database_url: str) -> None:
    migrations.upgrade(empty_database_url)
    _seed(empty_database_url)
    migrations.downgrade(empty_database_url, "base")
    with psycopg.connect(empty_database_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_name <> 'alembic_version'").fetchone()
        assert tables == (0,)
    migrations.upgrade(empty_database_url)
    assert _diff(empty_database_url) == []
    _seed(empty_database_url)  # the schema is fully usable again


def test_duplicates_are_impossible_in_the_database(database_url: str) -> None:
    _seed(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        version_id = conn.execute("SELECT id FROM dag_versions").fetchone()[0]  # type: ignore[index]
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type) "
                         "VALUES ('etl', 'manual-1', %s, 'manual')", (version_id,))
        for run_id in ("scheduled__a", "scheduled__b"):
            try:
                conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date) "
                             "VALUES ('etl', %s, %s, 'scheduled', '2026-01-01T00:00:00Z')", (run_id, version_id))
            except psycopg.errors.UniqueViolation:
                assert run_id == "scheduled__b"
            else:
                assert run_id == "scheduled__a"
        run_pk = conn.execute("SELECT id FROM dag_runs WHERE run_id = 'manual-1'").fetchone()[0]  # type: ignore[index]
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO task_instances (run_pk, task_id) VALUES (%s, 'extract')", (run_pk,))
        ti = conn.execute("SELECT id FROM task_instances").fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO task_tries (task_instance_id, try_number, term) VALUES (%s, 1, 1)", (ti,))
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO task_tries (task_instance_id, try_number, term) VALUES (%s, 1, 2)", (ti,))


def test_every_migration_declares_whether_its_downgrade_drops_data() -> None:
    """``db downgrade`` asks for ``--yes`` from these declarations: a missing or wrong one lets data go silently."""
    import inspect

    for script in migrations._scripts().walk_revisions():
        declared = getattr(script.module, "drops_data_on_downgrade", None)
        assert isinstance(declared, bool), f"{script.revision} must declare drops_data_on_downgrade = True/False"
        source = inspect.getsource(script.module.downgrade)
        if "drop_table(" in source or "drop_column(" in source:
            assert declared, f"{script.revision}'s downgrade() drops a table or column but declares it loses no data"


def test_data_dropping_downgrades_follow_the_declarations(empty_database_url: str) -> None:
    migrations.upgrade(empty_database_url)
    head = migrations.head_revision()
    assert migrations.data_dropping_downgrades(empty_database_url, head) == []
    assert "0024" in migrations.data_dropping_downgrades(empty_database_url, "0023")  # the pods' events
    assert "0025" in migrations.data_dropping_downgrades(empty_database_url, "0024")  # pending slots
    assert "0026" in migrations.data_dropping_downgrades(empty_database_url, "0025")  # the artifacts' index
    upto = lambda url, rev: [  # noqa: E731  (what later migrations drop is asserted on their own lines)
        r for r in migrations.data_dropping_downgrades(url, rev) if r <= "0023"]
    drops = lambda url, rev: [r for r in upto(url, rev) if r not in ("0021", "0022")]  # noqa: E731
    assert upto(empty_database_url, "0021") == ["0022"]  # the log archive's index
    assert upto(empty_database_url, "0020") == ["0022", "0021"]  # + task waits
    assert drops(empty_database_url, "0019") == ["0020"]  # data intervals
    assert drops(empty_database_url, "0018") == ["0020", "0019"]  # + datasets
    assert drops(empty_database_url, "0017") == ["0020", "0019", "0018"]  # + cluster templates
    assert drops(empty_database_url, "0016") == ["0020", "0019", "0018", "0017"]  # + runtime API tokens
    assert drops(empty_database_url, "0014") == ["0020", "0019", "0018", "0017", "0016", "0015"]  # + map counts
    assert drops(empty_database_url, "0013") == ["0020", "0019", "0018", "0017", "0016", "0015", "0014"]  # + outputs
    assert drops(empty_database_url, "0011") == ["0020", "0019", "0018", "0017", "0016", "0015", "0014", "0012"]
    assert drops(empty_database_url, "0010") == ["0020", "0019", "0018", "0017", "0016", "0015", "0014", "0012"]
    assert drops(empty_database_url, "0003") == ["0020", "0019", "0018", "0017", "0016", "0015", "0014", "0012", "0010",
                                                 "0008", "0007", "0006", "0005", "0004"]
    assert migrations.data_dropping_downgrades(empty_database_url, "no-such-revision") == []

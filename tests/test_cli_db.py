"""The ``leoflow`` command as users run it: a real subprocess against a real server."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg


def leoflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "leoflow", *args], capture_output=True, text=True,
                          env=full_env, timeout=60, check=False)


def test_help_lists_subcommands() -> None:
    result = leoflow("--help")
    assert result.returncode == 0
    assert "db" in result.stdout


def test_db_upgrade_creates_schema_and_is_a_noop_the_second_time(empty_database_url: str) -> None:
    env = {"LEOFLOW_DATABASE_URL": empty_database_url}
    first = leoflow("db", "upgrade", env=env)
    assert first.returncode == 0, first.stderr
    with psycopg.connect(empty_database_url) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}
    assert {"dags", "dag_runs", "task_instances", "leader_terms", "cluster_events"} <= tables
    second = leoflow("db", "upgrade", env=env)
    assert second.returncode == 0, second.stderr
    assert "Running upgrade" not in second.stderr
    current = leoflow("db", "current", env=env)
    assert current.returncode == 0 and "at head" in current.stdout


def test_db_downgrade_and_current(empty_database_url: str) -> None:
    env = {"LEOFLOW_DATABASE_URL": empty_database_url}
    assert leoflow("db", "upgrade", env=env).returncode == 0
    down = leoflow("db", "downgrade", "base", env=env)
    assert down.returncode == 0, down.stderr
    assert leoflow("db", "current", env=env).stdout.startswith("base")


def test_bad_database_url_is_one_line_and_exit_2() -> None:
    result = leoflow("db", "upgrade", env={"LEOFLOW_DATABASE_URL": "not-a-url"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "LEOFLOW_DATABASE_URL" in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_setting_never_echoes_the_password() -> None:
    result = leoflow("db", "upgrade", env={"LEOFLOW_DATABASE_URL": "mysql://admin:hunter2secret@db/x"})
    assert result.returncode == 2
    assert "hunter2secret" not in result.stderr + result.stdout


def test_unreachable_database_is_one_line_without_password() -> None:
    result = leoflow("db", "upgrade", env={"LEOFLOW_DATABASE_URL": "postgresql://u:hunter2secret@127.0.0.1:1/x"})
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "hunter2secret" not in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_database_url_names_the_variable() -> None:
    result = leoflow("db", "current")
    assert result.returncode == 2
    assert "LEOFLOW_DATABASE_URL" in result.stderr

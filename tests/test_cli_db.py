"""The ``leoflow`` command as users run it: a real subprocess against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import yaml

from leoflow.db import migrations


def leoflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "leoflow", *args], capture_output=True, text=True,
                          env=full_env, timeout=60, check=False, stdin=subprocess.DEVNULL)


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
    assert "not claimed by any cluster yet" in leoflow("db", "current", env=env).stdout
    down = leoflow("db", "downgrade", "base", "--yes", env=env)
    assert down.returncode == 0, down.stderr
    assert leoflow("db", "current", env=env).stdout.startswith("base")


def test_downgrade_to_base_needs_yes_off_a_terminal(empty_database_url: str) -> None:
    env = {"LEOFLOW_DATABASE_URL": empty_database_url}
    assert leoflow("db", "upgrade", env=env).returncode == 0
    depth = len(migrations.known_revisions())
    for target in ("base", f"-{depth}", f"-{depth + 2}"):
        refused = leoflow("db", "downgrade", target, env=env)
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "--yes" in lines[0] and "drops every Leoflow table" in lines[0]
        assert "at head" in leoflow("db", "current", env=env).stdout  # nothing was dropped
    # One step back keeps the tables: no confirmation of base needed (--yes only if that step's
    # downgrade drops a column, which the next test covers).
    confirm = ["--yes"] if migrations.data_dropping_downgrades(empty_database_url, "-1") else []
    assert leoflow("db", "downgrade", "-1", *confirm, env=env).returncode == 0
    assert leoflow("db", "current", env=env).stdout.startswith(f"{depth - 1:04d} (head is")


def test_downgrade_to_a_revision_whose_way_down_drops_data_needs_yes(empty_database_url: str) -> None:
    """``db downgrade 0003`` drops backfills, pools, run commands...: it asks like ``base`` does."""
    env = {"LEOFLOW_DATABASE_URL": empty_database_url}
    assert leoflow("db", "upgrade", env=env).returncode == 0
    for target in ("0003", "-2"):
        refused = leoflow("db", "downgrade", target, env=env)
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "--yes" in lines[0] and "drops tables or columns holding data" in lines[0]
        # Names the revisions whose downgrades lose data (test_migrations checks that list).
        assert ", ".join(migrations.data_dropping_downgrades(empty_database_url, target)) in lines[0]
        assert "at head" in leoflow("db", "current", env=env).stdout  # nothing was dropped
    done = leoflow("db", "downgrade", "0003", "--yes", env=env)
    assert done.returncode == 0, done.stderr
    assert leoflow("db", "current", env=env).stdout.startswith("0003 (head is")


def test_downgrade_to_base_asks_on_a_terminal(empty_database_url: str) -> None:
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    env["LEOFLOW_DATABASE_URL"] = empty_database_url
    assert leoflow("db", "upgrade", env=env).returncode == 0
    for answer, code, at in ((b"no\n", 2, migrations.head_revision()), (b"yes\n", 0, "base")):
        leader, follower = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "leoflow", "db", "downgrade", "base"], env=env,
                                stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.close(follower)
        os.write(leader, answer)
        _, err = proc.communicate(timeout=60)
        os.close(leader)
        assert proc.returncode == code, err
        assert leoflow("db", "current", env=env).stdout.startswith(at)


def test_current_names_the_cluster_that_owns_the_database(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO installation (cluster, claimed_by) VALUES ('blue', 'node-1')")
    current = leoflow("db", "current", env={"LEOFLOW_DATABASE_URL": database_url})
    assert current.returncode == 0 and "cluster blue" in current.stdout and "node-1" in current.stdout


def test_every_db_verb_answers_scripts_in_json_or_yaml(empty_database_url: str) -> None:
    """``db upgrade|current|purge|downgrade -o json|yaml``: one document a script can read, nothing else."""
    env = {"LEOFLOW_DATABASE_URL": empty_database_url}
    head = migrations.head_revision()
    up = leoflow("db", "upgrade", "-o", "json", env=env)
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout) == {"revision": head, "head": head}
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO installation (cluster, claimed_by) VALUES ('blue', 'node-1')")
    current = json.loads(leoflow("db", "current", "--output", "json", env=env).stdout)
    assert current["revision"] == head and current["at_head"] is True
    assert current["owner"]["cluster"] == "blue" and current["owner"]["claimed_by"] == "node-1"
    assert yaml.safe_load(leoflow("db", "current", "-o", "yaml", env=env).stdout) == current
    purge = leoflow("db", "purge", "--before", "2020-01-01", "--dry-run", "-o", "json", env=env)
    assert purge.returncode == 0, purge.stderr
    answer = json.loads(purge.stdout)
    assert answer["dry_run"] is True and answer["before"].startswith("2020-01-01T00:00:00")
    assert answer["rows"]["dag_runs"] == 0 and "task_tries" in answer["rows"]
    down = leoflow("db", "downgrade", "base", "--yes", "-o", "json", env=env)
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout) == {"revision": None, "head": head}


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

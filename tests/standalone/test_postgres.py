"""The embedded server's lifecycle on a real PostgreSQL: start, stop, orphans, stale pid files."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from leoflow.db import migrations
from leoflow.standalone.embedded import EmbeddedPostgres, EmbeddedPostgresError
from leoflow.standalone.home import StandaloneHome
from leoflow.standalone.postgres import StandalonePostgres
from tests.standalone.procs import postgres_pids, wait_until_gone


def _revision(url: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return row[0] if row else None


def test_the_remembered_port_is_not_taken_when_the_api_is_to_bind_it(home: StandaloneHome) -> None:
    """The API binds its port only after PostgreSQL is up; a remembered port equal to it moves."""
    first = StandalonePostgres(home)
    first.start()
    first.stop()
    api_port = first.port  # free again, and what this home remembers
    second = StandalonePostgres(home, reserved=frozenset({api_port}))
    second.start()
    try:
        assert second.port != api_port
        assert int(home.port_file.read_text()) == second.port
    finally:
        second.stop()


def test_start_migrates_and_stop_leaves_no_server(home: StandaloneHome) -> None:
    pg = StandalonePostgres(home)
    url = pg.start()
    password = home.password_file.read_text().strip()
    assert url.startswith(f"postgresql://postgres:{password}@127.0.0.1:")
    assert _revision(url) == migrations.head_revision()
    assert postgres_pids(home.data_dir)
    pg.stop()
    assert wait_until_gone(home.data_dir) == []
    assert int(home.port_file.read_text()) == pg.port


def test_stop_finds_a_postmaster_whose_pid_file_is_not_written_yet(home: StandaloneHome) -> None:
    """A SIGTERM that lands during ``pg_ctl start`` stops the server before its ``postmaster.pid``
    has content (PostgreSQL creates the file, then writes it): the stop finds the postmaster by
    its command line and shuts it down by signal. The half-written file is simulated by emptying
    it under a running server; reading it alone, the stop used to leave that server running."""
    pg = StandalonePostgres(home)
    pg.start()
    assert postgres_pids(home.data_dir)
    (home.data_dir / "postmaster.pid").write_text("")
    assert pg.server.running_pid() is None
    pg.stop()
    assert wait_until_gone(home.data_dir) == []


def test_restart_keeps_data_and_reuses_the_port(home: StandaloneHome) -> None:
    first = StandalonePostgres(home)
    url = first.start()
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE marker (x int)")
        conn.execute("INSERT INTO marker VALUES (42)")
    first.stop()
    second = StandalonePostgres(home)
    url2 = second.start()
    try:
        assert second.port == first.port
        with psycopg.connect(url2) as conn:
            assert conn.execute("SELECT x FROM marker").fetchone() == (42,)
    finally:
        second.stop()


def test_orphan_left_by_a_killed_owner_is_stopped_and_replaced(home: StandaloneHome) -> None:
    # A standalone that died without cleanup leaves its server running (pg_ctl daemonises it).
    orphaned = StandalonePostgres(home)
    url = orphaned.start()
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE marker (x int)")
        conn.execute("INSERT INTO marker VALUES (7)")
    old_pid = orphaned.server.running_pid()
    assert old_pid is not None

    fresh = StandalonePostgres(home)
    url2 = fresh.start()
    try:
        new_pid = fresh.server.running_pid()
        assert new_pid is not None and new_pid != old_pid
        assert old_pid not in postgres_pids(home.data_dir)
        with psycopg.connect(url2) as conn:
            assert conn.execute("SELECT x FROM marker").fetchone() == (7,)
    finally:
        fresh.stop()
    assert wait_until_gone(home.data_dir) == []


def test_orphan_killed_hard_recovers_by_crash_recovery(home: StandaloneHome) -> None:
    pg = StandalonePostgres(home)
    url = pg.start()
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE marker (x int)")
        conn.execute("INSERT INTO marker VALUES (9)")
    pg.server.kill()  # SIGKILL the postmaster: postmaster.pid stays behind, the data needs recovery
    again = StandalonePostgres(home)
    url2 = again.start()
    try:
        with psycopg.connect(url2) as conn:
            assert conn.execute("SELECT x FROM marker").fetchone() == (9,)
    finally:
        again.stop()


def test_stale_pid_file_naming_an_unrelated_process_is_never_signalled(home: StandaloneHome) -> None:
    pg = StandalonePostgres(home)
    pg.start()
    pg.stop()
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = home.data_dir / "postmaster.pid"
        pid_file.write_text(f"{bystander.pid}\n{home.data_dir}\n0\n{pg.port}\n")
        again = StandalonePostgres(home)
        again.start()
        try:
            assert bystander.poll() is None, "an unrelated process was signalled"
            assert again.server.running_pid() != bystander.pid
        finally:
            again.stop()
    finally:
        bystander.kill()
        bystander.wait()


def test_a_taken_remembered_port_is_replaced_by_a_free_one(home: StandaloneHome) -> None:
    import socket

    pg = StandalonePostgres(home)
    pg.start()
    pg.stop()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the port may be in TIME_WAIT
        squatter.bind(("127.0.0.1", pg.port))
        squatter.listen()
        again = StandalonePostgres(home)
        again.start()
        try:
            assert again.port != pg.port
            assert int(home.port_file.read_text()) == again.port
        finally:
            again.stop()


def test_leftover_of_an_interrupted_initdb_is_redone(home: StandaloneHome) -> None:
    staging = home.data_dir.with_name("data.initdb")
    staging.mkdir(parents=True)
    (staging / "PG_VERSION").write_text("18\n")  # what an initdb killed half-way leaves
    home.data_dir.mkdir()  # empty, as a first start creates it
    pg = StandalonePostgres(home)
    try:
        pg.start()
        assert not staging.exists()
    finally:
        pg.stop()


def test_incomplete_data_directory_is_refused_never_deleted(home: StandaloneHome) -> None:
    home.data_dir.mkdir(parents=True)
    (home.data_dir / "PG_VERSION").write_text("18\n")
    with pytest.raises(EmbeddedPostgresError, match="not a complete PostgreSQL data directory"):
        StandalonePostgres(home).start()
    assert (home.data_dir / "PG_VERSION").exists()
    assert postgres_pids(home.data_dir) == []


def _refused_without_the_password(pg: StandalonePostgres, home: StandaloneHome) -> None:
    """No connection is trusted any more: loopback TCP and the socket both ask for the password."""
    for url in (f"postgresql://postgres@127.0.0.1:{pg.port}/leoflow",
                f"postgresql://postgres@/leoflow?host={home.socket_dir}&port={pg.port}",
                f"postgresql://postgres:wrong@127.0.0.1:{pg.port}/leoflow"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(url, connect_timeout=10).close()


def test_every_connection_needs_the_generated_password(home: StandaloneHome) -> None:
    pg = StandalonePostgres(home)
    url = pg.start()
    try:
        assert oct(home.password_file.stat().st_mode & 0o777) == "0o600"
        assert len(home.password_file.read_text().strip()) >= 40
        _refused_without_the_password(pg, home)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pg.stop()
    again = StandalonePostgres(home)  # a restart keeps the password (the URL stays valid)
    assert again.start() == url
    again.stop()


def test_a_home_made_with_trust_by_an_older_leoflow_is_switched_to_a_password(home: StandaloneHome) -> None:
    # What an older standalone left: initdb --auth=trust, the database with data, no password file.
    old = EmbeddedPostgres(home.data_dir, socket_dir=home.socket_dir)
    home.create()
    old.start()
    try:
        with psycopg.connect(old.create_database("leoflow")) as conn:  # trusted: no password in the URL
            conn.execute("CREATE TABLE marker (x int)")
            conn.execute("INSERT INTO marker VALUES (11)")
    finally:
        old.stop()
    assert "trust" in (home.data_dir / "pg_hba.conf").read_text() and not home.password_file.exists()

    pg = StandalonePostgres(home)
    url = pg.start()
    try:
        assert home.password_file.exists() and ":" in url.split("@")[0].removeprefix("postgresql://")
        with psycopg.connect(url) as conn:  # same data, now behind the password
            assert conn.execute("SELECT x FROM marker").fetchone() == (11,)
        assert _revision(url) == migrations.head_revision()
        _refused_without_the_password(pg, home)
    finally:
        pg.stop()
    # A deleted password file: a new password is set the same way, the data stays.
    home.password_file.unlink()
    again = StandalonePostgres(home)
    url2 = again.start()
    try:
        assert url2 != url
        with psycopg.connect(url2) as conn:
            assert conn.execute("SELECT x FROM marker").fetchone() == (11,)
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(url, connect_timeout=10).close()
    finally:
        again.stop()

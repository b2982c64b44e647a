"""The instance lock and the admin token file (no database needed)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from leoflow.standalone.home import StandaloneHome
from leoflow.standalone.instance import AlreadyRunning, InstanceLock
from leoflow.standalone.token import TokenFileError, ensure_admin_token


def test_second_lock_refuses_with_pid_and_url_and_leaves_the_record(home: StandaloneHome) -> None:
    home.create()
    first = InstanceLock(home.lock_file)
    first.acquire(url="http://127.0.0.1:1234")
    record = home.lock_file.read_bytes()
    try:
        with pytest.raises(AlreadyRunning) as caught:
            InstanceLock(home.lock_file).acquire(url="http://127.0.0.1:9999", cleanup_wait=5)
        assert f"pid {os.getpid()}" in str(caught.value)
        assert "http://127.0.0.1:1234" in str(caught.value)
        assert home.lock_file.read_bytes() == record
    finally:
        first.release()
    again = InstanceLock(home.lock_file)
    again.acquire(url="http://127.0.0.1:9999")
    again.release()


def test_lock_held_by_a_dead_pid_is_waited_for_not_refused(home: StandaloneHome) -> None:
    """A killed standalone's watchdog still holds the lock while it stops PostgreSQL."""
    home.create()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, json, os, sys, time\n"
        f"fd = os.open({str(home.lock_file)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, json.dumps({'pid': 2**22 + 12345, 'url': 'http://x'}).encode())\n"
        "print('locked', flush=True)\n"
        "time.sleep(1.5)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        lock = InstanceLock(home.lock_file)
        lock.acquire(url="http://127.0.0.1:1", cleanup_wait=60)
        # Acquired only once the holder had exited (its descriptor closed): it waited, not refused.
        assert holder.poll() == 0
        lock.release()
    finally:
        holder.kill()
        holder.communicate()


def test_token_is_generated_once_with_mode_0600_and_reused(home: StandaloneHome) -> None:
    home.create()
    first = ensure_admin_token(home.token_file)
    assert stat.S_IMODE(home.token_file.stat().st_mode) == 0o600
    assert first.scope == "admin" and len(first.token) >= 32
    second = ensure_admin_token(home.token_file)
    assert second.token == first.token


def test_token_file_opened_up_is_tightened_back(home: StandaloneHome) -> None:
    home.create()
    token = ensure_admin_token(home.token_file)
    home.token_file.chmod(0o644)
    assert ensure_admin_token(home.token_file).token == token.token
    assert stat.S_IMODE(home.token_file.stat().st_mode) == 0o600


def test_empty_token_file_is_an_error_naming_the_file(home: StandaloneHome) -> None:
    home.create()
    home.token_file.write_text("\n")
    with pytest.raises(TokenFileError, match="admin-token"):
        ensure_admin_token(home.token_file)


def test_long_home_paths_put_the_socket_somewhere_short(tmp_path_factory: pytest.TempPathFactory) -> None:
    deep = tmp_path_factory.mktemp("x") / ("d" * 120)
    socket_dir = StandaloneHome.at(deep).socket_dir
    assert len(str(socket_dir)) + len("/.s.PGSQL.65535") <= 107
    assert StandaloneHome.at(deep).socket_dir == socket_dir  # stable for the same home


def test_client_finds_the_local_token_only_for_the_url_the_instance_serves(home: StandaloneHome) -> None:
    from leoflow.settings import load_settings
    from leoflow.standalone.discovery import client_settings

    home.create()
    token = ensure_admin_token(home.token_file).token

    def client_for(url: str, **env: str) -> str | None:
        settings = load_settings({"LEOFLOW_HOME": str(home.root), "LEOFLOW_URL": url, **env})
        return client_settings(settings).token

    assert client_for("http://127.0.0.1:8123") is None  # nothing running
    lock = InstanceLock(home.lock_file)
    lock.acquire(url="http://127.0.0.1:8123")
    try:
        assert client_for("http://127.0.0.1:8123") == token
        assert client_for("http://127.0.0.1:8123/") == token
        assert client_for("http://elsewhere.example:8123") is None  # never sent to another server
        assert client_for("http://127.0.0.1:8123", LEOFLOW_TOKEN="explicit-token") == "explicit-token"
    finally:
        lock.release()
    assert client_for("http://127.0.0.1:8123") is None

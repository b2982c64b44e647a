"""The partition harness really partitions: a session from inside a namespace dies on the server.

A process in its own network namespace holds an advisory lock on a private PostgreSQL over the
veth link. After ``partition()`` (iptables DROP both ways, PostgreSQL's port only) new
connections from inside time out, and the *server* drops the old session once its TCP
keepalives go unanswered — the lock becomes free without the holder doing anything. After
``heal()`` the namespace connects again. Cleanup happens also when the body fails.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from tests.harness import netns

pytestmark = [pytest.mark.root, pytest.mark.skipif(netns.unavailable_reason() is not None,
                                                   reason=netns.unavailable_reason() or "")]

LOCK_KEY = 424242
# Server-side dead-peer detection for the holder's session, as the election lock session has it:
# keepalives find an idle dead peer within ~1+1*2 s; tcp_user_timeout bounds unacknowledged data.
KEEPALIVE_OPTIONS = ("-c tcp_keepalives_idle=1 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2"
                     " -c tcp_user_timeout=4000")

HOLDER = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True, connect_timeout=5, application_name="netns-holder",
                       options=sys.argv[2])
conn.execute("SELECT pg_advisory_lock(%s)", (int(sys.argv[3]),))
print(conn.info.backend_pid, flush=True)
sys.stdin.read()
"""

PROBE = """
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=3) as conn:
    print(conn.execute("SELECT host(inet_client_addr())").fetchone()[0])
"""


@pytest.fixture
def link() -> Iterator[netns.NetNamespace]:
    with netns.network_namespace() as ns:
        yield ns


@pytest.fixture
def pg(link: netns.NetNamespace) -> Iterator[netns.VethPostgres]:
    with netns.veth_postgres([link]) as server:
        yield server


def probe(ns: netns.NetNamespace, url: str) -> subprocess.CompletedProcess[str]:
    return ns.run([sys.executable, "-c", PROBE, url], capture_output=True, text=True, timeout=30)


def session_alive(pg: netns.VethPostgres, backend_pid: int) -> bool:
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                            (backend_pid,)).fetchone() == (1,)


def session_row(pg: netns.VethPostgres, backend_pid: int) -> object:
    """What the server thinks the session is doing (for a failure message)."""
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        return conn.execute("SELECT state, wait_event_type, wait_event, state_change, client_addr::text"
                            " FROM pg_stat_activity WHERE pid = %s", (backend_pid,)).fetchone()


def lock_free(pg: netns.VethPostgres) -> bool:
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
        if got == (True,):
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
        return got == (True,)


def test_partition_kills_the_session_on_the_server_and_heal_restores(
        link: netns.NetNamespace, pg: netns.VethPostgres) -> None:
    url = pg.url_from(link)
    first = probe(link, url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == link.ns_addr  # really came over the veth link

    holder = link.popen([sys.executable, "-c", HOLDER, url, KEEPALIVE_OPTIONS, str(LOCK_KEY)],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        backend_pid = int(holder.stdout.readline())
        assert session_alive(pg, backend_pid)
        assert not lock_free(pg)

        link.partition(port=pg.port)
        assert "DROP" in link.rules()
        cut = probe(link, url)
        assert cut.returncode != 0, "a new connection from the partitioned namespace succeeded"
        # The holder never exits or closes anything: only the server's keepalives can end it.
        assert netns.wait_until(lambda: not session_alive(pg, backend_pid), timeout=60), \
            f"server kept the partitioned session: {session_row(pg, backend_pid)}"
        assert lock_free(pg)
        assert holder.poll() is None

        link.heal()
        assert "DROP" not in link.rules()
        again = probe(link, url)
        assert again.returncode == 0, again.stderr
    finally:
        holder.kill()
        holder.communicate(timeout=10)  # reaps it and closes the pipes


def test_namespace_is_removed_even_when_the_body_fails() -> None:
    with pytest.raises(RuntimeError, match="boom"), netns.network_namespace() as ns:
        sleeper = ns.popen(["sleep", "600"])  # no pipes: nothing to close
        ns.partition()
        raise RuntimeError("boom")
    assert ns.name not in netns.list_namespaces()
    assert subprocess.run(["ip", "link", "show", ns.host_if], capture_output=True).returncode != 0
    assert sleeper.wait(timeout=10) != 0  # killed, not left running in a deleted namespace

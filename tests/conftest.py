"""Shared fixtures: a real PostgreSQL for the session and a fresh migrated database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from leoflow.settings import Settings, load_settings
from tests.harness.hang_dump import dump_if_hung
from tests.harness.leftovers import LeftoverTasks
from tests.harness.postgres import PostgresServer, session_server

# Hypothesis profiles. The default keeps property tests to seconds each on a loaded 2-core host
# (no deadline: timing is the machine's, not the code's); `--hypothesis-profile=long` runs
# fifty times as many examples for a deeper search by hand.
hypothesis_settings.register_profile("default", max_examples=60, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
hypothesis_settings.register_profile("long", max_examples=3_000, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
hypothesis_settings.load_profile("default")

#: Test files that change the host's network (namespaces, veth pairs, iptables) and the browser
#: tests, whose Chromium aborts page loads with ERR_NETWORK_CHANGED when an interface appears:
#: they share one xdist worker, so they never run at the same time.
NETWORK_SENSITIVE = ("tests/chaos/test_netns.py", "tests/chaos/test_chaos_short.py", "tests/dashboard/test_browser.py",
                     "tests/dashboard/test_sso_browser.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One xdist group per test file (``--dist loadgroup``), except the network-sensitive files."""
    for item in items:
        path = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("network-sensitive" if path in NETWORK_SENSITIVE else path))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with session_server() as server:
        yield server


@pytest.fixture
def database_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh database at the head migration, private to this test."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture
def empty_database_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh database with no schema at all."""
    url = pg_server.create_database(template=None, prefix="empty")
    yield url
    pg_server.drop_database(url)


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings for a process talking to this test's database (fast timings for tests)."""
    return load_settings({
        "LEOFLOW_DATABASE_URL": database_url,
        "LEOFLOW_NODE_ID": "test-node",
        "LEOFLOW_LOG_FORMAT": "text",
    })


@pytest.fixture(autouse=True)
def tasks_dumped_if_hung(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test about to hit pytest-timeout prints its asyncio tasks' stacks (tests/harness/hang_dump.py)."""
    timeout = float(request.config.getini("timeout") or 0)
    if timeout <= 60:
        yield
        return
    with dump_if_hung(timeout - 30):
        yield


@pytest.fixture(autouse=True)
def no_tasks_left_behind() -> Iterator[None]:
    """Fail any test whose event loop still runs tasks when ``asyncio.run`` closes it.

    ``asyncio.run`` silently cancels whatever is left; a task nobody stopped is a leak in the
    code under test (a loop its owner forgot, a task without a guard). Like kopf's test suite,
    we make that visible: the names of the leftovers are the failure message.
    """
    with LeftoverTasks().watching() as leftovers:
        yield
    assert not leftovers.names, f"asyncio tasks left running when the test's event loop closed: {leftovers.names}"

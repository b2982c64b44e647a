"""Fixtures for the dashboard tests: a live Leoflow server and a real Chromium.

The server is ``leoflow standalone`` as an OS process (API, elector, scheduler and local
executor in one process) on a fresh migrated database of the session PostgreSQL. Until the
replica runtime exists (``leoflow.replica``), it falls back to the API app alone under uvicorn;
tests that need runs to execute then skip, naming what is missing.

The browser is Debian's ``/usr/bin/chromium`` driven by Playwright (``playwright install`` is
never run). Without it every browser test skips with the reason. Each test gets a fresh browser
context (fresh ``sessionStorage``: the token is typed again) and fails if the page logged any
console error or threw an uncaught exception.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.postgres import PostgresServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ADMIN_TOKEN = "dashboard-admin-token-0001"
READ_TOKEN = "dashboard-read-token-0001"
TOKENS = f"dash-admin:admin:{ADMIN_TOKEN},dash-reader:read:{READ_TOKEN}"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SERVER_START_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def replica_runtime_available() -> bool:
    return importlib.util.find_spec("leoflow.replica") is not None


@dataclass
class LiveServer:
    url: str
    #: True when a leader runs the scheduler and executor (runs reach a terminal state).
    runs_execute: bool
    log_path: Path | None
    #: The server's database (libpq URL), for tests that plant rows only an older release could write.
    database_url: str = ""

    def client(self, token: str = ADMIN_TOKEN) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, headers={"Authorization": f"Bearer {token}"})

    def log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-4000:]


def _wait_until(check: Callable[[], bool], timeout: float, what: str, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout:.0f}s; server output:\n{log()}")


def _standalone(database_url: str, home: Path) -> Iterator[LiveServer]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    env.update({
        "LEOFLOW_DATABASE_URL": database_url,
        "LEOFLOW_HOME": str(home),
        "LEOFLOW_API_TOKENS": TOKENS,
        "LEOFLOW_NODE_ID": "dashboard-test",
        "LEOFLOW_CLUSTER": "dashboard-test",
        "LEOFLOW_LOG_FORMAT": "text",
        "LEOFLOW_DB_POOL_SIZE": "4",
        # The run page's notification test posts to a receiver on this machine.
        "LEOFLOW_NOTIFY_ALLOWED_HOSTS": "public,127.0.0.1",
    })
    log_path = home / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "leoflow", "standalone", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    server = LiveServer(url=f"http://127.0.0.1:{port}", runs_execute=True, log_path=log_path,
                        database_url=database_url)
    try:
        with server.client() as client:
            _wait_until(lambda: proc.poll() is None and client.get("/readyz").status_code == 200,
                        SERVER_START_TIMEOUT, "leoflow standalone did not become ready", server.log_tail)
            _wait_until(lambda: client.get("/api/v2/cluster/leader").status_code == 200,
                        SERVER_START_TIMEOUT, "leoflow standalone did not elect itself leader", server.log_tail)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def api_settings(database_url: str, **extra: str) -> Any:
    from leoflow.settings import load_settings

    return load_settings({
        "LEOFLOW_DATABASE_URL": database_url, "LEOFLOW_API_TOKENS": TOKENS, "LEOFLOW_NODE_ID": "dashboard-test",
        "LEOFLOW_CLUSTER": "dashboard-test", "LEOFLOW_LOG_FORMAT": "text", "LEOFLOW_DB_POOL_SIZE": "4", **extra,
    })


@contextmanager
def serve_api(settings: Any) -> Iterator[str]:
    """``create_app(settings)`` under a real uvicorn in a thread; yields the base URL."""
    import uvicorn

    from leoflow.api.app import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"dashboard-uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _api_only(database_url: str) -> Iterator[LiveServer]:
    with serve_api(api_settings(database_url)) as url:
        yield LiveServer(url=url, runs_execute=False, log_path=None, database_url=database_url)


@pytest.fixture(scope="module")
def live_server(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server per test module (starting it is the slow part), on its own database."""
    database_url = pg_server.create_database()
    try:
        if replica_runtime_available():
            yield from _standalone(database_url, tmp_path_factory.mktemp("standalone-home"))
        else:
            yield from _api_only(database_url)
    finally:
        pg_server.drop_database(database_url)


def require_runs_execute(server: LiveServer) -> None:
    if not server.runs_execute:
        pytest.skip("no leader runtime yet (leoflow.replica is missing): runs cannot execute")


# --------------------------------------------------------------------------- browser

@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Module scope, not session: sync_playwright runs an event loop in this thread while it is
    # open, and every later test that calls asyncio.run() would fail with "cannot be called from a
    # running event loop".
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (CI's .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install -e '.[dev]')")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class PageProblems:
    """Console errors and uncaught exceptions a page produced.

    A test that provokes failed requests on purpose (an outage, a missing run) declares exactly
    which console lines it expects with :meth:`tolerate`; everything else still fails the test.
    """

    def __init__(self) -> None:
        self.items: list[str] = []
        #: The console errors that matched a tolerated pattern, kept for a failure's message (they
        #: may explain it).
        self.tolerated_seen: list[str] = []
        # Chromium aborts the requests in flight when any of the host's interfaces changes; the
        # partition tests create and delete veth pairs (tests/conftest.py keeps them in the
        # browser tests' xdist worker, so not at the same time, but the host may have others): a
        # fact of the test machine, not of the dashboard (whose polls retry, and whose loader
        # reloads the page when a module was lost).
        self._tolerated: list[tuple[str, str]] = [("net::ERR_NETWORK_CHANGED", "")]

    def tolerate(self, text: str, url_part: str) -> None:
        """Accept console errors containing ``text`` about a URL containing ``url_part``."""
        self._tolerated.append((text, url_part))

    def console(self, message: Any) -> None:
        if message.type == "error":
            location = message.location.get("url", "") if isinstance(message.location, dict) else ""
            line = f"{message.text} {location}".strip()
            if any(text in message.text and part in location for text, part in self._tolerated):
                self.tolerated_seen.append(line)
                return
            self.items.append(f"console error: {line}")

    def page_error(self, error: Any) -> None:
        self.items.append(f"uncaught exception: {error}")


@dataclass
class Browse:
    """A page in a fresh browser context, with what it logged."""

    page: Any
    problems: PageProblems
    viewport: dict[str, int]

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}-{self.viewport['width']}x{self.viewport['height']}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[..., Browse]]:
    """``open_page(viewport=DESKTOP)`` → a Browse; fails the test on any console error."""
    contexts: list[Any] = []
    watched: list[PageProblems] = []

    def make(viewport: dict[str, int] = DESKTOP) -> Browse:
        context = browser.new_context(viewport=viewport)
        context.set_default_timeout(30_000)
        contexts.append(context)
        page = context.new_page()
        problems = PageProblems()
        page.on("console", problems.console)
        page.on("pageerror", problems.page_error)
        watched.append(problems)
        return Browse(page=page, problems=problems, viewport=viewport)

    yield make
    for context in contexts:
        context.close()
    found = [item for problems in watched for item in problems.items]
    assert not found, "the dashboard logged errors:\n" + "\n".join(found)


def sign_in(browse: Browse, server: LiveServer, token: str = ADMIN_TOKEN, fragment: str = "#/cluster") -> None:
    from playwright.sync_api import expect

    page = browse.page
    page.goto(f"{server.url}/{fragment}")
    # The first page a worker loads also starts its browser's caches and the server's first
    # requests: on a loaded host that takes longer than playwright's default 5 s.
    try:
        expect(page.get_by_test_id("token-input")).to_be_visible(timeout=30_000)
    except AssertionError as exc:  # say what the page showed instead, and why it may have
        raise AssertionError(
            f"{exc}\npage text: {page.evaluate('document.body.innerText')[:500]!r}\n"
            f"console errors: {browse.problems.items}, tolerated: {browse.problems.tolerated_seen}\n"
            f"server log tail:\n{server.log_tail()[-1500:]}") from None
    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("token-submit").click()
    expect(page.get_by_test_id("scope")).to_be_visible()

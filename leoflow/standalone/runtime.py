"""Runs ``leoflow standalone``: lock the home, start the database, then the ordinary replica.

Order matters for the promises standalone mode makes:

1. **Instance lock first** — a second instance on the same home fails before touching anything.
2. **API port check** — a taken port is a one-line error, before a database is started.
3. **Watchdog** — spawned before PostgreSQL so that a SIGKILL at any later moment still stops it.
4. **PostgreSQL** (embedded, unless ``LEOFLOW_DATABASE_URL`` is set), migrations, admin token.
5. **Sample DAG** (``--example``), then the replica runtime of ``leoflow serve`` — the same code
   path as a cluster replica: the elector takes the advisory lock at start and holds it, and the
   scheduler and the local executor run as its leader services.

Shutdown (Ctrl-C / SIGTERM) is the replica's graceful handover; then PostgreSQL gets a fast
shutdown, the watchdog is dismissed and the lock released — in ``finally`` blocks, with further
signals ignored, so a second Ctrl-C cannot leave the server running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

from leoflow.db import migrations
from leoflow.errors import SettingsError
from leoflow.logging_setup import configure_logging, redact_url, url_secrets
from leoflow.settings import ApiToken, Settings
from leoflow.standalone import watchdog
from leoflow.standalone.config import display_url, needs_generated_token, standalone_settings
from leoflow.standalone.home import StandaloneHome
from leoflow.standalone.instance import InstanceLock
from leoflow.standalone.postgres import StandalonePostgres
from leoflow.standalone.token import ensure_admin_token

logger = logging.getLogger(__name__)

#: How long the banner thread waits for the API to answer before giving up on announcing it.
_READY_WAIT = 120.0


@dataclass(frozen=True)
class StandaloneOptions:
    host: str
    port: int
    #: The sample DAG to apply and trigger (a file stem of ``leoflow/examples/``), or None.
    example: str | None
    #: Where ``port`` came from, named in the error when it is taken: ``--port``, ``LEOFLOW_PORT``,
    #: or None for the default.
    port_source: str | None = None


def _check_port_free(host: str, port: int, source: str | None = None) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            taken = f"port {port}{'' if source else ' (the default)'} on {host} is not available ({exc.strerror})"
            raise SettingsError(source or "port", f"{taken}; choose another with --port") from None


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """Cleanup must finish: a second Ctrl-C while stopping PostgreSQL would orphan it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def banner(*, url: str, data: str, token: ApiToken | None, generated: bool, example: str | None) -> str:
    lines = [f"Leoflow standalone is ready at {url}", f"  data:  {data}"]
    if token is not None and generated:
        lines.append(f"  token: {token.token}   (admin; stored in the data dir, mode 0600)")
    elif token is None:
        lines.append("  auth:  disabled (LEOFLOW_AUTH=disabled)")
    else:
        lines.append("  token: from LEOFLOW_API_TOKENS")
    if example:
        lines.append(f"  example run queued: {example}")
    lines.append(f"  CLI:   export LEOFLOW_URL={url}" + (" LEOFLOW_TOKEN=<token above>" if token else ""))
    lines.append(f"         leoflow runs list {example.split(' / ')[0]}" if example else "         leoflow dags list")
    return "\n".join(lines)


def _announce_when_ready(url: str, text: str, out: TextIO) -> threading.Thread:
    """Print the banner once the API answers ``/readyz`` (the replica has no ready callback)."""
    def wait_and_print() -> None:
        deadline = time.monotonic() + _READY_WAIT
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                    if response.status == 200:
                        print(text, file=out, flush=True)
                        return
            except OSError:
                pass
            time.sleep(0.05)
        logger.warning("the API did not become ready", extra={"url": url})

    thread = threading.Thread(target=wait_and_print, name="standalone-banner", daemon=True)
    thread.start()
    return thread


def _preload_runtime(settings: Settings) -> threading.Thread:
    """Import what the replica will need while PostgreSQL starts (a separate process, so the two
    overlap) instead of after it: about a second off a warm start on a slow machine. The list is
    the replica's own (:func:`leoflow.replica.modules_to_preload`)."""
    def preload() -> None:
        from leoflow import replica
        from leoflow.standalone import example  # noqa: F401 — imported for its import time only

        replica.preload(settings)

    thread = threading.Thread(target=preload, name="standalone-preload", daemon=True)
    thread.start()
    return thread


def _migrate(database_url: str) -> None:
    migrations.upgrade(database_url)  # DatabaseUnavailable (one line for the CLI) when unreachable


def run_standalone(settings: Settings, options: StandaloneOptions, *,
                   run_replica: Callable[[Settings], int] | None = None, out: TextIO = sys.stdout) -> int:
    """The whole standalone lifecycle; returns the process exit code."""
    started = time.monotonic()
    # Until the replica installs its own handlers, SIGTERM must unwind through our cleanup too.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    home = StandaloneHome.at(settings.home)
    home.create()
    url = display_url(options.host, options.port)
    lock = InstanceLock(home.lock_file)
    lock.acquire(url=url)
    guard: watchdog.WatchdogProcess | None = None
    postgres: StandalonePostgres | None = None
    try:
        _check_port_free(options.host, options.port, options.port_source)
        preload = _preload_runtime(settings.replace(executor=dataclasses.replace(settings.executor, kind="local")))
        if settings.database.url:
            database_url = settings.database.url
            _migrate(database_url)
            data_where = f"{redact_url(database_url)} (LEOFLOW_DATABASE_URL)"
        else:
            postgres = StandalonePostgres(home, reserved=frozenset({options.port}))
            guard = watchdog.spawn(home.data_dir, home.socket_dir, lock_fd=lock.fd)
            database_url = postgres.start()
            data_where = str(home.root)
        generated = needs_generated_token(settings)
        admin = ensure_admin_token(home.token_file) if generated else None
        if admin is not None:  # the generated token must never reach a log line either
            configure_logging(fmt=settings.logging.format, level=settings.logging.level,
                              node_id=settings.cluster.node_id,
                              secrets=[admin.token, *(t.token for t in settings.api.tokens),
                                       *settings.notify.secrets(), *url_secrets(settings.database.url)])
        effective = standalone_settings(settings, database_url=database_url, host=options.host,
                                        port=options.port, admin_token=admin)
        example_run = None
        if options.example:
            from leoflow.standalone.example import apply_example

            run = apply_example(effective, options.example)
            example_run = f"{run.dag_id} / {run.run_id}"
        token = effective.api.tokens[0] if effective.api.tokens else None
        preload.join()
        logger.info("standalone starting the replica", extra={
            "url": url, "startup_seconds": round(time.monotonic() - started, 3)})
        _announce_when_ready(url, banner(url=url, data=data_where, token=token, generated=generated,
                                         example=example_run), out)
        return (run_replica or _serve)(effective)
    finally:
        with _signals_ignored():
            if postgres is not None:
                postgres.stop()
            if guard is not None:
                watchdog.dismiss(guard)
            lock.release()


def _serve(settings: Settings) -> int:
    """The replica runtime of ``leoflow serve``: it handles SIGTERM/SIGINT as a graceful handover."""
    from leoflow.replica import run

    return run(settings)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)

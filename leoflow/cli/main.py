"""Entry point of the ``leoflow`` command.

Each command (a noun: ``dags``, ``runs``, ``tasks``, ...) lives in its own module exposing
``register(subparsers)``, which declares the command once (:func:`leoflow.cli.verbs.noun`)
with all its verbs. A verb's handler receives the parsed arguments and the settings loaded
once here: the full :class:`~leoflow.settings.Settings` for the server-side verbs (``serve``,
``standalone``, ``db``), only :class:`~leoflow.settings.ClientSettings` for the client verbs
(marked ``client=True`` by :func:`leoflow.cli.verbs.verb`), which must start at once and so
load neither the server's settings groups nor the logging setup
(``tests/cli/test_import_graph.py``). Errors never escape as tracebacks: configuration
problems print one line and exit 2, other Leoflow errors print one line and exit 1; every
secret the environment configures is masked. A reader that stops early (``leoflow dags show
X -o json | head``) ends the command quietly with the shell's code for SIGPIPE, 141.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from leoflow import __version__
from leoflow.errors import LeoflowError, SettingsError

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings, Settings

#: The native module whose runtime must not see the interpreter finalize (_exit_before_finalization).
RUNTIME_MODULE = "obstore"

#: One module per command, in the order ``leoflow --help`` lists them.
COMMAND_MODULES = (
    "leoflow.cli.db",
    "leoflow.cli.standalone",
    "leoflow.cli.serve",
    "leoflow.cli.dags",
    "leoflow.cli.runs",
    "leoflow.cli.tasks",
    "leoflow.cli.backfills",
    "leoflow.cli.pools",
    "leoflow.cli.data.datasets",
    "leoflow.cli.access.tokens",
    "leoflow.cli.templates",
    "leoflow.cli.cluster",
    "leoflow.cli.notifications",
    "leoflow.cli.audit",
    "leoflow.cli.server",
    "leoflow.cli.access.login",
    "leoflow.cli.data.artifacts",
)
#: The exit code of a command whose reader went away, as a shell reports death by SIGPIPE (128 + 13).
BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (its default), without the usage dump on errors."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"leoflow: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leoflow", description="Leoflow: a workflow scheduler for Kubernetes "
                     "with a Postgres metadata store.")
    parser.add_argument("--version", action="version", version=f"leoflow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _fail(message: str, code: int, secrets: Sequence[str] = ()) -> int:
    from leoflow.logging_setup import redact_text

    print(f"leoflow: error: {redact_text(message, secrets)}", file=sys.stderr)
    return code


def _secrets(settings: Settings) -> list[str]:
    """What must never be printed: API tokens and the database URL's passwords."""
    from leoflow.logging_setup import url_secrets

    return [*(t.token for t in settings.api.tokens), *settings.notify.secrets(), *url_secrets(settings.database.url)]


def _environment_secrets() -> list[str]:
    """A client verb's error path: every secret the full settings would know, or none if they do not load.

    Loaded only when a client verb fails, so that its error line masks exactly what a server
    verb's would (the server's tokens, the notification secrets, the database URL's passwords;
    the caller adds the client token); the cost does not matter on the way out.
    """
    from leoflow.settings import load_settings

    try:
        settings = load_settings()
    except LeoflowError:
        return []
    return _secrets(settings)


def main(argv: Sequence[str] | None = None) -> int:
    code = _main_flushed(argv)
    if argv is None and RUNTIME_MODULE in sys.modules:
        _exit_before_finalization(code)
    return code


def _main_flushed(argv: Sequence[str] | None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            # Flushed here, not at interpreter exit, where a closed pipe would print a traceback.
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): what is left to print has no reader. Point stdout at
        # /dev/null so that the interpreter's own flush at exit does not fail a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE


def _exit_before_finalization(code: int) -> NoReturn:
    """End the process with ``code`` without tearing the interpreter down.

    Why: the object-storage client (``obstore``) runs a Tokio runtime whose worker threads are
    never told to stop; one still busy while ``Py_Finalize`` frees the interpreter's state panics
    on a thread with no Python frame to catch it, and Rust aborts the process (SIGABRT, exit 134)
    after the command had finished — about 2 runs in 100 of a failed ``leoflow artifacts fetch``
    here. For the init container and the sidecar that exit code is the verdict on the pod, and a
    replica stopped gracefully must not look crashed. Everything the command owns is closed by
    then (servers, database pools, tracing — :mod:`leoflow.replica` shuts it down itself), so
    only the standard streams and the log handlers are left to flush. Only when ``main`` is the
    process's entry point (``argv`` is None): a test calling ``main([...])`` keeps its process.
    """
    import logging

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "client", False):
        return _run_client_verb(args)
    # Imported once the arguments parsed: ``--help``, ``--version`` and usage errors exit above
    # without loading the settings and logging modules (a third of the CLI's import time).
    from leoflow.logging_setup import configure_logging
    from leoflow.settings import load_settings

    secrets: list[str] = []
    try:
        settings: Settings = load_settings()
        override = getattr(args, "apply_overrides", None)
        if override is not None:
            settings = override(args, settings)
        secrets = _secrets(settings)
        if getattr(args, "configure_logging", True):
            configure_logging(fmt=settings.logging.format, level=settings.logging.level,
                              node_id=settings.cluster.node_id, secrets=secrets)
        result = args.handler(args, settings)
        return int(result or 0)
    except SettingsError as exc:
        return _fail(str(exc), 2, secrets)
    except LeoflowError as exc:
        return _fail(str(exc), 1, secrets)
    except KeyboardInterrupt:
        return 130


def _run_client_verb(args: argparse.Namespace) -> int:
    """A client verb: only the client's settings, no logging setup (it prints, it does not log)."""
    from leoflow.settings.client import load_client_settings

    token: list[str] = []
    try:
        client: ClientSettings = load_client_settings()
        if not client.token:
            # A live local standalone serving exactly LEOFLOW_URL lends its stored admin token
            # (never sent to any other server). Imported only here: it reads files, hashes.
            from leoflow.standalone.discovery import with_local_token

            client = with_local_token(client)
        if not client.token and getattr(args, "stored_login", True):
            # A person's sign-in stored by `leoflow login` for exactly this URL (refreshed when due).
            from leoflow.client.credentials import stored_bearer

            bearer = stored_bearer(client.url)
            client = client._replace(token=bearer) if bearer else client
        token = [client.token] if client.token else []
        return int(args.handler(args, client) or 0)
    except SettingsError as exc:
        return _fail(str(exc), 2, [*_environment_secrets(), *token])
    except LeoflowError as exc:
        return _fail(str(exc), 1, [*_environment_secrets(), *token])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

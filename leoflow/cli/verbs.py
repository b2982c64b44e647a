"""Declaring the command line: a noun (``dags``, ``runs``, ...) once, then its verbs.

Each noun module (:mod:`.dags`, :mod:`.runs`, :mod:`.tasks`, ...) calls :func:`noun` exactly
once, with the help ``leoflow --help`` shows for it; declaring a noun twice is a programming
error, caught when any command line is parsed. A client verb declares the API operations it
calls (``"GET /api/v2/dags"``); ``tests/cli/test_completeness.py`` walks the OpenAPI document
and fails when an operation has no verb, and runs every verb against a live server to check the
declarations are true. Handlers receive the parsed arguments and only
:class:`~leoflow.settings.ClientSettings` (see :mod:`leoflow.cli.main`), and speak to the API
through the typed client (:func:`connect`), the one a script uses.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import add_output, usage

if TYPE_CHECKING:
    from leoflow.client.typed import Client
    from leoflow.settings import ClientSettings


def noun(sub: Any, name: str, help: str) -> Any:
    """Add the command ``name`` and return the action its verbs are added to."""
    if name in sub.choices:
        raise AssertionError(f"the command {name!r} is declared twice")
    parser = sub.add_parser(name, help=help, description=help)
    verbs = parser.add_subparsers(dest=f"{name}_command", metavar="VERB", parser_class=type(parser))
    verbs.required = True
    return verbs


def verb(verbs: Any, name: str, help: str, handler: Any, *operations: str, output: bool = True,
         **defaults: Any) -> argparse.ArgumentParser:
    """Add a client verb that calls ``operations``; it takes ``--output`` unless ``output`` is False."""
    parser: argparse.ArgumentParser = verbs.add_parser(name, help=help, description=help)
    parser.set_defaults(handler=handler, client=True, configure_logging=False, operations=operations, **defaults)
    if output:
        add_output(parser)
    return parser


def connect(client: ClientSettings) -> Client:
    """The typed API client for a verb, configured as the verb was (URL, token of the stored login or standalone).

    Without the client's own retries (``retries=0``): a verb says at once what the API answered,
    and the verbs that follow something ride out outages themselves (:mod:`leoflow.client.waiting`).
    """
    from leoflow.client.typed import Client

    return Client(endpoint=client, retries=0)


def check_limit(value: int) -> int:
    """``--limit``, which argparse reads as any integer: at least 1 (else one line, exit 2)."""
    if value < 1:
        usage("--limit must be at least 1")
    return value

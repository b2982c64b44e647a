"""``leoflow serve [--host H] [--port P]``: one replica (API + elector + leader-only services).

Refuses to start without API tokens unless ``LEOFLOW_AUTH=disabled``, and without
``LEOFLOW_DATABASE_URL`` (one line, exit 2). Runs until SIGTERM/SIGINT, then hands leadership
over gracefully and exits 0 (see :mod:`leoflow.replica`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from leoflow.errors import SettingsError

if TYPE_CHECKING:
    from leoflow.settings import Settings


def register(sub: Any) -> None:
    parser = sub.add_parser("serve", help="run a replica: HTTP API, leader election, leader-only services")
    parser.add_argument("--host", help="address to listen on (default: LEOFLOW_HOST)")
    parser.add_argument("--port", type=port_argument, help="port to listen on (default: LEOFLOW_PORT)")
    parser.set_defaults(handler=serve, apply_overrides=_overrides)


def port_argument(value: str) -> int:
    """argparse type for ``--port`` (shared by ``serve`` and ``standalone``)."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port must be an integer, got {value!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"--port must be between 1 and 65535, got {port}")
    return port


def _overrides(args: argparse.Namespace, settings: Settings) -> Settings:
    import dataclasses  # here, not at the top: every verb's parser imports this module

    api = settings.api
    if args.host:
        api = dataclasses.replace(api, host=args.host)
    if args.port:
        api = dataclasses.replace(api, port=args.port)
    return settings.replace(api=api)


def serve(args: argparse.Namespace, settings: Settings) -> int:
    from leoflow.api.auth import ensure_auth_configured

    ensure_auth_configured(settings)
    if not settings.database.url:
        raise SettingsError("LEOFLOW_DATABASE_URL", "is not set (expected postgresql://...); "
                            "`leoflow standalone` runs without one")
    from leoflow import replica

    return replica.run(settings)

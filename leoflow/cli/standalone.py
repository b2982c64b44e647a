"""``leoflow standalone``: the whole of Leoflow in one process, with an embedded PostgreSQL.

See :mod:`leoflow.standalone.runtime` for what runs and in which order. Exit codes: 0 after a
clean stop (Ctrl-C / SIGTERM), 1 when another instance runs on the same ``LEOFLOW_HOME`` or the
database cannot be started, 2 for a bad setting or flag (e.g. the port is taken).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from leoflow.cli.serve import port_argument

if TYPE_CHECKING:
    from leoflow.settings import Settings

#: Standalone serves one person on one machine: loopback only unless --host says otherwise.
DEFAULT_HOST = "127.0.0.1"


#: The sample DAGs in ``leoflow/examples/`` (file stems; a test keeps this list equal to the folder).
#: Named here, not read from the package, so that parsing a command line reads no files.
EXAMPLES = ("example", "conditional", "cleanup_and_alert", "fan_out", "datasets", "daily_when_data")

def register(sub: Any) -> None:
    p = sub.add_parser(
        "standalone", help="run everything in one process with an embedded PostgreSQL",
        description="Run the API, the elector, the scheduler and a local subprocess executor in one "
                    "process. Without LEOFLOW_DATABASE_URL an embedded PostgreSQL keeps its data under "
                    "LEOFLOW_HOME. Stop with Ctrl-C.")
    p.add_argument("--port", type=port_argument, default=None, help="API port (default: LEOFLOW_PORT, else 8080)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"API listen address (default: {DEFAULT_HOST}; use 0.0.0.0 to expose it)")
    p.add_argument("--example", nargs="?", const=EXAMPLES[0], default=None, choices=EXAMPLES, metavar="NAME",
                   help="apply a sample DAG shipped with Leoflow and trigger one run of it: "
                        f"{', '.join(EXAMPLES)} (default {EXAMPLES[0]})")
    p.set_defaults(handler=standalone)


def standalone(args: argparse.Namespace, settings: Settings) -> int:
    from leoflow.settings import declared
    from leoflow.standalone.runtime import StandaloneOptions, run_standalone

    # The error for a taken port names what chose it: the flag, the variable, or neither (the default).
    # Settings are read once, by the loader: a port other than the default came from the variable.
    source = "--port" if args.port else declared.PORT.name if settings.api.port != declared.PORT.default else None
    options = StandaloneOptions(host=args.host, port=args.port or settings.api.port, example=args.example,
                                port_source=source)
    return run_standalone(settings, options)

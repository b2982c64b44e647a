"""How client verbs print: tables and short lines for people, JSON or YAML for scripts.

Every client verb takes ``-o/--output table|json|yaml`` (:func:`leoflow.cli.verbs.verb` adds
it). ``table`` (the default) is the human form: a table for a list, aligned ``name: value``
lines for one record, one line for a write. ``json`` prints what the API answered as is — for a
write, the object it wrote (the new run, the pool, the plan of a sync), so a script can learn an
id — and ``yaml`` the same value as YAML. A reader that goes away early (``| head``) is handled
once, in :func:`leoflow.cli.main.main`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

#: The choices of ``--output``; the first is the default.
OUTPUTS = ("table", "json", "yaml")


def add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=OUTPUTS[0],
                        help="table (default): for people; json or yaml: the API's answer, for scripts")


def table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def short(ts: str | None) -> str:
    return "-" if not ts else ts.replace("T", " ")[:19]


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def print_yaml(value: Any) -> None:
    import yaml  # a few milliseconds: only for the verbs asked --output yaml

    yaml.safe_dump(value, sys.stdout, sort_keys=False, allow_unicode=True, default_flow_style=False)


def for_scripts(args: argparse.Namespace) -> bool:
    """Whether the verb was asked for JSON or YAML (then it prints one document, nothing else)."""
    return getattr(args, "output", "table") in ("json", "yaml")


def plain(value: Any) -> Any:
    """``value`` with the typed client's results (:class:`leoflow.client.results.Model`) as the JSON they wrap."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def emitted(args: argparse.Namespace, value: Any) -> bool:
    """Print ``value`` as JSON or YAML when the verb was asked to; whether it did."""
    output = getattr(args, "output", "table")
    value = plain(value)
    if output == "json":
        print_json(value)
    elif output == "yaml":
        print_yaml(value)
    else:
        return False
    return True


def usage(message: str) -> NoReturn:
    """A usage problem argparse cannot see: one line, exit 2 (as argparse's own)."""
    print(f"leoflow: error: {message}", file=sys.stderr)
    raise SystemExit(2)

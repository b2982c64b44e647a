"""``leoflow templates apply|list|get|delete``: cluster templates, shared task shapes (via the HTTP API).

A cluster template is a task's shape — image, command, args with ``{{ inputs.X }}``, pod settings —
that DAGs use as ``uses: cluster/NAME@V`` (or ``cluster/NAME``, the newest when the DAG is
applied); the DAG inlines it at apply, so a DAG version keeps the copy it was applied with.
``apply FILE`` (``-``: stdin) stores each document of the file (each names itself with ``name:``)
as the template's next version, or says ``unchanged`` when it is the newest one already.
``delete`` marks every version deleted: DAGs applied with it keep their copy.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, for_scripts, short, table, usage
from leoflow.cli.verbs import connect, noun, verb
from leoflow.client.api import Api, ClientError, q

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

TEMPLATE = "/api/v2/templates/{name}"
STDIN = "-"


def register(sub: Any) -> None:
    templates = noun(sub, "templates", "cluster templates: task shapes DAGs use as cluster/NAME (via the HTTP API)")
    apply = verb(templates, "apply", "store templates from a YAML/JSON file ('-' reads stdin); each document "
                 "names itself (name:)", templates_apply, f"PUT {TEMPLATE}")
    apply.add_argument("file", metavar="FILE", help="template file (YAML, several documents allowed; JSON), or -")
    verb(templates, "list", "every template's newest version", templates_list, "GET /api/v2/templates")
    get = verb(templates, "get", "one template: its newest (or --version) document", templates_get,
               f"GET {TEMPLATE}")
    get.add_argument("name", metavar="NAME")
    get.add_argument("--version", type=int, help="this version instead of the newest")
    delete = verb(templates, "delete", "delete a template, every version (DAGs applied with it keep their copy)",
                  templates_delete, f"DELETE {TEMPLATE}")
    delete.add_argument("name", metavar="NAME")


def templates_apply(args: argparse.Namespace, client: ClientSettings) -> int:
    from leoflow.model.files.documents import DocumentError, load_documents

    name = "<stdin>" if args.file == STDIN else args.file
    try:
        if args.file == STDIN:
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8-sig") as handle:
                text = handle.read()
        documents = load_documents(name, text)
    except OSError as exc:
        usage(f"{name}: cannot read ({exc.strerror})")
    except (DocumentError, UnicodeDecodeError) as exc:
        usage(str(exc))
    if not documents:
        usage(f"{name}: contains no template")
    stored: list[dict[str, Any]] = []
    failed = 0
    with Api(client) as api:
        for document in documents:
            body = document.data
            template = body.get("name") if isinstance(body, dict) else None
            if not isinstance(template, str) or not template:
                print(f"leoflow: error: {document.error('name', 'is required (the template name)', several=True)}",
                      file=sys.stderr)
                failed += 1
                continue
            try:
                answer = api.request("PUT", f"/api/v2/templates/{q(template)}", ok=(200, 201), json=body)
            except ClientError as exc:
                field = exc.details.get("field") if isinstance(exc.details, dict) else None
                problem = str(exc).removeprefix(f"{field}: ") if field else str(exc)
                shown = document.error(field, problem, several=len(documents) > 1) if isinstance(field, str) \
                    else f"{name}: {template}: {exc}"
                print(f"leoflow: error: {shown}", file=sys.stderr)
                failed += 1
                continue
            found = answer.json()
            stored.append(found)
            if not for_scripts(args):
                verb_ = "stored" if answer.status_code == 201 else "unchanged"
                print(f"cluster/{found['name']}: {verb_} (version {found['version']})")
    emitted(args, stored)
    return 1 if failed else 0


def templates_list(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        items = api.list_cluster_templates().items
    if emitted(args, items):
        return 0
    table([[f"cluster/{t['name']}", str(t["version"]), str(t["versions"]), short(t["created_at"]), t["created_by"]]
           for t in items], ["TEMPLATE", "NEWEST", "VERSIONS", "CREATED", "BY"])
    return 0


def templates_get(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        found = api.get_cluster_template(args.name, version=args.version)
    if emitted(args, found):
        return 0
    from leoflow.model.files.yaml_loader import dump_yaml

    print(f"template: cluster/{found['name']} (version {found['version']}, {short(found['created_at'])}, "
          f"by {found['created_by']})")
    print(dump_yaml({"name": found["name"], **found["spec"]}), end="")
    return 0


def templates_delete(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        api.delete_cluster_template(args.name)
    if not emitted(args, {"name": args.name, "deleted": True}):
        print(f"deleted cluster/{args.name} (DAG versions that use it keep their copy)")
    return 0

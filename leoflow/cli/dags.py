"""``leoflow dags show|versions|replace``: a DAG's spec, its history, and a one-DAG write (apply, sync and
delete are in :mod:`leoflow.cli.dags_sync`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leoflow.cli.api import Api, ClientError, dag_path, emitted_json, group, short, table, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    dags = group(sub, "dags", "apply, list, show, pause DAGs; backfill them (via the HTTP API)")
    show = verb(dags, "show", "show a DAG: its state and its current spec (or an older version's)", dags_show,
                "GET /api/v2/dags/{dag_id}", "GET /api/v2/dags/{dag_id}/versions/{version}", read=True)
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("--version", type=int, help="show this version's spec instead of the current one")
    versions = verb(dags, "versions", "list a DAG's versions, newest first", dags_versions,
                    "GET /api/v2/dags/{dag_id}/versions", read=True)
    versions.add_argument("dag_id", metavar="DAG")
    replace = verb(dags, "replace", "create or update exactly DAG from one spec file (refuses another dag_id)",
                   dags_replace, "PUT /api/v2/dags/{dag_id}")
    replace.add_argument("dag_id", metavar="DAG")
    replace.add_argument("file", metavar="FILE", help="one DAG spec (YAML or JSON)")


def dags_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        dag = api.json("GET", dag_path(args.dag_id))
        version = None
        if args.version is not None:
            version = api.json("GET", f"{dag_path(args.dag_id)}/versions/{args.version}")
    if emitted_json(args, version if version is not None else dag):
        return 0
    spec = version["spec"] if version is not None else dag["spec"]
    print(f"dag:      {dag['dag_id']}" + (" (paused)" if dag["paused"] else ""))
    print(f"schedule: {dag['schedule'] or 'manual only'}   next run: {short(dag['next_run_at'])}")
    shown = f"{version['version']} (current is {dag['version']})" if version is not None else dag["version"]
    print(f"version:  {shown}")
    print()
    print(json.dumps(spec, indent=2))
    return 0


def dags_versions(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        items = api.pages(f"{dag_path(args.dag_id)}/versions")
    if emitted_json(args, items):
        return 0
    table([[str(v["version"]) + (" *" if v["current"] else ""), short(v["created_at"]), str(v["runs"]),
            (v["spec_hash"] or "-")[:12]] for v in items], ["VERSION", "CREATED", "RUNS", "HASH"])  # null: read token
    return 0


def dags_replace(args: argparse.Namespace, client: ClientSettings) -> int:
    path = Path(args.file)
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ClientError(f"{path}: cannot read ({exc.strerror})") from None
    kind = "application/json" if path.suffix == ".json" else "application/yaml"
    with Api(client) as api:
        answer = api.request("PUT", dag_path(args.dag_id), ok=(200, 201), content=content,
                             headers={"Content-Type": kind})
    dag = answer.json()
    print(f"{dag['dag_id']}: {'applied' if answer.status_code == 201 else 'unchanged'} (version {dag['version']})")
    return 0

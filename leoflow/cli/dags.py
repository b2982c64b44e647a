"""``leoflow dags ...``: DAGs — list, show, versions, pause, apply, sync, replace, delete, backfill.

The verbs that read or flip one DAG live here; the DAGs-as-code verbs (``apply``, ``sync``,
``delete``) in :mod:`.dag_files` and ``backfill`` with the other backfill verbs in
:mod:`.backfills`, all declared below under the one ``dags`` command.

``dags show`` prints a compact view by default — the DAG's state and one line per task, in
the DAG's order — because the API stores the spec with every default filled in (about a
hundred lines for a small DAG); ``--output json|yaml`` prints that full form.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leoflow.cli import backfills, dag_files
from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import check_limit, noun, verb
from leoflow.client.api import Api, ClientError, dag_path

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    dags = noun(sub, "dags", "apply, sync, list, show, pause, delete DAGs; backfill them (via the HTTP API)")
    dag_files.register(dags)
    listing = verb(dags, "list", "list DAGs by id (every one, or --limit), filtered by state, prefix, paused",
                   dags_list, "GET /api/v2/dags")
    either = listing.add_mutually_exclusive_group()
    either.add_argument("--paused", dest="paused", action="store_const", const="true", help="only paused DAGs")
    either.add_argument("--active", dest="paused", action="store_const", const="false", help="only unpaused DAGs")
    listing.add_argument("--prefix", help="only DAGs whose id starts with PREFIX (literally)")
    listing.add_argument("--state", help="only DAGs whose last run is in STATE (queued, running, success, failed, "
                         "cancelled), or none: DAGs that never ran")
    listing.add_argument("--limit", type=int, help="most DAGs to show (default: every one)")
    for name, paused in (("pause", True), ("unpause", False)):
        p = verb(dags, name, f"{name} a DAG" + (" (no new scheduled runs)" if paused else ""), dags_pause,
                 "PATCH /api/v2/dags/{dag_id}", paused=paused)
        p.add_argument("dag_id", metavar="DAG")
    show = verb(dags, "show", "show a DAG: its state and its tasks (--output json|yaml: the full current spec, "
                "or an older version's)", dags_show,
                "GET /api/v2/dags/{dag_id}", "GET /api/v2/dags/{dag_id}/versions/{version}")
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("--version", type=int, help="show this version's spec instead of the current one")
    versions = verb(dags, "versions", "list a DAG's versions, newest first", dags_versions,
                    "GET /api/v2/dags/{dag_id}/versions")
    versions.add_argument("dag_id", metavar="DAG")
    replace = verb(dags, "replace", "create or update exactly DAG from one spec file (refuses another dag_id)",
                   dags_replace, "PUT /api/v2/dags/{dag_id}")
    replace.add_argument("dag_id", metavar="DAG")
    replace.add_argument("file", metavar="FILE", help="one DAG spec (YAML or JSON)")
    backfills.register_dags_backfill(dags)


def schedule_text(schedule: object) -> str:
    """One cell for a schedule as the API shows it: the cron, ``datasets all: URI, URI`` or ``-``."""
    if isinstance(schedule, dict) and isinstance(schedule.get("datasets"), dict):
        return "; ".join(f"datasets {mode}: {', '.join(map(str, uris))}" for mode, uris in schedule["datasets"].items())
    if isinstance(schedule, str) and schedule:
        return schedule
    return "-" if schedule is None else json.dumps(schedule, separators=(",", ":"))


def dags_list(args: argparse.Namespace, client: ClientSettings) -> int:
    """Every page the filters give (a filtered page may be short: the server bounds each request's work)."""
    params = {"paused": args.paused, "prefix": args.prefix, "state": args.state}
    limit = None if args.limit is None else check_limit(args.limit)
    with Api(client) as api:
        dags = api.pages("/api/v2/dags", {k: v for k, v in params.items() if v is not None}, limit=limit)
    if emitted(args, dags):
        return 0
    table([[d["dag_id"], "yes" if d["paused"] else "no", schedule_text(d["schedule"]), str(d["version"]),
            d.get("last_run_state") or "-", "stopped" if d.get("schedule_error") else short(d["next_run_at"]),
            d.get("source") or "-"]
           for d in dags],
          ["DAG", "PAUSED", "SCHEDULE", "VERSION", "LAST RUN", "NEXT RUN", "SOURCE"])
    for d in dags:
        if d.get("schedule_error"):
            print(f"{d['dag_id']}: schedule stopped: {d['schedule_error']}")
    return 0


def dags_pause(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        dag = api.json("PATCH", dag_path(args.dag_id), json={"paused": args.paused})
    if not emitted(args, dag):
        print(f"{dag['dag_id']}: {'paused' if dag['paused'] else 'unpaused'}")
    return 0


def dag_order(tasks: list[dict[str, Any]]) -> list[str]:
    """Task ids upstreams first, as the dashboard orders them (``topoOrder`` in ``static/js/graph.js``).

    Kahn's algorithm over the spec's task list, ties broken by the order the tasks are written
    in; tasks on a cycle (a stored spec has none) come last.
    """
    ids = [t["id"] for t in tasks]
    known = set(ids)
    indegree = {t["id"]: len([d for d in t.get("depends_on") or [] if d in known]) for t in tasks}
    downstream: dict[str, list[str]] = {i: [] for i in ids}
    for t in tasks:
        for d in t.get("depends_on") or []:
            if d in downstream:
                downstream[d].append(t["id"])
    queue = [i for i in ids if indegree[i] == 0]
    order: list[str] = []
    while queue:
        node = queue.pop(0)
        order.append(node)
        for nxt in downstream[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue.append(nxt)
    placed = set(order)
    return order + [i for i in ids if i not in placed]


def in_dag_order(items: list[dict[str, Any]], spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Task instances sorted as their DAG lists its tasks; ids the spec lacks keep their order, last."""
    rank = {task_id: i for i, task_id in enumerate(dag_order((spec or {}).get("tasks") or []))}
    return sorted(items, key=lambda t: rank.get(t["task_id"], len(rank)))


def _task_line(task: dict[str, Any]) -> list[str]:
    if task.get("kind") == "empty":
        what = "(empty)"
    else:
        command = " ".join([*(task.get("command") or []), *(task.get("args") or [])])
        what = f"{task.get('image', '')}  {command}"
    uses = task.get("uses") if isinstance(task.get("uses"), dict) else {}
    extras = [f"uses={uses.get('template')}" + (f"@{uses['version']}" if "version" in uses else "") if uses else "",
              f"retries={task['retries']}" if task.get("retries") else "",
              f"pool={task['pool']}" if task.get("pool") else "",
              f"trigger_rule={task['trigger_rule']}" if task.get("trigger_rule") not in (None, "all_success") else ""]
    return [task["id"], ", ".join(task.get("depends_on") or []) or "-", " ".join(e for e in extras if e),
            what if len(what) <= 60 else what[:59] + "…"]


def dags_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        dag = api.json("GET", dag_path(args.dag_id))
        version = None
        if args.version is not None:
            version = api.json("GET", f"{dag_path(args.dag_id)}/versions/{args.version}")
    if emitted(args, version if version is not None else dag):
        return 0
    spec = (version["spec"] if version is not None else dag["spec"]) or {}
    print(f"dag:      {dag['dag_id']}" + (" (paused)" if dag["paused"] else ""))
    print(f"schedule: {dag['schedule'] or 'manual only'}   next run: {short(dag['next_run_at'])}")
    shown = f"{version['version']} (current is {dag['version']})" if version is not None else dag["version"]
    print(f"version:  {shown}")
    if spec.get("params"):
        print(f"params:   {', '.join(sorted(spec['params'].get('properties') or {})) or '(a schema)'}")
    print()
    by_id = {t["id"]: t for t in spec.get("tasks") or []}
    table([_task_line(by_id[i]) for i in dag_order(list(by_id.values()))],
          ["TASK", "DEPENDS ON", "SETTINGS", "RUNS"])
    print()
    print("(the full spec, defaults filled in: --output yaml or --output json)")
    return 0


def dags_versions(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        items = api.pages(f"{dag_path(args.dag_id)}/versions")
    if emitted(args, items):
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
    if not emitted(args, dag):
        print(f"{dag['dag_id']}: {'applied' if answer.status_code == 201 else 'unchanged'} "
              f"(version {dag['version']})")
    return 0

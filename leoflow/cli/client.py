"""``leoflow dags|runs|tasks ...``: the CLI as a client of the HTTP API (LEOFLOW_URL, LEOFLOW_TOKEN).

Every verb is one or a few HTTP calls to ``/api/v2`` on whichever replica ``LEOFLOW_URL`` names
(any replica answers; none needs to be the leader). Failures end in one line on stderr and
exit 1, never a traceback: the server's error message is shown as is (it names the offending
field), and transport problems are explained (connection refused, timeout, 401 → set
LEOFLOW_TOKEN). Read verbs take ``--output json`` (the API's answer, for scripts).

This module holds the first verbs (list, pause, trigger, list and show runs, logs);
the others live beside it by subject (:mod:`.dags`, :mod:`.runs`, :mod:`.backfill`,
:mod:`.operations`, :mod:`.dags_sync` for apply/sync/delete), all built on :mod:`leoflow.cli.api`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from leoflow.cli.api import (
    Api,
    ApiUnavailable,
    ClientError,
    dag_path,
    emitted_json,
    group,
    print_json,
    q,
    run_path,
    short,
    table,
    usage,
    verb,
    wants_json,
)

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

#: How long `tasks logs --follow` rides out an unreachable API (a restarting replica) before giving up.
FOLLOW_OUTAGE_TOLERANCE = 120.0

__all__ = ["Api", "ApiUnavailable", "ClientError", "register"]


def register(sub: Any) -> None:
    from leoflow.cli import dags_sync

    dags = group(sub, "dags", "apply, sync, list, show, pause, delete DAGs; backfill them (via the HTTP API)")
    dags_sync.register(dags)
    verb(dags, "list", "list DAGs", dags_list, "GET /api/v2/dags", read=True)
    for name, paused in (("pause", True), ("unpause", False)):
        p = verb(dags, name, f"{name} a DAG" + (" (no new scheduled runs)" if paused else ""), dags_pause,
                 "PATCH /api/v2/dags/{dag_id}", paused=paused)
        p.add_argument("dag_id", metavar="DAG")

    runs = group(sub, "runs", "trigger, list, show, cancel and follow DAG runs (via the HTTP API)")
    trig = verb(runs, "trigger", "start a manual run", runs_trigger, "POST /api/v2/dags/{dag_id}/runs",
                "GET /api/v2/dags/{dag_id}/runs/{run_id}")
    trig.add_argument("dag_id", metavar="DAG")
    trig.add_argument("--run-id", help="run id (default: generated)")
    trig.add_argument("--conf", type=_conf, default=None, help="run configuration as a JSON object")
    trig.add_argument("--run-timeout", type=float, default=None, metavar="SECONDS",
                      help="this run's deadline in seconds from its start (overrides the DAG's run_timeout_seconds)")
    trig.add_argument("--wait", action="store_true", help="follow the run until it ends; exit 0 on success")
    rl = verb(runs, "list", "list a DAG's runs, newest first", runs_list, "GET /api/v2/dags/{dag_id}/runs",
              read=True)
    rl.add_argument("dag_id", metavar="DAG")
    rl.add_argument("--state", help="only runs in this state")
    rl.add_argument("--limit", type=int, default=50, help="most runs to show (default 50)")
    show = verb(runs, "show", "show a run and its task instances", runs_show, "GET /api/v2/dags/{dag_id}/runs/{run_id}",
                read=True)
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("run_id", metavar="RUN")

    tasks = group(sub, "tasks", "task instances and their logs (via the HTTP API)")
    logs = verb(tasks, "logs", "print a task's log (latest try unless --try)", tasks_logs,
                "GET /api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/logs", read=True)
    logs.add_argument("dag_id", metavar="DAG")
    logs.add_argument("run_id", metavar="RUN")
    logs.add_argument("task_id", metavar="TASK")
    logs.add_argument("--try", dest="try_number", type=int, help="try number (default: the latest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new output (live from the pod) until the try ends")


def _conf(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--conf must be a JSON object ({exc})") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("--conf is nested too deeply") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("--conf must be a JSON object, e.g. '{\"day\": \"2026-01-01\"}'")
    return parsed


# --------------------------------------------------------------------------- dags

def dags_list(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        dags = api.pages("/api/v2/dags")
    if emitted_json(args, dags):
        return 0
    table([[d["dag_id"], "yes" if d["paused"] else "no", d["schedule"] or "-", str(d["version"]),
            "stopped" if d.get("schedule_error") else short(d["next_run_at"]), d.get("source") or "-"]
           for d in dags],
          ["DAG", "PAUSED", "SCHEDULE", "VERSION", "NEXT RUN", "SOURCE"])
    for d in dags:
        if d.get("schedule_error"):
            print(f"{d['dag_id']}: schedule stopped: {d['schedule_error']}")
    return 0


def dags_pause(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        dag = api.json("PATCH", dag_path(args.dag_id), json={"paused": args.paused})
    print(f"{dag['dag_id']}: {'paused' if dag['paused'] else 'unpaused'}")
    return 0


# --------------------------------------------------------------------------- runs

def runs_trigger(args: argparse.Namespace, client: ClientSettings) -> int:
    from leoflow.cli.runs import follow

    with Api(client) as api:
        body: dict[str, Any] = {"conf": args.conf or {}}
        if args.run_id:
            body["run_id"] = args.run_id
        if args.run_timeout is not None:
            body["run_timeout_seconds"] = args.run_timeout  # the API validates it and names the field
        run = api.request("POST", f"{dag_path(args.dag_id)}/runs", ok=(201,), json=body).json()
        print(f"{run['dag_id']}: triggered run {run['run_id']}", flush=True)
        if not args.wait:
            return 0
        return follow(api, run["dag_id"], run["run_id"])


def runs_list(args: argparse.Namespace, client: ClientSettings) -> int:
    if args.limit < 1:
        usage("--limit must be at least 1")
    with Api(client) as api:
        params = {"state": args.state} if args.state else {}
        runs = api.pages(f"{dag_path(args.dag_id)}/runs", params, limit=args.limit)
    if emitted_json(args, runs):
        return 0
    table([[r["run_id"], r["state"], r["run_type"], short(r["created_at"]), short(r["ended_at"])]
           for r in runs], ["RUN", "STATE", "TYPE", "CREATED", "ENDED"])
    return 0


def runs_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        run = api.json("GET", run_path(args.dag_id, args.run_id))
    if emitted_json(args, run):
        return 0
    print(f"dag:      {run['dag_id']} (version {run['dag_version']})")
    print(f"run:      {run['run_id']} ({run['run_type']})")
    print(f"state:    {run['state']}" + (f" ({run['reason']})" if run.get("reason") else ""))
    print(f"created:  {short(run['created_at'])}   started: {short(run['started_at'])}   "
          f"ended: {short(run['ended_at'])}")
    if run["conf"]:
        print(f"conf:     {json.dumps(run['conf'])}")
    print()
    table([[t["task_id"], t["state"], f"{t['try_number']}/{t['max_tries']}", short(t["started_at"]),
            short(t["ended_at"]), t["reason"] or ""] for t in run["tasks"]],
          ["TASK", "STATE", "TRIES", "STARTED", "ENDED", "REASON"])
    return 0


def tasks_logs(args: argparse.Namespace, client: ClientSettings) -> int:
    if args.try_number is not None and args.try_number < 1:
        usage("--try must be at least 1")
    path = f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/logs"
    with Api(client) as api:
        if args.follow:
            from leoflow.cli.follow import follow

            try:
                return follow(api, path, args.try_number, sys.stdout, outage_tolerance=FOLLOW_OUTAGE_TOLERANCE)
            except KeyboardInterrupt:
                return 130
        params = {"try": args.try_number} if args.try_number else {}
        answer = api.request("GET", path, params=params)
    if wants_json(args):
        print_json({"try_number": int(answer.headers.get("x-leoflow-try", "0")),
                    "complete": answer.headers.get("x-leoflow-log-complete") == "true", "content": answer.text})
        return 0
    sys.stdout.write(answer.text)
    return 0


"""``leoflow runs ...``: DAG runs — trigger, list, show, cancel, clear, mark, and follow one live.

Following a run (``runs trigger --wait``, ``runs wait``) long-polls the run document
(:mod:`leoflow.api.run_waits`): each request carries the ETag of what the CLI has and waits up
to :data:`LONG_POLL` seconds for a change, so the CLI learns that the run ended within about a
tenth of a second, without polling on a fixed period. A server that cannot wait (an older
replica, or one already serving its maximum of waiting requests) answers at once; the CLI then
paces itself (:data:`MIN_PACE` growing to :data:`MAX_PACE`). Short outages (a failover, a
restarting database) are ridden out for up to :data:`OUTAGE_TOLERANCE` seconds. Exit code 0
when the run succeeded, 1 otherwise. With ``--output json|yaml`` the status lines go to stderr
and stdout carries only the run (as triggered, or as it ended with ``--wait``).

``runs clear`` and ``runs mark`` POST a command the API records and the leader applies under
its term (:mod:`leoflow.api.routes.commands`); they print what the leader did, or say that the
command is recorded and will be applied by the next leader when none answered in time (HTTP 202).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from leoflow.cli.dags import in_dag_order
from leoflow.cli.output import emitted, for_scripts, short, table, usage
from leoflow.cli.verbs import noun, verb
from leoflow.client.api import Api, ApiUnavailable, ClientError, dag_path, run_path
from leoflow.model.states import TERMINAL_RUN_STATES

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

#: Seconds one long-poll request waits for the run to change.
LONG_POLL = 25.0
#: Pacing when the server answers without waiting: start fast, slow down to at most this.
MIN_PACE = 0.05
MAX_PACE = 1.0
#: How long following keeps retrying while the API is unreachable before giving up.
OUTAGE_TOLERANCE = 120.0
STATE_ORDER = ("success", "running", "queued", "up_for_retry", "pending", "cancelling", "failed",
               "upstream_failed", "skipped", "cancelled")
RUN = "/api/v2/dags/{dag_id}/runs/{run_id}"


def register(sub: Any) -> None:
    runs = noun(sub, "runs", "trigger, list, show, cancel, clear, mark and follow DAG runs (via the HTTP API)")
    trig = verb(runs, "trigger", "start a manual run (--output json: the new run, with its id)", runs_trigger,
                "POST /api/v2/dags/{dag_id}/runs", f"GET {RUN}")
    trig.add_argument("dag_id", metavar="DAG")
    trig.add_argument("--run-id", help="run id (default: generated)")
    trig.add_argument("--conf", type=_conf, default=None, help="run configuration as a JSON object")
    trig.add_argument("--run-timeout", type=float, default=None, metavar="SECONDS",
                      help="this run's deadline in seconds from its start (overrides the DAG's run_timeout_seconds)")
    trig.add_argument("--logical-date", metavar="TIME",
                      help="the moment the run is for, ISO 8601 with an offset (default: now); its data interval")
    trig.add_argument("--wait", action="store_true", help="follow the run until it ends; exit 0 on success")
    rl = verb(runs, "list", "list runs, newest first: every DAG's, or one DAG's", runs_list,
              "GET /api/v2/runs", "GET /api/v2/dags/{dag_id}/runs")
    rl.add_argument("dag_id", metavar="DAG", nargs="?", help="only this DAG's runs (default: every DAG's)")
    rl.add_argument("--state", help="only runs in this state")
    rl.add_argument("--since", metavar="TIME", help="only runs created at or after TIME (ISO 8601 date or time)")
    rl.add_argument("--limit", type=int, default=50, help="most runs to show (default 50)")
    show = verb(runs, "show", "show a run and its task instances (in the DAG's order)", runs_show, f"GET {RUN}",
                "GET /api/v2/dags/{dag_id}")
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("run_id", metavar="RUN")
    cancel = verb(runs, "cancel", "cancel a queued or running run and its unfinished tasks", runs_cancel,
                  f"POST {RUN}/cancel")
    cancel.add_argument("dag_id", metavar="DAG")
    cancel.add_argument("run_id", metavar="RUN")
    wait = verb(runs, "wait", "follow a run until it ends; exit 0 on success, 1 otherwise", runs_wait, f"GET {RUN}")
    wait.add_argument("dag_id", metavar="DAG")
    wait.add_argument("run_id", metavar="RUN")
    clear = verb(runs, "clear", "clear task instances of a run: they run again as new tries (and the run with them)",
                 runs_clear, f"POST {RUN}/clear")
    clear.add_argument("dag_id", metavar="DAG")
    clear.add_argument("run_id", metavar="RUN")
    clear.add_argument("--task", "-t", action="append", dest="tasks", metavar="TASK",
                       help="a task to clear (repeatable; default with --failed: every unsuccessful task)")
    clear.add_argument("--failed", action="store_true",
                       help="only task instances failed, upstream_failed or cancelled")
    clear.add_argument("--downstream", action="store_true", help="also every task downstream of them")
    clear.add_argument("--map-index", dest="map_index", type=int, metavar="N",
                       help="with one --task of a mapped task: only its instance N (the task keeps its expansion)")
    mark = verb(runs, "mark", "mark a run success or failed with its unfinished tasks (running tries killed)",
                runs_mark, f"POST {RUN}/mark")
    mark.add_argument("dag_id", metavar="DAG")
    mark.add_argument("run_id", metavar="RUN")
    mark.add_argument("state", choices=("success", "failed"))


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


def runs_trigger(args: argparse.Namespace, client: ClientSettings) -> int:
    out = sys.stderr if for_scripts(args) else sys.stdout  # stdout carries only the run, then
    with Api(client) as api:
        body: dict[str, Any] = {"conf": args.conf or {}}
        if args.run_id:
            body["run_id"] = args.run_id
        if args.run_timeout is not None:
            body["run_timeout_seconds"] = args.run_timeout  # the API validates it and names the field
        if args.logical_date is not None:
            body["logical_date"] = args.logical_date  # likewise
        run = api.request("POST", f"{dag_path(args.dag_id)}/runs", ok=(201,), json=body).json()
        print(f"{run['dag_id']}: triggered run {run['run_id']}", file=out, flush=True)
        code = 0
        if args.wait:
            code, run = follow(api, run["dag_id"], run["run_id"], out)
    emitted(args, run)
    return code


def runs_list(args: argparse.Namespace, client: ClientSettings) -> int:
    if args.limit < 1:
        usage("--limit must be at least 1")
    params = {"state": args.state, "since": args.since}
    # One DAG's list answers 404 for a DAG that does not exist; the list of every DAG's runs filters by time.
    path = f"{dag_path(args.dag_id)}/runs" if args.dag_id and not args.since else "/api/v2/runs"
    if args.dag_id and args.since:
        params["dag_id"] = args.dag_id
    with Api(client) as api:
        runs = api.pages(path, {k: v for k, v in params.items() if v}, limit=args.limit)
    if emitted(args, runs):
        return 0
    rows = [[r["run_id"], r["state"], r["run_type"], short(r["created_at"]), short(r["ended_at"])] for r in runs]
    header = ["RUN", "STATE", "TYPE", "CREATED", "ENDED"]
    if not args.dag_id:
        rows, header = [[r["dag_id"], *row] for r, row in zip(runs, rows, strict=True)], ["DAG", *header]
    table(rows, header)
    return 0


def runs_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        run = api.json("GET", run_path(args.dag_id, args.run_id))
        if for_scripts(args):
            emitted(args, run)
            return 0
        run["tasks"] = in_dag_order(run["tasks"], api.json("GET", dag_path(args.dag_id)).get("spec"))
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


def runs_cancel(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        run = api.json("POST", f"{run_path(args.dag_id, args.run_id)}/cancel")
    if not emitted(args, run):
        print(f"{run['dag_id']}: run {run['run_id']} {run['state']}")
    return 0


def runs_wait(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        code, run = follow(api, args.dag_id, args.run_id, sys.stderr if for_scripts(args) else sys.stdout)
    emitted(args, run)
    return code


def summary(run: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for task in run.get("tasks", []):
        counts[task["state"]] = counts.get(task["state"], 0) + 1
    total = sum(counts.values())
    parts = [f"{counts[s]} {s}" for s in STATE_ORDER if counts.get(s)]
    parts += [f"{n} {s}" for s, n in sorted(counts.items()) if s not in STATE_ORDER]
    tasks = f"{total} tasks: " + ", ".join(parts) if total else "no tasks started yet"
    return f"run {run['run_id']}: {run['state']} ({tasks})"


def unsuccessful(run: dict[str, Any]) -> str:
    """``; failed tasks: a; upstream_failed tasks: b, c`` — each task under the state it ended in."""
    parts = []
    for state in ("failed", "upstream_failed", "cancelled"):
        ids = [t["task_id"] for t in run.get("tasks", []) if t["state"] == state]
        if ids:
            parts.append(f"{state} tasks: {', '.join(ids)}")
    return "".join(f"; {p}" for p in parts)


def follow(api: Api, dag_id: str, run_id: str, out: TextIO) -> tuple[int, dict[str, Any]]:
    """Follow the run until it ends, redrawing one status line on a TTY (a line per change otherwise).

    Returns the exit code (0: the run succeeded) and the run as it ended.
    """
    tty = out.isatty()
    path = run_path(dag_id, run_id)
    etag: str | None = None
    run: dict[str, Any] | None = None
    last = ""
    outage_since: float | None = None
    pace = MIN_PACE
    while run is None or run["state"] not in TERMINAL_RUN_STATES:
        asked = time.monotonic()
        try:
            headers = {"If-None-Match": etag} if etag else {}
            answer = api.request("GET", path, ok=(200, 304), params={"wait": LONG_POLL} if etag else None,
                                 headers=headers, timeout=LONG_POLL + 30)
            outage_since = None
        except ApiUnavailable as exc:
            if run is None and outage_since is None and "refused" in str(exc):
                raise  # never reached: a wrong LEOFLOW_URL, not an outage to ride out
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > OUTAGE_TOLERANCE:
                raise ClientError(f"gave up waiting for run {run_id}: {exc}") from None
            time.sleep(1.0)
            continue
        new_etag = answer.headers.get("etag")
        if answer.status_code == 200:
            run = answer.json()
            line = summary(run)
            if line != last:
                print(("\r\033[K" + line) if tty else line, end="" if tty else "\n", file=out, flush=True)
                last = line
        if new_etag is None or (answer.status_code == 304 and time.monotonic() - asked < LONG_POLL / 2):
            # The server did not wait (or cannot): pace ourselves instead of spinning.
            time.sleep(pace)
            pace = min(MAX_PACE, pace * 1.5)
        else:
            pace = MIN_PACE
        etag = new_etag
    if tty:
        print(file=out)
    if run["state"] != "success":
        reason = f" ({run['reason']})" if run.get("reason") else ""
        print(f"leoflow: run {run_id} {run['state']}{reason}{unsuccessful(run)}", file=sys.stderr)
        return 1, run
    return 0, run


def runs_clear(args: argparse.Namespace, client: ClientSettings) -> int:
    if not args.tasks and not args.failed:
        usage("runs clear: say what to clear: --failed (every unsuccessful task), --task TASK (repeatable), "
              "or both")
    body: dict[str, Any] = {"downstream": args.downstream}
    if args.tasks:
        body["tasks"] = args.tasks
    if args.failed:
        body["failed_only"] = True
    if args.map_index is not None:  # the API says when it needs exactly one task
        body["map_index"] = args.map_index
    with Api(client) as api:
        answer = api.request("POST", f"{run_path(args.dag_id, args.run_id)}/clear", ok=(200, 202), json=body)
    return report(args, answer.status_code, answer.json(), f"{args.dag_id}: run {args.run_id}")


def runs_mark(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        answer = api.request("POST", f"{run_path(args.dag_id, args.run_id)}/mark", ok=(200, 202),
                             json={"state": args.state})
    return report(args, answer.status_code, answer.json(), f"{args.dag_id}: run {args.run_id}")


def report(args: argparse.Namespace, status: int, body: dict[str, Any], subject: str) -> int:
    """What a day-2 command did (``runs clear|mark``, ``tasks mark``), or that it waits for a leader."""
    if emitted(args, body):
        return 0
    command = body.get("command", {})
    if status == 202:
        print(f"{subject}: command {command.get('id')} recorded; no leader applied it yet (the next one will)")
        return 0
    changed = command.get("tasks") or []
    if command.get("kind") == "mark_run":
        what = f"run marked {command.get('marked')} ({len(changed)} task(s) changed)"
    elif command.get("kind") == "mark":
        what = f"marked {command.get('marked')}" if changed else f"already {command.get('marked')}: unchanged"
    else:
        what = f"cleared {len(changed)} task(s): {', '.join(changed)}" if changed else "nothing to clear"
    state = body.get("run", {}).get("state")
    print(f"{subject}: {what}" + (f"; run {state}" if state else ""))
    return 0

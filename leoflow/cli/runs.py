"""``leoflow runs ...``: DAG runs — trigger, list, show, cancel, clear, mark, and follow one live.

Following a run (``runs trigger --wait``, ``runs wait``) is the typed client's
(:class:`leoflow.client.waiting.RunFollower`, the same loop as ``run.wait()`` in a script): it
long-polls the run document (:mod:`leoflow.api.run_waits`), each request carrying the ETag of
what the CLI has and waiting for a change, so the CLI learns that the run ended within about a
tenth of a second, without polling on a fixed period. A server that cannot wait answers at
once; the follower then paces itself. Short outages (a failover, a restarting database) are
ridden out for up to two minutes. Exit code 0
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
from itertools import islice
from typing import TYPE_CHECKING, Any, TextIO

from leoflow.cli.dags import in_dag_order
from leoflow.cli.output import emitted, for_scripts, short, table, usage
from leoflow.cli.verbs import connect, noun, verb

if TYPE_CHECKING:
    from leoflow.client.typed import Client
    from leoflow.settings import ClientSettings

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
    with connect(client) as api:
        # The API validates --run-timeout and --logical-date, and names the field.
        run = api.trigger_run(args.dag_id, run_id=args.run_id or None, conf=args.conf or {},
                              run_timeout_seconds=args.run_timeout, logical_date=args.logical_date).to_dict()
        print(f"{run['dag_id']}: triggered run {run['run_id']}", file=out, flush=True)
        code = 0
        if args.wait:
            code, run = follow(api, run["dag_id"], run["run_id"], out)
    emitted(args, run)
    return code


def runs_list(args: argparse.Namespace, client: ClientSettings) -> int:
    if args.limit < 1:
        usage("--limit must be at least 1")
    page_size = min(500, args.limit)
    # One DAG's list answers 404 for a DAG that does not exist; the list of every DAG's runs filters by time.
    with connect(client) as api:
        found = (api.iter_runs(args.dag_id, state=args.state or None, page_size=page_size)
                 if args.dag_id and not args.since else
                 api.iter_runs_of_every_dag(state=args.state or None, since=args.since or None,
                                            dag_id=args.dag_id or None, page_size=page_size))
        runs = [r.to_dict() for r in islice(found, args.limit)]
    if emitted(args, runs):
        return 0
    rows = [[r["run_id"], r["state"], r["run_type"], short(r["created_at"]), short(r["ended_at"])] for r in runs]
    header = ["RUN", "STATE", "TYPE", "CREATED", "ENDED"]
    if not args.dag_id:
        rows, header = [[r["dag_id"], *row] for r, row in zip(runs, rows, strict=True)], ["DAG", *header]
    table(rows, header)
    return 0


def runs_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        run = api.get_run(args.dag_id, args.run_id).to_dict()
        if for_scripts(args):
            emitted(args, run)
            return 0
        run["tasks"] = in_dag_order(run["tasks"], api.get_dag(args.dag_id).spec)
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
    with connect(client) as api:
        run = api.cancel_run(args.dag_id, args.run_id)
    if not emitted(args, run):
        print(f"{run['dag_id']}: run {run['run_id']} {run['state']}")
    return 0


def runs_wait(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
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


def follow(api: Client, dag_id: str, run_id: str, out: TextIO) -> tuple[int, dict[str, Any]]:
    """Follow the run until it ends, redrawing one status line on a TTY (a line per change otherwise).

    Returns the exit code (0: the run succeeded) and the run as it ended.
    """
    from leoflow.client.waiting import RunFollower

    tty = out.isatty()
    last = [""]

    def show(run: dict[str, Any]) -> None:
        line = summary(run)
        if line != last[0]:
            print(("\r\033[K" + line) if tty else line, end="" if tty else "\n", file=out, flush=True)
            last[0] = line

    run = api.follow(RunFollower(dag_id, run_id, on_change=show)).to_dict()
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
    with connect(client) as api:
        # --map-index: the API says when it needs exactly one task.
        done = api.clear_task_instances(args.dag_id, args.run_id, tasks=args.tasks or None,
                                        failed_only=True if args.failed else None, downstream=args.downstream,
                                        map_index=args.map_index)
    return report(args, *command_answer(done), f"{args.dag_id}: run {args.run_id}")


def runs_mark(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        done = api.mark_run(args.dag_id, args.run_id, state=args.state)
    return report(args, *command_answer(done), f"{args.dag_id}: run {args.run_id}")


def command_answer(done: Any) -> tuple[int, dict[str, Any]]:
    """(status, body) of a day-2 command's answer: 202 when it is recorded but no leader applied it yet."""
    from leoflow.client.models import CommandPending

    return (202 if isinstance(done, CommandPending) else 200), done.to_dict()


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

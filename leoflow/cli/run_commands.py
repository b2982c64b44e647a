"""``leoflow runs clear`` and ``leoflow tasks mark``: day-2 fixes of a run, applied by the leader.

Both verbs POST a command the API records and the leader applies under its term
(:mod:`leoflow.api.routes_commands`); they print what the leader did, or say that the command
is recorded and will be applied by the next leader when none answered in time (HTTP 202).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from leoflow.cli.api import Api, group, run_path, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    runs = group(sub, "runs", "trigger, list, show, cancel and follow DAG runs (via the HTTP API)")
    clear = verb(runs, "clear", "clear task instances of a run: they run again as new tries (and the run with them)",
                 runs_clear, "POST /api/v2/dags/{dag_id}/runs/{run_id}/clear")
    clear.add_argument("dag_id", metavar="DAG")
    clear.add_argument("run_id", metavar="RUN")
    clear.add_argument("--task", "-t", action="append", dest="tasks", metavar="TASK",
                       help="a task to clear (repeatable; default with --failed: every unsuccessful task)")
    clear.add_argument("--failed", action="store_true",
                       help="only task instances failed, upstream_failed or cancelled")
    clear.add_argument("--downstream", action="store_true", help="also every task downstream of them")

    mark_run = verb(runs, "mark", "mark a run success or failed with its unfinished tasks (running tries killed)",
                    runs_mark, "POST /api/v2/dags/{dag_id}/runs/{run_id}/mark")
    mark_run.add_argument("dag_id", metavar="DAG")
    mark_run.add_argument("run_id", metavar="RUN")
    mark_run.add_argument("state", choices=("success", "failed"))

    tasks = group(sub, "tasks", "task instances and their logs (via the HTTP API)")
    mark = verb(tasks, "mark", "mark a task instance success or failed; downstream follows as if it ended so",
                tasks_mark, "POST /api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/mark")
    mark.add_argument("dag_id", metavar="DAG")
    mark.add_argument("run_id", metavar="RUN")
    mark.add_argument("task_id", metavar="TASK")
    mark.add_argument("state", choices=("success", "failed"))


def runs_clear(args: argparse.Namespace, client: ClientSettings) -> int:
    body: dict[str, Any] = {"downstream": args.downstream}
    if args.tasks:
        body["tasks"] = args.tasks
    if args.failed:
        body["failed_only"] = True
    with Api(client) as api:
        answer = api.request("POST", f"{run_path(args.dag_id, args.run_id)}/clear", ok=(200, 202), json=body)
    return _report(answer.status_code, answer.json(), f"{args.dag_id}: run {args.run_id}")


def runs_mark(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        answer = api.request("POST", f"{run_path(args.dag_id, args.run_id)}/mark", ok=(200, 202),
                             json={"state": args.state})
    return _report(answer.status_code, answer.json(), f"{args.dag_id}: run {args.run_id}")


def tasks_mark(args: argparse.Namespace, client: ClientSettings) -> int:
    path = f"{run_path(args.dag_id, args.run_id)}/tasks/{args.task_id}/mark"
    with Api(client) as api:
        answer = api.request("POST", path, ok=(200, 202), json={"state": args.state})
    return _report(answer.status_code, answer.json(), f"{args.dag_id}: run {args.run_id} task {args.task_id}")


def _report(status: int, body: dict[str, Any], subject: str) -> int:
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

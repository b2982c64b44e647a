"""``leoflow runs cancel|wait`` and ``leoflow tasks list|show``, and following a run live.

Following a run (``runs trigger --wait``, ``runs wait``) long-polls the run document
(:mod:`leoflow.api.run_waits`): each request carries the ETag of what the CLI has and waits up
to :data:`LONG_POLL` seconds for a change, so the CLI learns that the run ended within about a
tenth of a second, without polling on a fixed period. A server that cannot wait (an older
replica, or one already serving its maximum of waiting requests) answers at once; the CLI then
paces itself (:data:`MIN_PACE` growing to :data:`MAX_PACE`). Short outages (a failover, a
restarting database) are ridden out for up to :data:`OUTAGE_TOLERANCE` seconds. Exit code 0
when the run succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from leoflow.cli.api import (
    Api,
    ApiUnavailable,
    ClientError,
    emitted_json,
    group,
    q,
    run_path,
    short,
    table,
    verb,
)
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
TASK = "/api/v2/dags/{dag_id}/runs/{run_id}/tasks"


def register(sub: Any) -> None:
    runs = group(sub, "runs", "trigger, list, show, cancel and follow DAG runs (via the HTTP API)")
    cancel = verb(runs, "cancel", "cancel a queued or running run and its unfinished tasks", runs_cancel,
                  "POST /api/v2/dags/{dag_id}/runs/{run_id}/cancel")
    cancel.add_argument("dag_id", metavar="DAG")
    cancel.add_argument("run_id", metavar="RUN")
    wait = verb(runs, "wait", "follow a run until it ends; exit 0 on success, 1 otherwise", runs_wait,
                "GET /api/v2/dags/{dag_id}/runs/{run_id}")
    wait.add_argument("dag_id", metavar="DAG")
    wait.add_argument("run_id", metavar="RUN")

    tasks = group(sub, "tasks", "task instances and their logs (via the HTTP API)")
    lst = verb(tasks, "list", "list a run's task instances", tasks_list, f"GET {TASK}", read=True)
    lst.add_argument("dag_id", metavar="DAG")
    lst.add_argument("run_id", metavar="RUN")
    lst.add_argument("--state", help="only task instances in this state")
    show = verb(tasks, "show", "show a task instance and every try", tasks_show, f"GET {TASK}/{{task_id}}",
                read=True)
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("task_id", metavar="TASK")


def runs_cancel(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        run = api.json("POST", f"{run_path(args.dag_id, args.run_id)}/cancel")
    print(f"{run['dag_id']}: run {run['run_id']} {run['state']}")
    return 0


def runs_wait(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        return follow(api, args.dag_id, args.run_id)


def summary(run: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for task in run.get("tasks", []):
        counts[task["state"]] = counts.get(task["state"], 0) + 1
    total = sum(counts.values())
    parts = [f"{counts[s]} {s}" for s in STATE_ORDER if counts.get(s)]
    parts += [f"{n} {s}" for s, n in sorted(counts.items()) if s not in STATE_ORDER]
    tasks = f"{total} tasks: " + ", ".join(parts) if total else "no tasks started yet"
    return f"run {run['run_id']}: {run['state']} ({tasks})"


def follow(api: Api, dag_id: str, run_id: str) -> int:
    """Follow the run until it ends, redrawing one status line on a TTY (a line per change otherwise)."""
    tty = sys.stdout.isatty()
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
                print(("\r\033[K" + line) if tty else line, end="" if tty else "\n", flush=True)
                last = line
        if new_etag is None or (answer.status_code == 304 and time.monotonic() - asked < LONG_POLL / 2):
            # The server did not wait (or cannot): pace ourselves instead of spinning.
            time.sleep(pace)
            pace = min(MAX_PACE, pace * 1.5)
        else:
            pace = MIN_PACE
        etag = new_etag
    if tty:
        print()
    if run["state"] != "success":
        failed = [t["task_id"] for t in run.get("tasks", []) if t["state"] in ("failed", "upstream_failed")]
        detail = f"; failed tasks: {', '.join(failed)}" if failed else ""
        reason = f" ({run['reason']})" if run.get("reason") else ""
        print(f"leoflow: run {run_id} {run['state']}{reason}{detail}", file=sys.stderr)
        return 1
    return 0


def tasks_list(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        params = {"state": args.state} if args.state else {}
        items = api.pages(f"{run_path(args.dag_id, args.run_id)}/tasks", params)
    if emitted_json(args, items):
        return 0
    table([[t["task_id"], t["state"], f"{t['try_number']}/{t['max_tries']}", short(t["started_at"]),
            short(t["ended_at"]), t["reason"] or ""] for t in items],
          ["TASK", "STATE", "TRIES", "STARTED", "ENDED", "REASON"])
    return 0


def tasks_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        ti = api.json("GET", f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}")
    if emitted_json(args, ti):
        return 0
    print(f"task:     {ti['task_id']}")
    print(f"state:    {ti['state']}" + (f" ({ti['reason']})" if ti.get("reason") else ""))
    print(f"tries:    {ti['try_number']} of {ti['max_tries']}")
    print()
    table([[str(t["try_number"]), t["state"], short(t["started_at"]), short(t["ended_at"]),
            "-" if t["exit_code"] is None else str(t["exit_code"]), t["executor_ref"] or "-", t["reason"] or ""]
           for t in ti["tries"]], ["TRY", "STATE", "STARTED", "ENDED", "EXIT", "WHERE", "REASON"])
    return 0

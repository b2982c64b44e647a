"""``leoflow backfills list|show|cancel``, and the handler of ``leoflow dags backfill`` (declared under
``dags`` by :mod:`leoflow.cli.dags`, through :func:`register_dags_backfill`).

``dags backfill DAG --start S --end E [--max-active-runs N] [--rerun-failed] [--wait]`` asks the
API for a backfill of the cron slots in ``[S, E)``; the leader creates the runs. With ``--wait``
the CLI shows the progress — one line redrawn on a TTY, a line per change otherwise — until the
backfill completes or is cancelled: exit 0 when every run it made succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from leoflow.cli.output import emitted, for_scripts, short, table
from leoflow.cli.verbs import connect, noun, verb
from leoflow.client.api import ApiUnavailable, ClientError

if TYPE_CHECKING:
    from leoflow.client.typed import Client
    from leoflow.settings import ClientSettings

#: Seconds between progress reads of ``--wait`` (a backfill's runs take minutes to hours).
PROGRESS_INTERVAL = 1.0
OUTAGE_TOLERANCE = 120.0
BACKFILL = "/api/v2/dags/{dag_id}/backfills/{backfill_id}"


def register_dags_backfill(dags: Any) -> None:
    create = verb(dags, "backfill", "run a scheduled DAG for its cron slots in [--start, --end)", dags_backfill,
                  "POST /api/v2/dags/{dag_id}/backfill", f"GET {BACKFILL}")
    create.add_argument("dag_id", metavar="DAG")
    create.add_argument("--start", required=True, help="first moment (ISO 8601; a date is midnight in the DAG's zone)")
    create.add_argument("--end", required=True, help="end, exclusive (ISO 8601; not in the future)")
    create.add_argument("--max-active-runs", type=int, help="unfinished runs at once (default 10)")
    create.add_argument("--rerun-failed", action="store_true", help="run failed slots again (default: skip them)")
    create.add_argument("--wait", action="store_true", help="show the progress until it ends; exit 0 if all succeed")


def register(sub: Any) -> None:
    backfills = noun(sub, "backfills", "list, show and cancel backfills (via the HTTP API)")
    lst = verb(backfills, "list", "list a DAG's backfills, newest first", backfills_list,
               "GET /api/v2/dags/{dag_id}/backfills")
    lst.add_argument("dag_id", metavar="DAG")
    show = verb(backfills, "show", "show a backfill's progress", backfills_show, f"GET {BACKFILL}")
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("backfill_id", metavar="ID", type=int)
    cancel = verb(backfills, "cancel", "stop a backfill: no new runs, its queued runs cancelled", backfills_cancel,
                  f"POST {BACKFILL}/cancel")
    cancel.add_argument("dag_id", metavar="DAG")
    cancel.add_argument("backfill_id", metavar="ID", type=int)


def progress(b: dict[str, Any]) -> str:
    runs: dict[str, int] = b["runs"]
    done = sum(runs.get(s, 0) for s in ("success", "failed", "cancelled")) + b["slots_skipped"]
    parts = [f"{runs[s]} {s}" for s in ("success", "failed", "cancelled", "running", "queued") if runs.get(s)]
    if b["slots_skipped"]:
        parts.append(f"{b['slots_skipped']} skipped")
    return f"backfill {b['id']} of {b['dag_id']}: {b['state']}, {done}/{b['slots_total']} slots done" + (
        f" ({', '.join(parts)})" if parts else "")


def dags_backfill(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        b = api.start_backfill(args.dag_id, start=args.start, end=args.end, rerun_failed=args.rerun_failed,
                               max_active_runs=args.max_active_runs).to_dict()
        # With --output json|yaml stdout carries one document (the backfill, at its end with
        # --wait): the progress lines go to stderr.
        out = sys.stderr if for_scripts(args) else sys.stdout
        print(f"{b['dag_id']}: backfill {b['id']} started: {b['slots_total']} slots from {short(b['start'])} "
              f"to {short(b['end'])}, at most {b['max_active_runs']} runs at once", file=out, flush=True)
        code = 0
        if args.wait:
            code, b = _follow(api, b, out)
    emitted(args, b)
    return code


def _follow(api: Client, b: dict[str, Any], out: TextIO) -> tuple[int, dict[str, Any]]:
    """Show the progress until the backfill ends: (exit code, the backfill as it ended)."""
    tty = out.isatty()
    last = ""
    outage_since: float | None = None
    while True:
        line = progress(b)
        if line != last:
            print(("\r\033[K" + line) if tty else line, end="" if tty else "\n", file=out, flush=True)
            last = line
        if b["state"] != "running":
            break
        time.sleep(PROGRESS_INTERVAL)
        try:
            b = api.get_backfill(b["dag_id"], b["id"]).to_dict()
            outage_since = None
        except ApiUnavailable as exc:
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > OUTAGE_TOLERANCE:
                raise ClientError(f"gave up following backfill {b['id']}: {exc}") from None
    if tty:
        print(file=out)
    bad = {s: n for s, n in b["runs"].items() if s in ("failed", "cancelled")}
    if b["state"] != "completed" or bad:
        detail = ", ".join(f"{n} {s}" for s, n in bad.items())
        print(f"leoflow: backfill {b['id']} {b['state']}" + (f" with {detail} runs" if detail else ""),
              file=sys.stderr)
        return 1, b
    return 0, b


def backfills_list(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        items = [b.to_dict() for b in api.iter_backfills(args.dag_id, page_size=500)]
    if emitted(args, items):
        return 0
    table([[str(b["id"]), b["state"], short(b["start"]), short(b["end"]), str(b["slots_total"]),
            ", ".join(f"{n} {s}" for s, n in sorted(b["runs"].items())) or "-", b["created_by"]] for b in items],
          ["ID", "STATE", "START", "END", "SLOTS", "RUNS", "BY"])
    return 0


def backfills_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        b = api.get_backfill(args.dag_id, args.backfill_id).to_dict()
    if emitted(args, b):
        return 0
    print(progress(b))
    print(f"range:    [{short(b['start'])}, {short(b['end'])})   next slot: {short(b['next_logical_date'])}")
    print(f"limits:   {b['max_active_runs']} runs at once; failed runs "
          + ("re-run" if b["rerun_failed"] else "left alone"))
    print(f"made:     {b['runs_created']} created, {b['runs_rerun']} re-run, {b['slots_skipped']} skipped")
    print(f"by:       {b['created_by']} at {short(b['created_at'])}"
          + (f", ended {short(b['completed_at'])}" if b["completed_at"] else ""))
    return 0


def backfills_cancel(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        b = api.cancel_backfill(args.dag_id, args.backfill_id).to_dict()
    if not emitted(args, b):
        print(progress(b))
    return 0

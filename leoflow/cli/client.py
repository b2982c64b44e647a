"""``leoflow dags|runs|tasks ...``: the CLI as a client of the HTTP API (LEOFLOW_URL, LEOFLOW_TOKEN).

Every verb is one or a few HTTP calls to ``/api/v2`` on whichever replica ``LEOFLOW_URL`` names
(any replica answers; none needs to be the leader). Failures end in one line on stderr and
exit 1, never a traceback: the server's error message is shown as is (it names the offending
field), and transport problems are explained (connection refused, timeout, 401 → set
LEOFLOW_TOKEN). ``runs trigger --wait`` polls the run until it ends, drawing a live summary of
its task states; it rides out short outages (a failover, a restarting database) and exits 0 on
success, 1 on failure or cancellation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, NoReturn

import httpx

from leoflow.errors import LeoflowError
from leoflow.model.states import TERMINAL_RUN_STATES
from leoflow.settings import Settings
from leoflow.standalone.discovery import client_settings

#: Seconds between polls of ``runs trigger --wait``: the scheduler reacts within a tick (1 s).
WAIT_POLL_INTERVAL = 0.5
#: How long ``--wait`` keeps retrying while the API is unreachable before giving up.
WAIT_OUTAGE_TOLERANCE = 120.0
STATE_ORDER = ("success", "running", "queued", "up_for_retry", "pending", "failed", "upstream_failed",
               "cancelled")


class ClientError(LeoflowError):
    """The API refused the request or could not be reached."""

    def __init__(self, message: str | None = None, *, status: int | None = None, details: Any = None) -> None:
        super().__init__(message)
        #: The HTTP status and the error envelope's ``details`` when the API answered.
        self.status = status
        self.details = details


class ApiUnavailable(ClientError):
    """The API could not be reached or answered 503 (retryable)."""


class Api:
    """A small synchronous client of the Leoflow HTTP API."""

    def __init__(self, settings: Settings, *, timeout: float = 30.0) -> None:
        # With no LEOFLOW_TOKEN, a live local standalone serving exactly LEOFLOW_URL lends its
        # stored admin token (never sent to any other server).
        client = client_settings(settings)
        self.base = client.url.rstrip("/")
        headers = {"User-Agent": "leoflow-cli"}
        if client.token:
            headers["Authorization"] = f"Bearer {client.token}"
        self._http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kwargs: Any) -> httpx.Response:
        try:
            answer = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            reason = "connection refused" if "refused" in str(exc).lower() else str(exc) or type(exc).__name__
            raise ApiUnavailable(f"cannot reach the Leoflow API at {self.base} ({reason}); "
                                 "check LEOFLOW_URL") from None
        except httpx.TimeoutException:
            raise ApiUnavailable(f"the Leoflow API at {self.base} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"request to {self.base} failed: {exc or type(exc).__name__}") from None
        if answer.status_code in ok:
            return answer
        message, details = _error_message(answer)
        status = answer.status_code
        if status == 401:
            raise ClientError(f"unauthorized: {message} (set LEOFLOW_TOKEN to a valid API token)", status=status)
        if status == 403:
            raise ClientError(f"forbidden: {message}", status=status)
        if status == 503:
            raise ApiUnavailable(f"service unavailable: {message}", status=status)
        raise ClientError(message, status=status, details=details)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.request(method, path, **kwargs)
        try:
            return answer.json()
        except ValueError:
            raise ClientError(f"{self.base}{path} did not answer with JSON; is LEOFLOW_URL a Leoflow API?") from None

    def pages(self, path: str, params: dict[str, Any] | None = None, *, limit: int | None = None) -> list[Any]:
        """Items of a paginated list, following cursors (up to ``limit`` items)."""
        items: list[Any] = []
        query = dict(params or {})
        while True:
            query["limit"] = min(500, limit - len(items)) if limit else 500
            body = self.json("GET", path, params=query)
            items += body["items"]
            if not body.get("next_cursor") or (limit and len(items) >= limit):
                return items
            query["cursor"] = body["next_cursor"]


def _error_message(answer: httpx.Response) -> tuple[str, Any]:
    """The error envelope's message and details (None when the answer is not one)."""
    try:
        error = answer.json()["error"]
        return str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError, AttributeError):
        text = answer.text.strip().splitlines()
        return f"HTTP {answer.status_code}" + (f": {text[0][:200]}" if text else ""), None


def _quote(segment: str) -> str:
    from urllib.parse import quote

    return quote(segment, safe="")


# --------------------------------------------------------------------------- registration

def register(sub: Any) -> None:
    from leoflow.cli import dags_sync  # its verbs use this module's Api: imported here, not at the top

    dags = sub.add_parser("dags", help="apply, sync, list, pause, unpause and delete DAGs (via the HTTP API)")
    dverbs = dags.add_subparsers(dest="dags_command", metavar="VERB", parser_class=type(dags))
    dverbs.required = True
    dags_sync.register(dverbs)
    lst = dverbs.add_parser("list", help="list DAGs")
    lst.set_defaults(handler=dags_list, configure_logging=False)
    for verb, paused in (("pause", True), ("unpause", False)):
        p = dverbs.add_parser(verb, help=f"{verb} a DAG" + (" (no new scheduled runs)" if paused else ""))
        p.add_argument("dag_id", metavar="DAG")
        p.set_defaults(handler=dags_pause, paused=paused, configure_logging=False)

    runs = sub.add_parser("runs", help="trigger, list and show DAG runs (via the HTTP API)")
    rverbs = runs.add_subparsers(dest="runs_command", metavar="VERB", parser_class=type(runs))
    rverbs.required = True
    trig = rverbs.add_parser("trigger", help="start a manual run")
    trig.add_argument("dag_id", metavar="DAG")
    trig.add_argument("--run-id", help="run id (default: generated)")
    trig.add_argument("--conf", type=_conf, default=None, help="run configuration as a JSON object")
    trig.add_argument("--wait", action="store_true", help="follow the run until it ends; exit 0 on success")
    trig.set_defaults(handler=runs_trigger, configure_logging=False)
    rl = rverbs.add_parser("list", help="list a DAG's runs, newest first")
    rl.add_argument("dag_id", metavar="DAG")
    rl.add_argument("--state", help="only runs in this state")
    rl.add_argument("--limit", type=int, default=50, help="most runs to show (default 50)")
    rl.set_defaults(handler=runs_list, configure_logging=False)
    show = rverbs.add_parser("show", help="show a run and its task instances")
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("run_id", metavar="RUN")
    show.set_defaults(handler=runs_show, configure_logging=False)

    tasks = sub.add_parser("tasks", help="task logs (via the HTTP API)")
    tverbs = tasks.add_subparsers(dest="tasks_command", metavar="VERB", parser_class=type(tasks))
    tverbs.required = True
    logs = tverbs.add_parser("logs", help="print a task's log (latest try unless --try)")
    logs.add_argument("dag_id", metavar="DAG")
    logs.add_argument("run_id", metavar="RUN")
    logs.add_argument("task_id", metavar="TASK")
    logs.add_argument("--try", dest="try_number", type=int, help="try number (default: the latest)")
    logs.set_defaults(handler=tasks_logs, configure_logging=False)


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

def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def _short(ts: str | None) -> str:
    return "-" if not ts else ts.replace("T", " ")[:19]


def dags_list(args: argparse.Namespace, settings: Settings) -> int:
    api = Api(settings)
    try:
        dags = api.pages("/api/v2/dags")
    finally:
        api.close()
    _table([[d["dag_id"], "yes" if d["paused"] else "no", d["schedule"] or "-", str(d["version"]),
             _short(d["next_run_at"]), d.get("source") or "-"] for d in dags],
           ["DAG", "PAUSED", "SCHEDULE", "VERSION", "NEXT RUN", "SOURCE"])
    return 0


def dags_pause(args: argparse.Namespace, settings: Settings) -> int:
    api = Api(settings)
    try:
        dag = api.json("PATCH", f"/api/v2/dags/{_quote(args.dag_id)}", json={"paused": args.paused})
    finally:
        api.close()
    print(f"{dag['dag_id']}: {'paused' if dag['paused'] else 'unpaused'}")
    return 0


# --------------------------------------------------------------------------- runs

def runs_trigger(args: argparse.Namespace, settings: Settings) -> int:
    api = Api(settings)
    try:
        body: dict[str, Any] = {"conf": args.conf or {}}
        if args.run_id:
            body["run_id"] = args.run_id
        run = api.request("POST", f"/api/v2/dags/{_quote(args.dag_id)}/runs", ok=(201,), json=body).json()
        print(f"{run['dag_id']}: triggered run {run['run_id']}")
        if not args.wait:
            return 0
        return _follow(api, run["dag_id"], run["run_id"])
    finally:
        api.close()


def _summary(run: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for task in run.get("tasks", []):
        counts[task["state"]] = counts.get(task["state"], 0) + 1
    total = sum(counts.values())
    parts = [f"{counts[s]} {s}" for s in STATE_ORDER if counts.get(s)]
    tasks = f"{total} tasks: " + ", ".join(parts) if total else "no tasks started yet"
    return f"run {run['run_id']}: {run['state']} ({tasks})"


def _follow(api: Api, dag_id: str, run_id: str) -> int:
    """Poll the run until it ends, redrawing one status line on a TTY (a line per change otherwise)."""
    tty = sys.stdout.isatty()
    path = f"/api/v2/dags/{_quote(dag_id)}/runs/{_quote(run_id)}"
    last = ""
    outage_since: float | None = None
    while True:
        try:
            run = api.json("GET", path)
            outage_since = None
        except ApiUnavailable as exc:
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > WAIT_OUTAGE_TOLERANCE:
                raise ClientError(f"gave up waiting for run {run_id}: {exc}") from None
            time.sleep(1.0)
            continue
        line = _summary(run)
        if line != last:
            if tty:
                print("\r\033[K" + line, end="", flush=True)
            else:
                print(line, flush=True)
            last = line
        if run["state"] in TERMINAL_RUN_STATES:
            if tty:
                print()
            failed = [t["task_id"] for t in run.get("tasks", []) if t["state"] in ("failed", "upstream_failed")]
            if run["state"] != "success":
                detail = f"; failed tasks: {', '.join(failed)}" if failed else ""
                print(f"leoflow: run {run_id} {run['state']}{detail}", file=sys.stderr)
                return 1
            return 0
        time.sleep(WAIT_POLL_INTERVAL)


def runs_list(args: argparse.Namespace, settings: Settings) -> int:
    if args.limit < 1:
        _usage("--limit must be at least 1")
    api = Api(settings)
    try:
        params = {"state": args.state} if args.state else {}
        runs = api.pages(f"/api/v2/dags/{_quote(args.dag_id)}/runs", params, limit=args.limit)
    finally:
        api.close()
    _table([[r["run_id"], r["state"], r["run_type"], _short(r["created_at"]), _short(r["ended_at"])]
            for r in runs], ["RUN", "STATE", "TYPE", "CREATED", "ENDED"])
    return 0


def runs_show(args: argparse.Namespace, settings: Settings) -> int:
    api = Api(settings)
    try:
        run = api.json("GET", f"/api/v2/dags/{_quote(args.dag_id)}/runs/{_quote(args.run_id)}")
    finally:
        api.close()
    print(f"dag:      {run['dag_id']} (version {run['dag_version']})")
    print(f"run:      {run['run_id']} ({run['run_type']})")
    print(f"state:    {run['state']}")
    print(f"created:  {_short(run['created_at'])}   started: {_short(run['started_at'])}   "
          f"ended: {_short(run['ended_at'])}")
    if run["conf"]:
        print(f"conf:     {json.dumps(run['conf'])}")
    print()
    _table([[t["task_id"], t["state"], f"{t['try_number']}/{t['max_tries']}", _short(t["started_at"]),
             _short(t["ended_at"]), t["reason"] or ""] for t in run["tasks"]],
           ["TASK", "STATE", "TRIES", "STARTED", "ENDED", "REASON"])
    return 0


def tasks_logs(args: argparse.Namespace, settings: Settings) -> int:
    if args.try_number is not None and args.try_number < 1:
        _usage("--try must be at least 1")
    api = Api(settings)
    try:
        params = {"try": args.try_number} if args.try_number else {}
        answer = api.request("GET", f"/api/v2/dags/{_quote(args.dag_id)}/runs/{_quote(args.run_id)}"
                             f"/tasks/{_quote(args.task_id)}/logs", params=params)
    finally:
        api.close()
    sys.stdout.write(answer.text)
    return 0


def _usage(message: str) -> NoReturn:
    print(f"leoflow: error: {message}", file=sys.stderr)
    raise SystemExit(2)

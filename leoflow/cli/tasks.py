"""``leoflow tasks ...``: task instances — list, show, mark, approve, reject, their logs and outputs.

``tasks list DAG RUN`` prints a run's task instances in the DAG's order (upstreams first, as
the dashboard shows them), not alphabetically; without RUN it lists task instances of every run
(or of one DAG's runs), newest first, filtered by ``--state`` and ``--since``. ``tasks mark``
is a day-2 command applied by the leader, reported as ``runs clear|mark`` are
(:func:`leoflow.cli.runs.report`). ``tasks outputs`` prints what a task published for the tasks
after it, one ``name: value`` line each (``tasks show`` ends with the same lines).

A mapped task (``map_over``) is one row of ``tasks list`` with its instances counted by state
(``INSTANCES``: ``3 (success 2, failed 1)``); ``tasks show``, ``outputs``, ``logs`` and ``mark``
(and ``runs clear --task T``) take ``--map-index N`` for one instance. Without it ``show`` sums
the task up, ``outputs`` prints each output as the list of its instances' values (as its
downstream reads them), and ``logs`` asks for an index (the API's 400 says so).

``tasks events DAG RUN TASK [--try N]`` prints the Kubernetes events of a try's pod
(``FailedMount``, ``BackOff``, …), kept with the try after its pod is gone.

``tasks approve|reject DAG RUN TASK [-m COMMENT]`` decides a task waiting for an approval
(``wait_for: [{approval: …}]``); ``tasks show`` lists what a waiting task waits for.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from leoflow.cli.dags import in_dag_order
from leoflow.cli.output import emitted, short, table, usage
from leoflow.cli.runs import report
from leoflow.cli.verbs import check_limit, noun, verb
from leoflow.client.api import Api, dag_path, q, run_path

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

#: How long `tasks logs --follow` rides out an unreachable API (a restarting replica) before giving up.
FOLLOW_OUTAGE_TOLERANCE = 120.0
TASK = "/api/v2/dags/{dag_id}/runs/{run_id}/tasks"


def register(sub: Any) -> None:
    tasks = noun(sub, "tasks", "task instances: list, show, mark, their logs and outputs (via the HTTP API)")
    lst = verb(tasks, "list", "list a run's task instances in the DAG's order; without RUN, task instances of "
               "every run (or DAG's runs), newest first", tasks_list, f"GET {TASK}", "GET /api/v2/dags/{dag_id}",
               "GET /api/v2/task-instances")
    lst.add_argument("dag_id", metavar="DAG", nargs="?", help="only this DAG's (default: every DAG's)")
    lst.add_argument("run_id", metavar="RUN", nargs="?", help="only this run's, in the DAG's order")
    lst.add_argument("--state", help="only task instances in this state")
    lst.add_argument("--since", metavar="TIME",
                     help="without RUN: only task instances of runs created at or after TIME (ISO 8601)")
    lst.add_argument("--limit", type=int, default=50, help="without RUN: most to show (default 50)")
    show = verb(tasks, "show", "show a task instance and every try", tasks_show, f"GET {TASK}/{{task_id}}")
    show.add_argument("dag_id", metavar="DAG")
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("task_id", metavar="TASK")
    _map_index_argument(show)
    logs = verb(tasks, "logs", "print a task's log (latest try unless --try)", tasks_logs,
                f"GET {TASK}/{{task_id}}/logs")
    logs.add_argument("dag_id", metavar="DAG")
    logs.add_argument("run_id", metavar="RUN")
    logs.add_argument("task_id", metavar="TASK")
    _map_index_argument(logs)
    logs.add_argument("--try", dest="try_number", type=int, help="try number (default: the latest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new output (live from the pod) until the try ends")
    logs.add_argument("--container", help="print the full archived log of this container (`task`, a sidecar, an "
                      "init container; needs LEOFLOW_LOG_ARCHIVE_URL on the server)")
    logs.add_argument("--offset", type=int, help="archived log: start at this byte")
    logs.add_argument("--tail-bytes", type=int, help="archived log: only its last N bytes")
    events = verb(tasks, "events", "print the Kubernetes events of a try's pod, kept with the try (latest try "
                  "unless --try)", tasks_events, f"GET {TASK}/{{task_id}}/events")
    events.add_argument("dag_id", metavar="DAG")
    events.add_argument("run_id", metavar="RUN")
    events.add_argument("task_id", metavar="TASK")
    _map_index_argument(events)
    events.add_argument("--try", dest="try_number", type=int, help="try number (default: the latest)")
    artifacts = verb(tasks, "artifacts", "list a task's output artifacts; with NAME, download one (.tar.gz) to "
                     "--to FILE or stdout", tasks_artifacts, f"GET {TASK}/{{task_id}}/artifacts",
                     f"GET {TASK}/{{task_id}}/artifacts/{{name}}")
    artifacts.add_argument("dag_id", metavar="DAG")
    artifacts.add_argument("run_id", metavar="RUN")
    artifacts.add_argument("task_id", metavar="TASK")
    artifacts.add_argument("name", metavar="NAME", nargs="?", help="download this artifact")
    artifacts.add_argument("--try", dest="try_number", type=int, metavar="N",
                           help="only this try's (a download: default the newest try that stored it)")
    artifacts.add_argument("--to", metavar="FILE", help="write the download here (default: stdout, if not a terminal)")
    _map_index_argument(artifacts)
    outputs = verb(tasks, "outputs", "print the outputs a task published (those of its try that succeeded)",
                   tasks_outputs, f"GET {TASK}/{{task_id}}/outputs")
    outputs.add_argument("dag_id", metavar="DAG")
    outputs.add_argument("run_id", metavar="RUN")
    outputs.add_argument("task_id", metavar="TASK")
    _map_index_argument(outputs)
    mark = verb(tasks, "mark", "mark a task instance success or failed; downstream follows as if it ended so",
                tasks_mark, f"POST {TASK}/{{task_id}}/mark")
    mark.add_argument("dag_id", metavar="DAG")
    mark.add_argument("run_id", metavar="RUN")
    mark.add_argument("task_id", metavar="TASK")
    mark.add_argument("state", choices=("success", "failed"))
    _map_index_argument(mark)
    for decision, helps in (("approve", "approve a task waiting for an approval: it runs"),
                            ("reject", "reject a task waiting for an approval: it fails with the comment")):
        gate = verb(tasks, decision, helps, tasks_decide, f"POST {TASK}/{{task_id}}/approval")
        gate.add_argument("dag_id", metavar="DAG")
        gate.add_argument("run_id", metavar="RUN")
        gate.add_argument("task_id", metavar="TASK")
        gate.add_argument("-m", "--comment", default="", help="why (stored with the decision and audited)")
        gate.set_defaults(decision=decision)


def _map_index_argument(parser: Any) -> None:
    parser.add_argument("--map-index", dest="map_index", type=int, metavar="N",
                        help="one instance of a mapped task (0 to its instance count - 1)")


def _map_query(args: argparse.Namespace) -> dict[str, Any]:
    """``?map_index=`` when ``--map-index`` is given; a negative one is a usage error before any request."""
    if args.map_index is None:
        return {}
    if args.map_index < 0:
        usage("--map-index must be at least 0")
    return {"map_index": args.map_index}


def instances(ti: dict[str, Any]) -> str:
    """A mapped task's instances, counted by state: ``3 (success 2, failed 1)``; "" for an unmapped task."""
    if ti.get("map_count") is None:
        return ""
    states = ti.get("map_states") or {}
    counted = ", ".join(f"{state} {states[state]}" for state in sorted(states, key=lambda st: (-states[st], st)))
    return f"{ti['map_count']} ({counted})" if counted else str(ti["map_count"])


def tasks_list(args: argparse.Namespace, client: ClientSettings) -> int:
    if args.run_id is None:
        return _tasks_anywhere(args, client)
    if args.since:
        usage("--since lists task instances across runs: leave out RUN")
    with Api(client) as api:
        params = {"state": args.state} if args.state else {}
        items = api.pages(f"{run_path(args.dag_id, args.run_id)}/tasks", params)
        spec = api.json("GET", dag_path(args.dag_id)).get("spec")
    items = in_dag_order(items, spec)
    if emitted(args, items):
        return 0
    if any(t.get("map_count") is not None for t in items):  # a column only where a task is mapped
        table([[t["task_id"], t["state"], instances(t), f"{t['try_number']}/{t['max_tries']}", short(t["started_at"]),
                short(t["ended_at"]), t["reason"] or ""] for t in items],
              ["TASK", "STATE", "INSTANCES", "TRIES", "STARTED", "ENDED", "REASON"])
        return 0
    table([[t["task_id"], t["state"], f"{t['try_number']}/{t['max_tries']}", short(t["started_at"]),
            short(t["ended_at"]), t["reason"] or ""] for t in items],
          ["TASK", "STATE", "TRIES", "STARTED", "ENDED", "REASON"])
    return 0


def _tasks_anywhere(args: argparse.Namespace, client: ClientSettings) -> int:
    params = {"state": args.state, "since": args.since, "dag_id": args.dag_id}
    with Api(client) as api:
        items = api.pages("/api/v2/task-instances", {k: v for k, v in params.items() if v},
                          limit=check_limit(args.limit))
    if emitted(args, items):
        return 0
    table([[t["dag_id"], t["run_id"], t["task_id"], t["state"], f"{t['try_number']}/{t['max_tries']}",
            short(t["started_at"]), short(t["ended_at"]), t["reason"] or ""] for t in items],
          ["DAG", "RUN", "TASK", "STATE", "TRIES", "STARTED", "ENDED", "REASON"])
    return 0


def tasks_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        ti = api.json("GET", f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}", params=_map_query(args))
    if emitted(args, ti):
        return 0
    print(f"task:     {ti['task_id']}")
    print(f"state:    {ti['state']}" + (f" ({ti['reason']})" if ti.get("reason") else ""))
    if ti.get("map_states") is not None:  # the mapped task as a whole: its instances, no tries of its own
        print(f"mapped:   {instances(ti)}; one of them: --map-index N")
        return 0
    if ti.get("map_index", -1) >= 0:
        print(f"instance: {ti['map_index']} of {ti['map_count']}")
    print(f"tries:    {ti['try_number']} of {ti['max_tries']}")
    print()
    table([[str(t["try_number"]), t["state"], short(t["started_at"]), short(t["ended_at"]),
            "-" if t["exit_code"] is None else str(t["exit_code"]), t["executor_ref"] or "-", t["reason"] or ""]
           for t in ti["tries"]], ["TRY", "STATE", "STARTED", "ENDED", "EXIT", "WHERE", "REASON"])
    if ti.get("waiting_for"):
        print()
        print("waiting for:")
        for wait in ti["waiting_for"]:
            print(f"  [{wait['state']}] {wait['reason']}" + (f" — {wait['failure']}" if wait.get("failure") else ""))
    if ti.get("outputs"):
        print()
        print("outputs:")
        for line in output_lines(ti["outputs"]):
            print(f"  {line}")
    return 0


def tasks_events(args: argparse.Namespace, client: ClientSettings) -> int:
    """One line per kept event, as ``kubectl describe pod`` lists them (its count when it repeated)."""
    params = _map_query(args)
    if args.try_number is not None:
        params["try"] = args.try_number
    with Api(client) as api:
        answer = api.json("GET", f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/events",
                          params=params)
    if emitted(args, answer):
        return 0
    if not answer["events"]:
        print(f"{args.dag_id}: run {args.run_id} task {args.task_id} try {answer['try_number']}: no pod events kept")
        return 0
    table([[short(e["last_seen"]), e["type"], e["reason"], e["container"] or "-",
            str(e["count"]), e["message"]] for e in answer["events"]],
          ["LAST SEEN", "TYPE", "REASON", "CONTAINER", "COUNT", "MESSAGE"])
    return 0


def tasks_outputs(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        answer = api.json("GET", f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/outputs",
                          params=_map_query(args))
    if emitted(args, answer):
        return 0
    if answer["outputs"] is None:
        # Not an error: the task exists and may still succeed; the state says why there is nothing.
        why = "it succeeded without any" if answer["state"] == "success" else f"it is {answer['state']}"
        which = f"task {args.task_id}" + (f"[{args.map_index}]" if args.map_index is not None else "")
        print(f"{args.dag_id}: run {args.run_id} {which} has no outputs: {why}")
        return 0
    for line in output_lines(answer["outputs"]):
        print(line)
    return 0


def tasks_artifacts(args: argparse.Namespace, client: ClientSettings) -> int:
    """The artifacts' table, or one artifact's bytes (never to a terminal: it is a .tar.gz)."""
    params = {**_map_query(args), **({"try": args.try_number} if args.try_number is not None else {})}
    path = f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/artifacts"
    if args.name is not None:
        if args.to is None and sys.stdout.isatty():
            usage("the artifact is a .tar.gz: give --to FILE, or redirect stdout")
        with Api(client) as api:
            answer = api.request("GET", f"{path}/{q(args.name)}", params=params)
        if args.to is None:
            sys.stdout.buffer.write(answer.content)
            sys.stdout.buffer.flush()
        else:
            with open(args.to, "wb") as f:
                f.write(answer.content)
            print(f"{args.to}: {len(answer.content):,} bytes (try {answer.headers.get('x-leoflow-try', '?')}, "
                  f"{answer.headers.get('x-leoflow-artifact-digest', '')})", file=sys.stderr)
        return 0
    with Api(client) as api:
        answer = api.json("GET", path, params=params)
    if emitted(args, answer):
        return 0
    table([[a["name"], str(a["try_number"]), a["kind"] or "-", f"{a['size_bytes']:,}", f"{a['stored_bytes']:,}",
            "yes" if a["complete"] else "no", a["problem"] or ""] for a in answer["artifacts"]],
          ["NAME", "TRY", "KIND", "BYTES", "STORED", "COMPLETE", "PROBLEM"])
    return 0


def output_lines(outputs: dict[str, Any]) -> list[str]:
    """``name: value`` per output, by name: a string as it is, anything else as compact JSON.

    A string holding a line break or another control character is printed as JSON too (quoted,
    escaped): one output stays one line, and a value cannot move the terminal's cursor or recolour it.
    """
    return [f"{name}: {_shown(outputs[name])}" for name in sorted(outputs)]


def _shown(value: Any) -> str:
    if isinstance(value, str) and value.isprintable():
        return value
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    # JSON escapes only U+0000 to U+001F: DEL and the C1 controls (U+009B is a CSI) need \u escapes.
    return text if text.isprintable() else json.dumps(value, separators=(",", ":"), sort_keys=True)


def tasks_logs(args: argparse.Namespace, client: ClientSettings) -> int:
    if args.try_number is not None and args.try_number < 1:
        usage("--try must be at least 1")
    path = f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/logs"
    instance = _map_query(args)
    archive = args.container is not None or args.offset is not None or args.tail_bytes is not None
    if archive:
        return _archived_logs(args, client, path, instance)
    with Api(client) as api:
        if args.follow:
            from leoflow.cli.log_follow import follow

            try:
                return follow(api, path, args.try_number, sys.stdout, outage_tolerance=FOLLOW_OUTAGE_TOLERANCE,
                              query=instance)
            except KeyboardInterrupt:
                return 130
        params = {**instance, **({"try": args.try_number} if args.try_number else {})}
        answer = api.request("GET", path, params=params)
    document = {"try_number": int(answer.headers.get("x-leoflow-try", "0")),
                "complete": answer.headers.get("x-leoflow-log-complete") == "true", "content": answer.text}
    if not emitted(args, document):
        sys.stdout.write(answer.text)
    return 0


def _archived_logs(args: argparse.Namespace, client: ClientSettings, path: str, instance: dict[str, Any]) -> int:
    from leoflow.cli.log_follow import print_archive

    if args.offset is not None and args.offset < 0:
        usage("--offset must be at least 0")
    if args.tail_bytes is not None and args.tail_bytes < 1:
        usage("--tail-bytes must be at least 1")
    if args.offset is not None and args.tail_bytes is not None:
        usage("--offset and --tail-bytes cannot be combined")
    query: dict[str, Any] = {**instance, "container": args.container or "task"}
    if args.try_number:
        query["try"] = args.try_number
    with Api(client) as api:
        try:
            return print_archive(api, path, query, sys.stdout.buffer, offset=args.offset, tail=args.tail_bytes,
                                 follow=args.follow, outage_tolerance=FOLLOW_OUTAGE_TOLERANCE)
        except KeyboardInterrupt:
            return 130


def tasks_decide(args: argparse.Namespace, client: ClientSettings) -> int:
    """``tasks approve|reject``: the decision is recorded at once; the leader applies it in its next step."""
    path = f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/approval"
    with Api(client) as api:
        answer = api.json("POST", path, json={"decision": args.decision, "comment": args.comment})
    if emitted(args, answer):
        return 0
    done = "approved" if args.decision == "approve" else "rejected"
    print(f"{args.dag_id}: run {args.run_id} task {args.task_id} {done} by {answer['decided_by']}")
    return 0


def tasks_mark(args: argparse.Namespace, client: ClientSettings) -> int:
    path = f"{run_path(args.dag_id, args.run_id)}/tasks/{q(args.task_id)}/mark"
    with Api(client) as api:
        answer = api.request("POST", path, ok=(200, 202), json={"state": args.state}, params=_map_query(args))
    which = f"task {args.task_id}" + (f"[{args.map_index}]" if args.map_index is not None else "")
    return report(args, answer.status_code, answer.json(), f"{args.dag_id}: run {args.run_id} {which}")

"""The verdict: exactly-once execution and no stale leader, from the request log and the database.

Every check returns ``(ok, details)``; :func:`run_checks` gathers them. Evidence sources:

- the fake Kubernetes API server's request log (``create`` entries carry the HTTP code, the pod
  name, and the pod's ``leoflow.io/term`` / ``leoflow.io/cluster`` labels, stamped on arrival);
- the soak database: ``task_instances``, ``task_tries``, ``task_logs``, ``dag_runs``,
  ``leader_terms`` and the commit-ordered ``chaos_audit`` (see :mod:`bench.chaos.audit`).

Term commit times come from PostgreSQL's commit timestamps; request times from the fake
server's wall clock — the same machine's clock.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos import audit, waits
from bench.chaos.workload import FLAKY_MARKER, MAP_DAG, MAP_ITEMS, Workload

TERMINAL = ("success", "failed", "upstream_failed", "cancelled")


@dataclass
class Verdict:
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, ok: bool, detail: Any = None) -> None:
        self.checks[name] = ok
        if detail is not None:
            self.details[name] = detail

    @property
    def ok(self) -> bool:
        return all(self.checks.values())


class TermClock:
    """Which term was the newest (committed) at a given wall-clock time."""

    def __init__(self, commits: list[tuple[int, str, float]]) -> None:
        self.commits = sorted(commits, key=lambda c: c[2])
        self.times = [c[2] for c in self.commits]
        running: list[int] = []
        best = 0
        for term, _node, _t in self.commits:
            best = max(best, term)
            running.append(best)
        self.newest = running

    def newest_at(self, t: float) -> int | None:
        i = bisect.bisect_right(self.times, t)
        return self.newest[i - 1] if i else None


def check_pods(verdict: Verdict, requests: list[dict[str, Any]], clock: TermClock, cluster: str,
               tries: dict[str, dict[str, Any]]) -> None:
    creates = [r for r in requests if r.get("verb") == "create"]
    created = [r for r in creates if r.get("code") == 201]
    per_name = Counter(r["name"] for r in created)
    duplicates = sorted(name for name, n in per_name.items() if n > 1)
    verdict.add("one_pod_per_try", not duplicates, {"pods_created": len(created), "duplicates": duplicates[:20],
                                                    "conflicts_409": sum(r.get("code") == 409 for r in creates),
                                                    "create_requests": len(creates)})
    stale, unlabelled = [], []
    for r in created:
        if r.get("cluster") != cluster or r.get("term") in (None, ""):
            unlabelled.append(r["name"])
            continue
        newest = clock.newest_at(r["time"])
        if newest is not None and newest > int(r["term"]):
            stale.append({"pod": r["name"], "term": int(r["term"]), "newest_then": newest, "at": r["time"]})
    verdict.add("no_pod_from_stale_term", not stale and not unlabelled,
                {"stale": stale[:20], "unlabelled": unlabelled[:20]})
    unknown = sorted(set(per_name) - set(tries))
    ran = [name for name, t in tries.items() if t["state"] in ("success", "failed") and t["exit_code"] is not None]
    missing = sorted(name for name in ran if per_name.get(name, 0) == 0)
    verdict.add("pods_match_tries", not unknown and not missing,
                {"pods_without_try": unknown[:20], "finished_tries_without_pod": missing[:20]})


def _tries(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    rows = conn.execute("""
        SELECT tt.executor_ref, tt.state, tt.exit_code, tt.try_number, ti.task_id, r.run_id,
               tt.ended_at IS NOT NULL, tt.logs_shipped_at IS NOT NULL, tl.id IS NOT NULL
        FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk LEFT JOIN task_logs tl ON tl.task_try_id = tt.id
        WHERE tt.executor_ref IS NOT NULL""").fetchall()
    keys = ("state", "exit_code", "try_number", "task_id", "run_id", "ended", "shipped", "has_log")
    return {str(r[0]): dict(zip(keys, r[1:], strict=True)) for r in rows}


def check_database(verdict: Verdict, conn: psycopg.Connection[Any], workload: Workload,
                   tries: dict[str, dict[str, Any]]) -> None:
    states = dict(conn.execute("SELECT state, count(*) FROM task_instances GROUP BY state").fetchall())
    unfinished = {s: n for s, n in states.items() if s not in TERMINAL}
    verdict.add("all_tasks_terminal", not unfinished, {"task_states": states})

    triggered = {r.run_id: r for r in workload.runs if r.triggered_at is not None}
    runs = {row[0]: row[1] for row in conn.execute("SELECT run_id, state FROM dag_runs").fetchall()}
    lost = sorted(set(triggered) - set(runs))
    not_done = sorted(rid for rid in triggered if runs.get(rid) not in ("success", "failed", "cancelled"))
    untriggered = sorted(r.run_id for r in workload.runs if r.triggered_at is None)
    verdict.add("no_run_lost", not lost and not not_done and not untriggered,
                {"runs": len(runs), "lost": lost, "unfinished": not_done, "never_triggered": untriggered,
                 "runs_by_state": dict(Counter(runs.values()))})
    cancelled_ok = [r.run_id for r in workload.runs if r.cancel_status == 200]
    wrong = [rid for rid in cancelled_ok if runs.get(rid) != "cancelled"]
    verdict.add("cancellations_honoured", not wrong, {"cancelled": len(cancelled_ok), "not_cancelled": wrong})

    finished = [t for t in tries.values() if t["state"] in ("success", "failed") and t["ended"]]
    no_logs = sorted(name for name, t in tries.items()
                     if t["state"] in ("success", "failed") and t["ended"] and not t["has_log"])
    verdict.add("logs_for_finished_tries", not no_logs, {"finished_tries": len(finished), "missing": no_logs[:20]})

    flaky = {(d["dag_id"], t["id"]) for d in workload.dags for t in d["tasks"]
             if FLAKY_MARKER in " ".join(t["command"])}
    rows = conn.execute("""SELECT d.dag_id, ti.task_id, ti.state, ti.try_number FROM task_instances ti
                           JOIN dag_runs d ON d.id = ti.run_pk WHERE ti.state = 'success'""").fetchall()
    flaky_success = [(r[0], r[1], r[3]) for r in rows if (r[0], r[1]) in flaky]
    first_try = [f"{d}.{t}" for d, t, n in flaky_success if n < 2]
    verdict.add("flaky_tasks_retried", bool(flaky_success) and not first_try,
                {"flaky_succeeded": len(flaky_success), "succeeded_on_first_try": first_try[:20]})

    check_failures(verdict, conn)
    check_mapped(verdict, conn)
    check_datasets(verdict, conn)

    stale = audit.stale_writes(conn)
    verdict.add("no_write_from_stale_term", not stale,
                {"audited_writes": audit.audited_writes(conn), "written_under_a_later_term": audit.later_writers(conn),
                 "stale": stale[:20]})


def check_archive(verdict: Verdict, conn: psycopg.Connection[Any], workload: Workload, archive_root: Path) -> None:
    """Every finished try's archived log equals what its task printed: no gap, no duplicate, no half
    object, complete (:func:`bench.chaos.audit.archive_audit`), across every leader the soak killed."""
    layered = {(d["dag_id"], t["id"]): FLAKY_MARKER in " ".join(t["command"])
               for d in workload.dags for t in d["tasks"]
               if audit.printed_lines(d["dag_id"], t["id"])[-1] in " ".join(t.get("command") or [])}
    found = audit.archive_audit(conn, archive_root, layered)
    verdict.add("archived_logs_equal_printed", found["problem_count"] == 0 and found["checksummed_tries"] > 0, found)


def check_mapped(verdict: Verdict, conn: psycopg.Connection[Any]) -> None:
    """The map workload: in every run that succeeded, the mapped task expanded once into exactly
    MAP_ITEMS instances, each succeeded, and each stored output is what its try wrote ({run}-{index})."""
    rows = conn.execute("""
        SELECT r.run_id, ti.map_index, ti.map_count, ti.state, tt.outputs
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        LEFT JOIN task_tries tt ON tt.task_instance_id = ti.id AND tt.try_number = ti.try_number
        WHERE r.dag_id = %s AND ti.task_id = 'process' AND r.state = 'success'
        ORDER BY r.run_id, ti.map_index""", (MAP_DAG,)).fetchall()
    by_run: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_run.setdefault(row[0], []).append(row)
    wrong = []
    for run_id, instances in by_run.items():
        expected = [(run_id, i, MAP_ITEMS, "success", {"v": f"{run_id}-{i}"}) for i in range(MAP_ITEMS)]
        if [tuple(r) for r in instances] != expected:
            wrong.append({"run_id": run_id, "instances": [list(r[1:]) for r in instances][:10]})
    verdict.add("mapped_instances_exactly_once", bool(by_run) and not wrong,
                {"successful_map_runs": len(by_run), "wrong": wrong[:5]})


def check_datasets(verdict: Verdict, conn: psycopg.Connection[Any]) -> None:
    """Every dataset event triggered each consuming DAG exactly once (ADR 0018): per consumer and URI,
    the events recorded equal those its dataset-triggered runs consumed plus those still queued,
    and no event id is in two of its runs. Read once the workload drained (nothing moves)."""
    recorded = dict(conn.execute("SELECT uri, count(*) FROM dataset_events GROUP BY uri").fetchall())
    consumers = conn.execute("SELECT dag_id, uri FROM dataset_references WHERE role = 'consumer'").fetchall()
    counted: dict[tuple[str, str], int] = Counter()
    spans: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for dag_id, events in conn.execute("SELECT dag_id, triggering_events FROM dag_runs "
                                       "WHERE run_type = 'dataset'").fetchall():
        for e in events or []:
            counted[(dag_id, e["uri"])] += e["events"]
            spans[(dag_id, e["uri"])].append((e["first_event_id"], e["last_event_id"]))
    for dag_id, uri, events in conn.execute("SELECT dag_id, uri, events FROM dataset_queue").fetchall():
        counted[(dag_id, uri)] += events
    wrong = [{"dag_id": d, "uri": u, "recorded": recorded.get(u, 0), "consumed_or_queued": counted[(d, u)]}
             for d, u in consumers if counted[(d, u)] != recorded.get(u, 0)]
    overlapping = [{"dag_id": d, "uri": u} for (d, u), s in spans.items()
                   if any(a[1] >= b[0] for a, b in itertools.pairwise(sorted(s)))]
    verdict.add("dataset_events_trigger_once", not wrong and not overlapping,
                {"events": sum(recorded.values()), "dataset_runs": sum(len(s) for s in spans.values()),
                 "wrong": wrong[:10], "in_two_runs": overlapping[:10]})


def check_failures(verdict: Verdict, conn: psycopg.Connection[Any]) -> None:
    """No try failed for any reason but its own command (issue 17): every try succeeded, or its
    container exited non-zero, or its run was cancelled. A try Leoflow failed itself ("the pod is
    gone", "timed out" — no task runs near its timeout here —, a kill of a run not cancelled) is
    work a fault cost the user."""
    rows = conn.execute("""
        SELECT r.run_id, ti.task_id, tt.try_number, tt.state, tt.exit_code, coalesce(tt.reason, ti.reason)
        FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
        WHERE NOT (tt.state = 'success'
                   OR (tt.state = 'failed' AND coalesce(tt.exit_code, 0) <> 0)
                   OR (r.state = 'cancelled' AND tt.state <> 'failed'))
        ORDER BY tt.id""").fetchall()
    bad = [{"try": f"{r[0]}.{r[1]}#{r[2]}", "state": r[3], "exit_code": r[4], "reason": r[5]} for r in rows]
    verdict.add("no_try_failed_but_by_its_command", not bad,
                {"failed": len(bad), "reasons": dict(Counter(str(b["reason"]) for b in bad)), "tries": bad[:20]})


def check_terms(verdict: Verdict, conn: psycopg.Connection[Any], clock: TermClock,
                requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Acting intervals never overlap; belief overlaps (recorded end after the successor's start) listed.

    A term *acts* when it creates a pod (201 with its term label) or commits a term-carrying
    write (``chaos_audit``). Term T's acting interval is [its commit, its last act]; it must end
    before any newer term committed. The product's own records (``leader_terms.ended_at``, the time
    the replica noticed the loss) may end later than the successor's start — a frozen process
    (SIGSTOP) or a killed lock session (``pg_terminate_backend``) learns of its loss only at its
    next keepalive. Those *belief* overlaps are safe only because nothing acted in them, which is
    what this check proves; they are reported, not failed.
    """
    rows = conn.execute("""SELECT term, node_id, extract(epoch FROM acquired_at)::float8,
                                  extract(epoch FROM ended_at)::float8, end_reason
                           FROM leader_terms ORDER BY term""").fetchall()
    terms = [{"term": r[0], "node": r[1], "acquired": r[2], "ended": r[3], "reason": r[4]} for r in rows]
    problems: list[dict[str, Any]] = []
    for prev, nxt in itertools.pairwise(terms):
        if nxt["acquired"] <= prev["acquired"]:
            problems.append({"term": nxt["term"], "problem": "acquired before its predecessor"})
    commit_order = [c[0] for c in clock.commits]
    if commit_order != sorted(commit_order):
        problems.append({"problem": "terms committed out of order", "order": commit_order})
    last_act: dict[int, float] = {}
    for term, t in audit.term_acts(conn):
        last_act[term] = max(last_act.get(term, t), t)
    for r in requests:
        if r.get("verb") == "create" and r.get("code") == 201 and str(r.get("term") or "").isdigit():
            term = int(r["term"])
            last_act[term] = max(last_act.get(term, r["time"]), r["time"])
    commits = {c[0]: c[2] for c in clock.commits}
    for term, last in sorted(last_act.items()):
        later = [(t, at) for t, at in commits.items() if t > term and at < last]
        if later:
            successor, at = min(later)
            problems.append({"term": term, "acted_until": last, "successor": successor,
                             "successor_committed": at, "overlap_s": round(last - at, 4)})
    belief = [{"term": prev["term"], "next": nxt["term"], "overlap_s": round(prev["ended"] - nxt["acquired"], 3),
               "reason": prev["reason"]}
              for prev, nxt in itertools.pairwise(terms)
              if prev["ended"] is not None and prev["reason"] != "superseded" and prev["ended"] > nxt["acquired"]]
    verdict.add("leadership_never_overlaps", not problems,
                {"terms": len(terms), "acting_overlaps": problems[:20], "belief_overlaps": belief[:50]})
    return terms


def run_checks(conn: psycopg.Connection[Any], requests: list[dict[str, Any]], workload: Workload,
               cluster: str, archive_root: Path | None = None) -> tuple[Verdict, list[dict[str, Any]], TermClock]:
    verdict = Verdict()
    clock = TermClock(audit.term_commits(conn))
    tries = _tries(conn)
    check_pods(verdict, requests, clock, cluster, tries)
    check_database(verdict, conn, workload, tries)
    if archive_root is not None:
        check_archive(verdict, conn, workload, archive_root)
    waits.check_waits(verdict, conn)
    terms = check_terms(verdict, conn, clock, requests)
    return verdict, terms, clock


def handovers(terms: list[dict[str, Any]]) -> list[float]:
    """Seconds from a recorded end of term (release, step-down) to the next term's start."""
    out = []
    for prev, nxt in itertools.pairwise(terms):
        if prev["ended"] is not None and prev["reason"] != "superseded":
            out.append(max(0.0, nxt["acquired"] - prev["ended"]))
    return out


def first_pod_after_acquire(requests: list[dict[str, Any]], clock: TermClock) -> tuple[list[float], int]:
    """Seconds from each term's commit to its first pod created (work resumed), and terms with no pod."""
    first: dict[int, float] = {}
    for r in requests:
        if r.get("verb") == "create" and r.get("code") == 201 and str(r.get("term") or "").isdigit():
            term = int(r["term"])
            first[term] = min(first.get(term, r["time"]), r["time"])
    commits = {c[0]: c[2] for c in clock.commits}
    delays = [round(first[t] - commits[t], 3) for t in first if t in commits]
    return delays, sum(1 for t in commits if t not in first)


def time_to_new_leader(faults: list[dict[str, Any]], terms: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per fault kind: seconds from injection to the first term acquired afterwards."""
    acquired = sorted(t["acquired"] for t in terms)
    out: dict[str, list[float]] = defaultdict(list)
    for f in faults:
        if f["target"] is None:
            continue
        i = bisect.bisect_right(acquired, f["at"])
        if i < len(acquired):
            out[f["kind"]].append(round(acquired[i] - f["at"], 3))
    return dict(out)
